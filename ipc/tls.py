"""Mutual TLS for the TCP link of agents placed on other machines (`tls://HOST:PORT`).

The orchestrator is its own certificate authority: at start it makes a CA and a server
certificate in `<state root>/tls/` (0600), and issues each launch of a remote agent a client
certificate (its common name is the agent's name) that reaches the agent through the Ray
actor's constructor, never the environment. The server requires a certificate signed by that CA;
the agent checks the server's against the same CA. Which launch of an agent may speak is still
decided by the per-launch credential in the ZMTP READY (`orchestrator.trust`), so a respawn
revokes the old launch's link even though its certificate is still valid.

Why TLS rather than ZMTP CURVE: asyncio's streams take an `ssl` context as they are, so our own
ROUTER and DEALER keep their ZMTP code and only open another transport; CURVE would mean
writing its handshake and per-frame crypto_box into our ZMTP reader (and a PyNaCl dependency).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # imported where used: a local run (no TLS link) never loads them
    import ssl

TLS_DIR = "tls"
# The common name of the peer's certificate, as the router adds it to the READY properties it
# hands to `admit` (a name no ZMTP peer can send: properties are ASCII names without ':').
PEER_NAME_PROPERTY = b":tls-peer"
CERT_DAYS = 3650


class ClientCredentials(msgspec.Struct, frozen=True):
    """What one launch of a remote agent needs to open the link (PEM bytes)."""

    ca: bytes
    cert: bytes
    key: bytes


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """`tls://HOST:PORT` -> (host, port)."""
    rest = endpoint.removeprefix("tls://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"not a tls://HOST:PORT endpoint: {endpoint!r}")
    return host.strip("[]"), int(port)


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class Authority:
    """The orchestrator's CA (made fresh each start: certificates of an earlier run are void)."""

    def __init__(self, directory: Path, server_host: str) -> None:
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509 = x509
        self._hashes = hashes
        self._serialization = serialization
        self._ec = ec
        self._oid = NameOID
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)
        self.directory = directory
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "goondan orchestrator CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_pem = self._ca_cert.public_bytes(serialization.Encoding.PEM)
        _write_private(directory / "ca.pem", self.ca_pem)
        _write_private(directory / "ca.key", self._key_pem(self._ca_key))
        cert, key = self._issue("goondan orchestrator", server_host, server=True)
        _write_private(directory / "server.pem", cert)
        _write_private(directory / "server.key", key)

    def _key_pem(self, key: object) -> bytes:
        s = self._serialization
        return key.private_bytes(  # type: ignore[attr-defined, no-any-return]
            s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()
        )

    def _issue(self, common_name: str, host: str | None, *, server: bool) -> tuple[bytes, bytes]:
        import datetime
        import ipaddress

        x509, oid = self._x509, self._x509.oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(self._oid.COMMON_NAME, common_name)]))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        oid.ExtendedKeyUsageOID.SERVER_AUTH
                        if server
                        else oid.ExtendedKeyUsageOID.CLIENT_AUTH
                    ]
                ),
                critical=False,
            )
        )
        if host is not None:
            try:
                alt: object = x509.IPAddress(ipaddress.ip_address(host))
            except ValueError:
                alt = x509.DNSName(host)
            builder = builder.add_extension(
                x509.SubjectAlternativeName([alt]),
                critical=False,
            )
        cert = builder.sign(self._ca_key, self._hashes.SHA256())
        return cert.public_bytes(self._serialization.Encoding.PEM), self._key_pem(key)

    def issue_client(self, agent: str) -> ClientCredentials:
        """A certificate for one launch of `agent` (its common name)."""
        cert, key = self._issue(agent, None, server=False)
        return ClientCredentials(self.ca_pem, cert, key)

    def server_context(self) -> ssl.SSLContext:
        """Requires a client certificate signed by this CA."""
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(self.directory / "server.pem", self.directory / "server.key")
        ctx.load_verify_locations(cadata=self.ca_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def client_context(credentials: ClientCredentials) -> ssl.SSLContext:
    """The agent's side: presents its certificate, trusts only the orchestrator's CA. The key
    goes through a private temporary file (the ssl module loads keys from files only), removed
    at once."""
    import ssl
    import tempfile

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cadata=credentials.ca.decode())
    # The CA is this orchestrator's alone: a chain to it is the check; the listener's address
    # may be a name the agent's node knows it by that is not in the server's certificate.
    ctx.check_hostname = False
    with tempfile.TemporaryDirectory(prefix="goondan-tls-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        _write_private(cert, credentials.cert)
        _write_private(key, credentials.key)
        ctx.load_cert_chain(cert, key)
    return ctx


def peer_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> bytes | None:
    """The common name of a verified peer certificate, or None."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for pair in rdn:
            if pair[0] == "commonName":
                return str(pair[1]).encode()
    return None


_client: ssl.SSLContext | None = None


def set_client_context(ctx: ssl.SSLContext) -> None:
    """This process's context for `tls://` endpoints (set once by a remote agent at start)."""
    global _client
    _client = ctx


def get_client_context() -> ssl.SSLContext:
    if _client is None:
        raise ValueError("a tls:// endpoint needs the agent's credentials (none were given)")
    return _client
