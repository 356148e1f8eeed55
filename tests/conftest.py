"""Shared fixtures: a real daemon process on a private data dir and socket,
and a connected client. Seeds of randomized tests are printed on failure."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from agentd.protocol.client import Client
from agentd.launch import start_daemon


def pytest_configure(config):
    """Child processes compile agentd's modules once per run, not at every start.

    The suite starts a Python process for every daemon, scripted agent and
    its guard, ``agentd mcp`` and CLI call. Under ``PYTHONDONTWRITEBYTECODE``
    each one compiled every agentd module it imports from source again —
    about a third of a CPU-second per daemon start here. The children keep
    the spirit of that setting (nothing is written beside the sources): their
    bytecode goes to a cache of this user's in the temporary directory
    (``PYTHONPYCACHEPREFIX``), which Python validates against the sources'
    mtime and size like any ``__pycache__``.
    """
    if not sys.flags.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"agentd-tests-pycache-{os.getuid()}")


def pytest_report_header(config):
    from tests.browser import ARTIFACTS, missing

    why = missing()
    return f"web console browser tests: {'skipped: ' + why if why else f'screenshots in {ARTIFACTS}'}"


@pytest.fixture
def short_dir():
    """A short directory for sockets (AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ad-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def socket_path(short_dir):
    return short_dir / "agentd.sock"


@pytest.fixture
async def daemon(data_dir, socket_path):
    """A real ``agentd serve`` child process; stopped with SIGTERM after the test."""
    proc = await start_daemon(data_dir, socket_path)
    try:
        yield proc
    finally:
        code = await proc.terminate()
        if code not in (0, -9):
            print(proc.log_text()[-4000:])


@pytest.fixture
async def client(daemon):
    async with Client.connect(daemon.socket) as c:
        yield c
