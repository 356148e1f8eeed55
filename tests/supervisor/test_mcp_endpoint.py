"""agentd's MCP tools served by the daemon itself (SPEC F9; issue 24 item 1):
the official MCP SDK's client lists and calls them over streamable HTTP and
through the ``agentd mcp`` stdio relay; ``initialize`` and the tool schemas
are what the spec says; a wrong, revoked or browser-borne request is refused;
the relay loads neither trio nor the SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import NotFound
from tests.helpers import configured_module_daemon, script, wait_event, wait_run_terminal

TIMEOUT = 60
CONFIG = '[providers.basic]\nkind = "scripted"\ncapabilities = { nativeFork = false }\n'


@pytest.fixture(scope="module")
def daemon(module_paths):
    """One daemon for the module (issue 28 item 13): each test asks for the
    endpoint of threads of its own; the idle-timeout test starts its own."""
    with configured_module_daemon(module_paths, CONFIG) as process:
        yield process


@pytest.fixture
async def client(daemon):
    async with Client.connect(daemon.socket) as c:
        yield c


def post(url: str, body: object, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One raw POST (blocking: run it in a thread)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


async def test_f9_the_sdks_http_client_lists_and_calls_agentds_tools(client):
    """F9: the SDK's streamable-HTTP client, with a thread's token from
    ``mcp.endpoint``, sees the three tools with object schemas and
    delegates a task whose answer is the tool's result."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    parent = (await client.call("thread.create", title="parent"))["threadId"]
    endpoint = await client.call("mcp.endpoint", parentThreadId=parent)
    assert endpoint["url"].startswith("http://127.0.0.1:") and endpoint["url"].endswith("/mcp")
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {endpoint['token']}"})
    with trio.fail_after(TIMEOUT):
        async with http, streamable_http_client(endpoint["url"], http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            initialized = await session.initialize()
            tools = (await session.list_tools()).tools
            answer = await session.call_tool("delegate_task", {
                "instructions": script({"say": "forty-two"}), "wait": True, "provider": "basic"})
            unknown = await session.call_tool("task_result", {"taskId": "thr_nope"})
    assert initialized.server_info.name == "agentd" and initialized.capabilities.tools is not None
    assert [tool.name for tool in tools] == ["delegate_task", "task_result", "task_cancel"]
    assert all(tool.input_schema["type"] == "object" for tool in tools)
    assert tools[0].input_schema["required"] == ["instructions", "wait"]
    assert not answer.is_error, answer
    assert answer.structured_content["finalAnswer"] == "forty-two"
    assert answer.structured_content["outcome"] == "completed"
    assert unknown.is_error and "no delegated task thr_nope" in unknown.content[0].text


async def test_f9_initialize_answers_as_the_spec_says_and_a_notification_is_accepted(client):
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    endpoint = await client.call("mcp.endpoint", parentThreadId=parent)
    auth = {"Authorization": f"Bearer {endpoint['token']}", "Accept": "application/json, text/event-stream"}
    status, headers, body = await trio.to_thread.run_sync(post, endpoint["url"], INITIALIZE, auth)
    assert status == 200 and headers["Content-Type"] == "application/json"
    result = json.loads(body)["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "agentd" and result["instructions"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await trio.to_thread.run_sync(post, endpoint["url"], note, auth))[0] == 202
    old = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": "1999-01-01"}}
    status, _, body = await trio.to_thread.run_sync(post, endpoint["url"], old, auth)
    assert json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
    unknown = {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}
    status, _, body = await trio.to_thread.run_sync(post, endpoint["url"], unknown, auth)
    assert json.loads(body)["error"]["code"] == -32601


async def test_f9_a_wrong_revoked_or_foreign_request_is_refused(daemon, client):
    """F9: no token, a wrong one, a session's token whose session is gone,
    a thread's token once the connection that asked for it closed — 401;
    a web page's request (``Origin``) 403; another ``Host`` 421; ``GET`` 405."""
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    async with Client.connect(daemon.socket) as other:
        endpoint = await other.call("mcp.endpoint", parentThreadId=parent)
        url, token = endpoint["url"], endpoint["token"]
        good = {"Authorization": f"Bearer {token}"}
        assert (await trio.to_thread.run_sync(post, url, INITIALIZE, good))[0] == 200
    grant_id = token.split(".")[0]
    for headers in ({}, {"Authorization": f"Bearer {grant_id}.wrong"}, {"Authorization": "Bearer pss_1.secret"}):
        status, answer_headers, _ = await trio.to_thread.run_sync(post, url, INITIALIZE, headers)
        assert status == 401 and answer_headers["WWW-Authenticate"].startswith("Bearer"), headers
    with trio.fail_after(TIMEOUT):
        # The daemon revokes it when it sees the connection closed: each try is a round trip.
        while (await trio.to_thread.run_sync(post, url, INITIALIZE, good))[0] != 401:
            pass
    fresh = {"Authorization": f"Bearer {(await client.call('mcp.endpoint', parentThreadId=parent))['token']}"}
    assert (await trio.to_thread.run_sync(post, url, INITIALIZE, {**fresh, "Origin": "http://evil.example"}))[0] == 403
    port = url.split(":")[2].split("/")[0]
    assert (await trio.to_thread.run_sync(post, url, INITIALIZE, {**fresh, "Host": f"evil.example:{port}"}))[0] == 421

    def get() -> int:
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=fresh), timeout=TIMEOUT).status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert await trio.to_thread.run_sync(get) == 405
    with pytest.raises(NotFound):
        await client.call("mcp.endpoint", parentThreadId="thr_nope")


async def test_f9_a_sessions_token_stops_working_when_its_session_ends(tmp_path, short_dir):
    """F9: the scripted session's token (``<sessionId>.<credential>``) is
    good while the session lives and refused once it ended (idle)."""
    config = tmp_path / "config.toml"
    config.write_text("[daemon]\nidle_timeout = 0.5\n" + CONFIG)
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            await _session_token_is_revoked(client, tmp_path)
    finally:
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


async def _session_token_is_revoked(client: Client, tmp_path) -> None:
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    sent = await client.call("thread.message.send", threadId=parent, text="hello")
    await wait_run_terminal(client, parent, sent["runId"], timeout=TIMEOUT)
    session = next(s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == parent)
    credential = (tmp_path / "data" / "run" / "tool-credentials" / session["id"]).read_text()
    url = (await client.call("mcp.endpoint", parentThreadId=parent))["url"]
    auth = {"Authorization": f"Bearer {session['id']}.{credential}"}
    assert (await trio.to_thread.run_sync(post, url, INITIALIZE, auth))[0] == 200
    # The idle timeout ends the session; its credential is revoked before that is recorded.
    await wait_event(client, lambda e: e["type"] == "session.stopped", thread_id=parent, timeout=TIMEOUT)
    assert (await trio.to_thread.run_sync(post, url, INITIALIZE, auth))[0] == 401


async def test_f9_the_relay_answers_initialize_on_stdio_without_trio_or_the_sdk(daemon, client):
    """Issue 24: ``agentd mcp --thread`` relays stdio to the endpoint; it
    loads neither trio nor the MCP SDK (that is what made it slow)."""
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    code = ("import sys, runpy\n"
            "sys.argv = ['agentd', 'mcp', '--thread', sys.argv[1]]\n"
            "import atexit\n"
            "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('trio', 'mcp', 'pydantic', 'argparse',"
            " 'agentd.commands') if m in sys.modules)))\n"
            "runpy.run_module('agentd', run_name='__main__')\n")
    # … nor argparse and the commands: plain arguments take the relay before the parser loads.
    line = json.dumps(INITIALIZE).encode() + b"\n"

    def run() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-c", code, parent], input=line, capture_output=True, timeout=TIMEOUT,
                              env={**os.environ, "AGENTD_SOCKET": str(daemon.socket)})

    done = await trio.to_thread.run_sync(run)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "agentd"
    assert done.stderr.decode().strip() == ""


def relay_alone(tmp_path) -> list[str]:
    """The relay's file copied alone into an empty folder (as a wheel or any
    install carries it), run as agentd gives it to an ACP agent: isolated,
    without ``site`` — so nothing of agentd, nor any installed package, is
    importable beside it."""
    from agentd.actors.providers.agentd_tool import relay_command
    from agentd.protocol import mcp_relay

    assert relay_command() == mcp_relay.command(sys.executable, mcp_relay.__file__)
    assert relay_command()[:4] == [sys.executable, "-I", "-S", "-c"]
    alone = tmp_path / "alone" / "mcp_relay.py"
    alone.parent.mkdir(exist_ok=True)
    alone.write_bytes(open(mcp_relay.__file__, "rb").read())
    return mcp_relay.command(sys.executable, str(alone))


async def test_f9_the_relay_file_alone_serves_the_sdks_stdio_client(daemon, client, tmp_path):
    """Issue 24: the relay runs as a file without ``site`` and without agentd
    importable: the official MCP SDK's stdio client initializes, lists the
    three tools and calls one through it (``--thread``)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command = relay_alone(tmp_path)
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    server = StdioServerParameters(command=command[0], args=[*command[1:], "--thread", parent],
                                   env={"AGENTD_SOCKET": str(daemon.socket)})
    with trio.fail_after(TIMEOUT):
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            initialized = await session.initialize()
            tools = (await session.list_tools()).tools
            answer = await session.call_tool("delegate_task", {
                "instructions": script({"say": "through the relay"}), "wait": True, "provider": "basic"})
    assert initialized.server_info.name == "agentd"
    assert [tool.name for tool in tools] == ["delegate_task", "task_result", "task_cancel"]
    assert not answer.is_error, answer
    assert answer.structured_content["finalAnswer"] == "through the relay"


async def test_f9_a_sessions_relay_makes_its_token_without_asking_the_daemon(daemon, client, tmp_path):
    """Issue 24: with the endpoint and the session's credential in its
    environment (what an ACP agent's relay gets), the relay posts with the
    session's token and needs no daemon socket; a wrong credential is the
    endpoint's refusal, answered to the request."""
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    sent = await client.call("thread.message.send", threadId=parent, text="hello")
    await wait_run_terminal(client, parent, sent["runId"], timeout=TIMEOUT)
    session = next(s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == parent)
    endpoint = await client.call("mcp.endpoint", parentThreadId=parent)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-credential")
    lines = (json.dumps(INITIALIZE) + "\n" + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}) + "\n").encode()

    command = relay_alone(tmp_path)
    mine = daemon.data_dir / "run" / "tool-credentials" / session["id"]

    def run(credential: str) -> subprocess.CompletedProcess[bytes]:
        env = {"AGENTD_SESSION_ID": session["id"], "AGENTD_TOOL_CREDENTIAL": credential,
               "AGENTD_MCP_URL": endpoint["url"], "AGENTD_MCP_SOCKET": endpoint["socket"]}
        return subprocess.run(command, input=lines, capture_output=True, timeout=TIMEOUT, env=env)

    done = await trio.to_thread.run_sync(run, str(mine))
    assert done.returncode == 0, done.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["serverInfo"]["name"] == "agentd"
    assert [tool["name"] for tool in answers[2]["result"]["tools"]] == ["delegate_task", "task_result", "task_cancel"]
    refused = await trio.to_thread.run_sync(run, str(wrong))
    assert refused.returncode == 0, refused.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, refused.stdout.splitlines())}
    assert "401" in answers[1]["error"]["message"] and "401" in answers[2]["error"]["message"]


def test_f9_agentd_mcp_takes_plain_arguments_before_its_parser():
    """``agentd mcp``'s arguments the relay reads itself; anything else is
    left to the full parser (help, usage errors)."""
    from agentd.protocol.mcp_relay import parse_args

    assert parse_args(["--thread", "thr_1", "--socket=/s"]) == {"thread_id": "thr_1", "socket_path": "/s"}
    assert parse_args(["--session", "pss_1"]) == {"session_id": "pss_1"}
    assert parse_args([]) == {}
    for argv in (["--help"], ["--thread"], ["--thread", ""], ["--thread", "a", "--thread", "b"], ["--thread", "--socket"],
                 ["x"], ["--json"]):
        assert parse_args(argv) is None, argv


#: an agent's command that calls a tool on the endpoint with a token it was given (argv: url, token)
STEAL = ("import json, sys\n"
         "from agentd.protocol.mcp_client import call_tool\n"
         "error, result = call_tool(sys.argv[1], sys.argv[2], 'delegate_task',"
         " {'instructions': 'x', 'wait': False, 'provider': 'basic'})\n"
         "print(json.dumps({'error': error, 'result': result}))\n")


async def test_f9_an_agents_command_cannot_use_another_sessions_token(daemon, client, tmp_path):
    """Item 11 over HTTP: a command of one agent that read another session's
    credential (the person's files are the agent's too) posts that session's
    token: the peer is not that session's process, and the tool refuses."""
    victim = (await client.call("thread.create", title="victim"))["threadId"]
    sent = await client.call("thread.message.send", threadId=victim, text="hello")
    await wait_run_terminal(client, victim, sent["runId"], timeout=TIMEOUT)
    session = next(s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == victim)
    token = f"{session['id']}.{(daemon.data_dir / 'run' / 'tool-credentials' / session['id']).read_text()}"
    url = (await client.call("mcp.endpoint", parentThreadId=victim))["url"]
    thief = (await client.call("thread.create", title="thief"))["threadId"]
    attack = await client.call("thread.message.send", threadId=thief, text=script(
        {"command": {"argv": [sys.executable, "-c", STEAL, url, token]}}))
    run = await wait_run_terminal(client, thief, attack["runId"], timeout=TIMEOUT)
    [node] = [n for n in (await client.call("run.get", runId=run["id"]))["nodes"] if n["kind"] == "command_execution"]
    report = json.loads(node["detail"]["aggregatedOutput"])
    assert "is refused" in report["error"] and "not from a process of that session's runtime" in report["error"], report
    assert [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == victim] == []


async def test_f9_a_body_declared_over_the_cap_is_refused_before_it_is_sent(client):
    """A request whose ``Content-Length`` passes the cap gets ``413`` at once,
    without the daemon waiting for (or reading) that much."""
    import socket

    parent = (await client.call("thread.create", title="parent"))["threadId"]
    endpoint = await client.call("mcp.endpoint", parentThreadId=parent)
    port = int(endpoint["url"].split(":")[2].split("/")[0])

    def ask() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {endpoint['token']}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{".encode())
            return s.recv(200)

    answer = await trio.to_thread.run_sync(ask)
    assert answer.startswith(b"HTTP/1.1 413"), answer
