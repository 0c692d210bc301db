"""Fixtures of the socket tests: a short directory for unix sockets and a libzmq context."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq


@pytest.fixture
def directory() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gi-"))  # short: unix socket paths max 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)
