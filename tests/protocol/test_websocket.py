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
from tests.helpers import daemon_for_module


@pytest.fixture(scope="module")
def shared_ws_daemon(module_paths):
    """One daemon with a WebSocket for the module (issue 28 item 13): no test
    changes its token or listener."""
    with daemon_for_module(start_daemon, *module_paths, extra_args=["--websocket-port", "0"]) as daemon:
        yield daemon


@pytest.fixture
async def ws_daemon(shared_ws_daemon):
    from agentd.protocol.client import Client

    daemon = shared_ws_daemon
    async with Client.connect(daemon.socket) as client:
        url = (await client.call("daemon.status"))["websocket"]
    token = (daemon.data_dir / "websocket.token").read_text().strip()
    return daemon, url, token


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


async def call(ws, request_id: int, method: str, **params) -> dict:
    await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
    while True:
        message = json.loads(await ws.get_message())
        if message.get("id") == request_id:
            return message


async def test_token_file_is_private_and_methods_work(ws_daemon):
    daemon, url, token = ws_daemon
    mode = stat.S_IMODE(os.stat(daemon.data_dir / "websocket.token").st_mode)
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


async def raw_http(port: int, head: str) -> bytes:
    """Send a request head by hand (headers repeated as given) and read the
    status line of the answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head.replace("\n", "\r\n").encode() + b"\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


async def test_a_repeated_origin_host_or_authorization_header_is_refused_outright(tmp_path, short_dir):
    """Hostile round item 12e (F20): only the first of two ``Origin`` headers
    was checked. A request that repeats ``Origin``, ``Host`` or
    ``Authorization`` is refused (400) whatever the first one says, on the
    WebSocket upgrade and on the console's pages; the same requests without
    the repeat are served."""
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", extra_args=["--websocket-port", "0", "--web"])
    try:
        from agentd.protocol.client import Client

        async with Client.connect(daemon.socket) as client:
            port = port_of((await client.call("daemon.status"))["websocket"])
        token = (tmp_path / "data" / "websocket.token").read_text().strip()
        upgrade = ("GET / HTTP/1.1\nHost: 127.0.0.1:{port}\nUpgrade: websocket\nConnection: Upgrade\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\n").format(port=port)
        good_origin, bearer = f"Origin: http://127.0.0.1:{port}\n", f"Authorization: Bearer {token}\n"
        page = f"GET / HTTP/1.1\nHost: 127.0.0.1:{port}\n"
        with trio.fail_after(30):
            assert (await raw_http(port, upgrade + good_origin + bearer)).startswith(b"HTTP/1.1 101")
            assert (await raw_http(port, page)).startswith(b"HTTP/1.1 200")
            for head in [
                upgrade + good_origin + "Origin: http://evil.example\n" + bearer,
                upgrade + good_origin + bearer + "Authorization: Bearer wrong\n",
                upgrade + good_origin + bearer + "Host: evil.example\n",
                page + "Host: evil.example\n",
                page + good_origin + "Origin: http://evil.example\n",
            ]:
                status = await raw_http(port, head)
                assert status.startswith(b"HTTP/1.1 400"), (head, status)
    finally:
        assert await daemon.terminate() == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_peer_of_a_loopback_connection_is_found_with_its_uid(host):
    """Hostile round item 5 (F20): the kernel's socket table names the user
    holding the other end of a loopback connection (what ``POST /login``
    checks); a peer that is not there is None, never a guess."""
    import socket

    from agentd.protocol import peer_uid

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.socket(family)
        listener.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    with listener:
        listener.listen()
        with socket.create_connection(listener.getsockname()[:2]) as client:
            server, _ = listener.accept()
            with server:
                assert peer_uid.of_loopback_tcp(server.getsockname(), server.getpeername()) == os.getuid()
                gone = (server.getpeername()[0], client.getsockname()[1] ^ 1)
                assert peer_uid.of_loopback_tcp(server.getsockname(), gone) is None
