"""Fixtures of the socket and in-process daemon tests: a short directory for unix sockets, a
libzmq context, and the process state a daemon's `serve` changes."""

import gc
import os
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


@pytest.fixture
def process_state() -> Iterator[None]:
    """What a `Daemon.serve` in this process changes in it, put back for the next tests."""
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)
    gc.unfreeze()
