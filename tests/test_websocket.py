"""The protocol over a loopback WebSocket (F20): token, origin and the same methods."""

from __future__ import annotations

import json
import os
import stat

import pytest
import trio
import trio_websocket

from agentd.launch import start_daemon
from agentd.protocol.websocket import check_loopback


@pytest.fixture
async def ws_daemon(tmp_path, short_dir):
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", extra_args=["--websocket-port", "0"])
    try:
        from agentd.protocol.client import Client

        async with Client.connect(daemon.socket) as client:
            url = (await client.call("daemon.status"))["websocket"]
        token = (tmp_path / "data" / "websocket.token").read_text().strip()
        yield daemon, url, token
    finally:
        assert await daemon.terminate() == 0


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


async def call(ws, request_id: int, method: str, **params) -> dict:
    await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
    while True:
        message = json.loads(await ws.get_message())
        if message.get("id") == request_id:
            return message


async def test_token_file_is_private_and_methods_work(ws_daemon, tmp_path):
    daemon, url, token = ws_daemon
    mode = stat.S_IMODE(os.stat(tmp_path / "data" / "websocket.token").st_mode)
    assert mode == 0o600
    with trio.fail_after(30):
        async with trio_websocket.open_websocket("127.0.0.1", port_of(url), "/", use_ssl=False,
                                                  extra_headers=[(b"Authorization", f"Bearer {token}".encode())]) as ws:
            created = await call(ws, 1, "thread.create", title="over ws")
            thread_id = created["result"]["threadId"]
            sub = await call(ws, 2, "events.subscribe", threadId=thread_id)
            assert sub["result"]["subscriptionId"]
            sent = await call(ws, 3, "thread.message.send", threadId=thread_id, text="hi")
            assert "runId" in sent["result"]
            while True:
                message = json.loads(await ws.get_message())
                if message.get("method") == "event" and message["params"]["type"] == "run.completed":
                    break
            bad = await call(ws, 4, "thread.get", threadId=5)
            assert bad["error"]["data"]["kind"] == "invalid_params"


@pytest.mark.parametrize("headers", [
    [],
    [(b"Authorization", b"Bearer wrong")],
])
async def test_a_missing_or_wrong_token_is_refused(ws_daemon, headers):
    daemon, url, token = ws_daemon
    with trio.fail_after(30), pytest.raises(trio_websocket.ConnectionRejected) as info:
        async with trio_websocket.open_websocket("127.0.0.1", port_of(url), "/", use_ssl=False, extra_headers=headers):
            pass
    assert info.value.status_code == 401


async def test_a_browser_origin_is_refused_even_with_the_token(ws_daemon):
    daemon, url, token = ws_daemon
    headers = [(b"Authorization", f"Bearer {token}".encode()), (b"Origin", b"http://evil.example")]
    with trio.fail_after(30), pytest.raises(trio_websocket.ConnectionRejected) as info:
        async with trio_websocket.open_websocket("127.0.0.1", port_of(url), "/", use_ssl=False, extra_headers=headers):
            pass
    assert info.value.status_code == 403


async def test_token_in_the_query_string_works(ws_daemon):
    daemon, url, token = ws_daemon
    with trio.fail_after(30):
        async with trio_websocket.open_websocket("127.0.0.1", port_of(url), f"/?token={token}", use_ssl=False) as ws:
            assert "pid" in (await call(ws, 1, "daemon.status"))["result"]


def test_only_loopback_hosts_are_accepted():
    check_loopback("127.0.0.1")
    check_loopback("::1")
    with pytest.raises(ValueError, match="loopback only"):
        check_loopback("0.0.0.0")
