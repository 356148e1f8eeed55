"""Shared fixtures: a real daemon process on a private data dir and socket,
and a connected client. Seeds of randomized tests are printed on failure."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from agentd.protocol.client import Client
from agentd.launch import start_daemon


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
