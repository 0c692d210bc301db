"""The per-launch secret a child presents in its ZMTP READY, so agents.sock admits only the
processes the orchestrator launched (DESIGN.md "Trust").

It never travels in argv or the environment (same-uid processes read both in /proc): a forked
agent gets it in memory from the template, a fresh interpreter reads it from an inherited pipe
(`--credential-fd N`).
"""

from __future__ import annotations

import os
import secrets

CREDENTIAL_PROPERTY = b"X-Goondan-Credential"


def new_credential() -> bytes:
    """A fresh secret for one launch (hex: it also goes in a line of JSON and a file)."""
    return secrets.token_hex(32).encode()


def properties(credential: bytes | None) -> dict[bytes, bytes] | None:
    """The READY properties that present `credential` (None: present nothing)."""
    return None if credential is None else {CREDENTIAL_PROPERTY: credential}


def read_credential_fd(fd: int) -> bytes:
    """Read the credential the parent wrote to inherited pipe `fd`, then close it."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    credential = b"".join(chunks).strip()
    if not credential:
        raise ValueError(f"--credential-fd {fd}: no credential on the pipe")
    return credential
