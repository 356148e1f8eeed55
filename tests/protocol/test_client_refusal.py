"""A connection the daemon turns away (F20, hostile round item 12b: out of
descriptors it sends one ``overloaded`` line without an id and closes) is
reported to the user as that error by both clients — whether the refusal
arrives before or after the client wrote its request — not as a bare
"connection lost"."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import trio

from agentd.connection import ConnectionLost as CliConnectionLost
from agentd.connection import DaemonConnection
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError, Overloaded

REFUSAL = (json.dumps({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32000, "message": "agentd cannot take another connection now (descriptor limit 40); retry shortly",
    "data": {"kind": "overloaded", "limit": 40}}}) + "\n").encode()


def test_the_cli_reports_a_refusal_sent_before_it_wrote():
    ours, theirs = socket.socketpair()
    theirs.sendall(REFUSAL)
    theirs.close()  # so the request's write fails (EPIPE) with the refusal unread
    with DaemonConnection(ours) as daemon, pytest.raises(Overloaded, match="retry shortly"):
        daemon.call("daemon.status")


def test_the_cli_reports_a_refusal_sent_after_it_wrote():
    ours, theirs = socket.socketpair()
    theirs.settimeout(10)
    with DaemonConnection(ours) as daemon:

        def refuse() -> None:
            theirs.recv(65536)
            theirs.sendall(REFUSAL)
            theirs.close()

        server = threading.Thread(target=refuse)
        server.start()
        try:
            with pytest.raises(Overloaded):
                daemon.call("daemon.status")
        finally:
            server.join()


def test_the_cli_still_says_lost_when_the_daemon_said_nothing():
    ours, theirs = socket.socketpair()
    theirs.close()
    with DaemonConnection(ours) as daemon, pytest.raises(CliConnectionLost):
        daemon.call("daemon.status")


@pytest.mark.parametrize("refuse_first", [True, False], ids=["refused-before-the-call", "refused-after-the-call"])
async def test_the_async_client_reports_a_refusal(tmp_path, refuse_first):
    path = tmp_path / "s.sock"
    listener_sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener_sock.bind(str(path))
    listener_sock.listen()
    listener = trio.SocketListener(listener_sock)
    refused = trio.Event()

    async def refuse() -> None:
        stream = await listener.accept()
        if not refuse_first:
            await stream.receive_some(65536)  # the request came
        await stream.send_all(REFUSAL)
        await stream.aclose()
        refused.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refuse)
        with trio.fail_after(10):
            async with Client.connect(path) as client:
                if refuse_first:
                    await refused.wait()
                with pytest.raises(Overloaded, match="retry shortly") as caught:
                    await client.call("daemon.status")
                assert caught.value.connection_refused, "marked: a new connection may be served"
        await listener.aclose()


async def test_the_async_client_still_says_lost_when_the_daemon_said_nothing(tmp_path):
    path = tmp_path / "s.sock"
    listener_sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener_sock.bind(str(path))
    listener_sock.listen()
    listener = trio.SocketListener(listener_sock)

    async def hang_up() -> None:
        stream = await listener.accept()
        await stream.receive_some(65536)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hang_up)
        with trio.fail_after(10):
            async with Client.connect(path) as client:
                with pytest.raises(AgentdError, match="closed the connection") as caught:
                    await client.call("daemon.status")
                assert not isinstance(caught.value, Overloaded)
        await listener.aclose()
