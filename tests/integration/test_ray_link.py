"""The TCP link of Ray-placed agents (`ipc.tls`): our own ROUTER and DEALER over mutual TLS,
with the orchestrator's admission (`orchestrator.trust`). No Ray here: the link alone."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

from ipc import tls, zmtp
from ipc.credential import new_credential, properties
from ipc.dealer import Dealer
from ipc.router_limits import RouterLimits
from ipc.router_socket import RouterSocket
from orchestrator.supervisor import Slot
from orchestrator.trust import Refused, admit
from tests.waiting import until


class Link:
    def __init__(self, directory: Path) -> None:
        self.authority = tls.Authority(directory / "tls", "127.0.0.1")
        self.slot = Slot("worker", "agent")
        self.slot.credential = new_credential()
        self.got: list[list[bytes]] = []
        self.refused: list[str] = []
        self.router = RouterSocket(
            f"ipc://{directory}/agents.sock",
            self.got.append,
            admit=self._admit,
            on_peer_error=lambda identity, reason: self.refused.append(reason),
            limits=RouterLimits(handshake_timeout_s=0.5),
        )

    def _admit(self, identity: bytes, found: dict[bytes, bytes]) -> str | None:
        slot = self.slot if identity == b"worker" else None
        try:
            admit(slot, found, b"operator key")
        except Refused as exc:
            return str(exc)
        return None

    async def start(self) -> str:
        self.router.start()
        host, port = await self.router.listen_tls("127.0.0.1", 0, self.authority.server_context())
        return f"tls://{host}:{port}"

    def dealer(self, endpoint: str, cert_name: str, credential: bytes | None) -> Dealer:
        tls.set_client_context(tls.client_context(self.authority.issue_client(cert_name)))
        assert credential is not None
        dealer = Dealer(endpoint, "worker", lambda f: None, properties=properties(credential))
        dealer.start()
        return dealer


async def test_an_agent_with_its_certificate_and_credential_gets_through(directory):
    link = Link(directory)
    endpoint = await link.start()
    dealer = link.dealer(endpoint, "worker", link.slot.credential)
    try:
        dealer.send([b"hello over tls"])
        await until(lambda: link.got)
        assert link.got == [[b"worker", b"hello over tls"]]
        for name in ("ca.key", "server.key", "ca.pem", "server.pem"):
            assert stat.S_IMODE((directory / "tls" / name).stat().st_mode) == 0o600
    finally:
        dealer.close()
        link.router.close()


async def test_a_certificate_for_another_agent_is_refused(directory):
    link = Link(directory)
    endpoint = await link.start()
    dealer = link.dealer(endpoint, "coordinator", link.slot.credential)
    try:
        dealer.send([b"let me in"])
        await until(lambda: link.refused)
        assert "its certificate is not this agent's" in link.refused[0]
        assert link.got == []
    finally:
        dealer.close()
        link.router.close()


async def test_a_respawn_revokes_the_old_launch(directory):
    link = Link(directory)
    endpoint = await link.start()
    old = link.slot.credential
    assert old is not None
    link.slot.credential = new_credential()  # what the supervisor does at each launch
    dealer = link.dealer(endpoint, "worker", old)
    try:
        dealer.send([b"still me?"])
        await until(lambda: link.refused)
        assert "wrong credential" in link.refused[0]
        assert link.got == []
    finally:
        dealer.close()
        link.router.close()


async def test_the_operator_key_is_not_accepted_over_tls(directory):
    link = Link(directory)
    endpoint = await link.start()
    link.slot.credential = None  # no process of its own: locally, the key would do
    dealer = link.dealer(endpoint, "worker", b"operator key")
    try:
        dealer.send([b"external"])
        await until(lambda: link.refused)
        assert "wrong credential" in link.refused[0]
    finally:
        dealer.close()
        link.router.close()


async def test_a_peer_without_a_certificate_gets_nothing_and_is_logged(directory):
    link = Link(directory)
    endpoint = await link.start()
    host, port = tls.parse_endpoint(endpoint)
    reader, writer = await asyncio.open_connection(host, port)  # plain TCP, no TLS
    writer.write(zmtp.GREETING)
    try:
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing said
        await until(lambda: link.refused)
        assert "did not finish its TLS handshake" in link.refused[0]
        assert link.got == []
    finally:
        writer.close()
        link.router.close()
