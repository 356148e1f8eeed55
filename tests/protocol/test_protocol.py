"""The JSON-RPC 2.0 boundary, driven over a real daemon's Unix socket.

SPEC: F20 clients/IPC (framing, error codes and kinds, notifications, the
socket's permissions), F1 thread create (params, commandId receipts, nothing
stored for a refused request), F2 runs (dispatch while a run is active,
commandId on thread.message.send).

Raw-protocol tests write bytes themselves and read one response line at a
time; nothing sleeps to wait for state, and every read is under a
``trio.fail_after`` guard.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import stat
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import pytest
import trio

from agentd.protocol import framing, wire
from agentd.protocol.client import Client
from agentd.protocol.errors import ERROR_KINDS
from agentd.launch import start_daemon
from tests.helpers import daemon_for_module, script, wait_event, wait_run_terminal

TIMEOUT = 10
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HANG = script({"hang": True})  # a run that stays running until interrupted


# -- helpers ---------------------------------------------------------------------


class RawConnection:
    """A socket to the daemon on which the test writes raw bytes and reads
    the daemon's answers one JSON line at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buffer = bytearray()
        self._ids = itertools.count(1)

    async def send_bytes(self, data: bytes) -> None:
        """Write ``data`` exactly as given (add the newline yourself)."""
        await self.stream.send_all(data)

    async def send(self, message: Any) -> None:
        """Write one JSON value as a line."""
        await self.send_bytes(json.dumps(message).encode() + b"\n")

    async def read(self) -> dict[str, Any]:
        """The next line from the daemon, parsed (fails after TIMEOUT seconds)."""
        with trio.fail_after(TIMEOUT):
            while (end := self._buffer.find(b"\n")) < 0:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("the daemon closed the connection")
                self._buffer += data
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return json.loads(line)

    async def read_response(self, request_id: Any) -> dict[str, Any]:
        """Read until the response to ``request_id``; event notifications are
        skipped, but any other response on the way is a test failure."""
        while True:
            message = await self.read()
            if "method" in message:
                continue
            assert message.get("id") == request_id, f"unexpected response before id {request_id}: {message}"
            return message

    async def call(self, method: Any, params: Any = None, **extra: Any) -> dict[str, Any]:
        """Send a request with a fresh id; return the whole response (result or error)."""
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, **extra}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.read_response(request_id)

    async def result(self, method: str, params: Any = None) -> Any:
        """``call`` that must succeed; returns the result."""
        reply = await self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]


@asynccontextmanager
async def raw_connection(socket_path) -> AsyncIterator[RawConnection]:
    """A RawConnection to the daemon at ``socket_path``, closed afterwards."""
    stream = await trio.open_unix_socket(str(socket_path))
    try:
        yield RawConnection(stream)
    finally:
        await stream.aclose()


def assert_sentence(message: Any) -> None:
    """An error message a person can read: a non-empty string of several words."""
    assert isinstance(message, str) and message.strip(), f"empty error message: {message!r}"
    assert len(message.split()) >= 3, f"error message is not a sentence: {message!r}"


def assert_error(reply: dict[str, Any], code: int, kind: str, *, request_id: Any = ...) -> dict[str, Any]:
    """Check that ``reply`` is an error with ``code`` and ``data.kind == kind``
    (and, if given, that it answers ``request_id``); return the error object."""
    assert "result" not in reply, reply
    assert reply.get("jsonrpc") == "2.0", reply
    error = reply["error"]
    assert error["code"] == code, reply
    assert error["data"]["kind"] == kind, reply
    assert_sentence(error["message"])
    if request_id is not ...:
        assert "id" in reply and reply["id"] == request_id, reply
    return error


async def assert_still_serving(conn: RawConnection) -> None:
    """The connection (and the daemon) still answers a valid request."""
    status = await conn.result("daemon.status")
    assert status["version"]


def wire_code(kind: str) -> int:
    """The JSON-RPC code the daemon uses for an error ``kind`` (-32000 for application errors)."""
    return ERROR_KINDS[kind].code


async def thread_count(conn: RawConnection) -> int:
    """How many threads ``thread.list`` shows."""
    return len((await conn.result("thread.list"))["threads"])


# -- framing and request shape (F20) ---------------------------------------------


@pytest.fixture(scope="module")
def served(module_paths):
    """One daemon for the module's tests of framing and errors, and of
    commandIds and threads of their own (issue 28 item 13: a start and stop
    is about 2 s here). Tests that count every thread, event or run, or stop
    the daemon, use conftest's ``daemon`` of their own."""
    with daemon_for_module(start_daemon, *module_paths) as daemon:
        yield daemon


@pytest.fixture
async def served_client(served):
    """A client of the module's daemon (``served``)."""
    async with Client.connect(served.socket) as client:
        yield client


async def test_unparsable_line_is_a_parse_error_and_the_connection_survives(served):
    async with raw_connection(served.socket) as conn:
        await conn.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
        reply = await conn.read()
        assert_error(reply, PARSE_ERROR, "parse_error", request_id=None)
        await assert_still_serving(conn)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"42", id="number"),
        pytest.param(b'"daemon.status"', id="string"),
        pytest.param(b"null", id="null"),
        pytest.param(b"true", id="bool"),
        pytest.param(b'[{"jsonrpc": "2.0", "id": 1, "method": "daemon.status"}]', id="batch"),
        pytest.param(b"[]", id="empty-batch"),
    ],
)
async def test_a_line_that_is_not_a_request_object_is_invalid_request(served, line):
    async with raw_connection(served.socket) as conn:
        await conn.send_bytes(line + b"\n")
        reply = await conn.read()
        assert_error(reply, INVALID_REQUEST, "invalid_request", request_id=None)
        await assert_still_serving(conn)


async def test_batches_are_refused_with_a_pointer_to_single_requests(served):
    async with raw_connection(served.socket) as conn:
        await conn.send([{"jsonrpc": "2.0", "id": 1, "method": "daemon.status"}])
        error = assert_error(await conn.read(), INVALID_REQUEST, "invalid_request")
        assert "batch" in error["message"]


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"jsonrpc": "2.0", "id": 7}, id="missing-method"),
        pytest.param({"jsonrpc": "2.0", "id": 7, "method": 5}, id="number-method"),
        pytest.param({"jsonrpc": "2.0", "id": 7, "method": None}, id="null-method"),
        pytest.param({"jsonrpc": "2.0", "id": 7, "method": ["daemon.status"]}, id="list-method"),
        pytest.param({"jsonrpc": "1.0", "id": 7, "method": "daemon.status"}, id="wrong-jsonrpc"),
    ],
)
async def test_a_request_without_a_string_method_is_invalid_request(served, request_):
    async with raw_connection(served.socket) as conn:
        await conn.send(request_)
        assert_error(await conn.read(), INVALID_REQUEST, "invalid_request", request_id=7)
        await assert_still_serving(conn)


async def test_unknown_method_says_where_the_methods_are_listed(served):
    async with raw_connection(served.socket) as conn:
        reply = await conn.call("thread.explode", {"threadId": "thr_x"})
        error = assert_error(reply, METHOD_NOT_FOUND, "method_not_found", request_id=1)
        assert "thread.explode" in error["message"]
        assert "protocol/README.md" in error["message"]
        assert error["data"]["method"] == "thread.explode"


async def test_a_line_over_the_limit_is_refused_and_the_connection_survives(served):
    """F20: a line over the limit (framing.MAX_LINE) costs one error naming
    the limit, not the connection."""
    async with raw_connection(served.socket) as conn:
        text = "x" * (framing.MAX_LINE + 1000)
        await conn.send({"jsonrpc": "2.0", "id": 1, "method": "thread.message.send",
                         "params": {"threadId": "thr_x", "text": text}})
        error = assert_error(await conn.read(), PARSE_ERROR, "parse_error", request_id=None)
        assert str(framing.MAX_LINE) in error["message"]
        assert error["data"]["limit"] == framing.MAX_LINE
        await assert_still_serving(conn)


def message_send_line(text_json: bytes) -> bytes:
    """A thread.message.send request (id 1, unknown thread) whose ``text`` is
    the already-JSON-escaped ``text_json``, as one line without its newline."""
    head = b'{"jsonrpc":"2.0","id":1,"method":"thread.message.send","params":{"threadId":"thr_nope","text":"'
    return head + text_json + b'"}}'


async def test_a_line_of_exactly_the_limit_is_read_as_a_request(served):
    """The line limit is inclusive: a valid request of exactly MAX_LINE bytes
    (the longest text, every character escaped as a surrogate pair, then
    JSON whitespace) is parsed and answered (here: not_found for its unknown
    thread)."""
    line = message_send_line(b"\\ud83d\\ude00" * wire.MAX_TEXT)
    line = line[:-1] + b" " * (framing.MAX_LINE - len(line)) + b"}"
    assert len(line) == framing.MAX_LINE
    assert len(json.loads(line)["params"]["text"]) == wire.MAX_TEXT
    async with raw_connection(served.socket) as conn:
        await conn.send_bytes(line + b"\n")
        assert_error(await conn.read(), wire_code("not_found"), "not_found", request_id=1)
        await assert_still_serving(conn)


@pytest.mark.parametrize(("text_json", "characters"), [
    ("😀".encode() * (wire.MAX_TEXT // 2), wire.MAX_TEXT // 2),   # 2 MiB of UTF-8: refused as parse_error before issue 13
    ("😀".encode() * wire.MAX_TEXT, wire.MAX_TEXT),
    (b"\\u0000" * wire.MAX_TEXT, wire.MAX_TEXT),
    (b"\\ud83d\\ude00" * wire.MAX_TEXT, wire.MAX_TEXT),
], ids=["half-a-million-emoji", "emoji-utf8", "control-escaped", "emoji-escaped"])
async def test_any_text_of_the_maximum_length_fits_in_a_line(served, text_json, characters):
    """Text is limited in characters, lines in bytes: the line limit holds
    any valid text of the maximum length however a client spells it."""
    line = message_send_line(text_json)
    assert len(line) <= framing.MAX_LINE
    assert len(json.loads(line)["params"]["text"]) == characters
    async with raw_connection(served.socket) as conn:
        await conn.send_bytes(line + b"\n")
        assert_error(await conn.read(), wire_code("not_found"), "not_found", request_id=1)
        await assert_still_serving(conn)


async def test_a_line_within_the_limit_with_a_text_over_the_text_limit_is_invalid_params(served):
    """A line of exactly MAX_LINE bytes is read, but its text of more than
    MAX_TEXT code points is refused as invalid_params naming ``text``."""
    envelope = len(message_send_line(b""))
    line = message_send_line(b"y" * (framing.MAX_LINE - envelope))
    assert len(line) == framing.MAX_LINE
    assert len(json.loads(line)["params"]["text"]) > wire.MAX_TEXT, (
        "the line limit leaves no room for a text over the text limit: the text limit is unreachable"
    )
    async with raw_connection(served.socket) as conn:
        await conn.send_bytes(line + b"\n")
        error = assert_error(await conn.read(), INVALID_PARAMS, "invalid_params", request_id=1)
        assert error["data"]["field"] == "text"
        await assert_still_serving(conn)


# -- params (F1, F2, F20) ----------------------------------------------------------

MISSING_DIR = "/nonexistent-agentd-test-dir/workspace"

INVALID_PARAMS_CASES = [
    pytest.param("thread.get", {"threadId": 5}, "threadId", id="wrong-type"),
    pytest.param("thread.message.send", {"threadId": "thr_x"}, "text", id="missing-text"),
    pytest.param("thread.get", {"threadID": "thr_x"}, "threadID", id="unknown-field-typo"),
    pytest.param("thread.message.send", {"threadId": "thr_x", "text": ""}, "text", id="empty-text"),
    pytest.param("thread.message.send", {"threadId": "thr_x", "text": "hi", "dispatchMode": {"type": "sideways"}},
                 "dispatchMode.type", id="bad-dispatch-mode"),
    pytest.param("events.subscribe", {"afterSeq": -1}, "afterSeq", id="negative-after-seq"),
    pytest.param("thread.create", {"provider": "no-such-provider"}, "provider", id="unknown-provider"),
    pytest.param("thread.create", {"workspace": "relative/dir"}, "workspace", id="relative-workspace"),
    pytest.param("thread.create", {"workspace": MISSING_DIR}, "workspace", id="missing-workspace"),
]


@pytest.mark.parametrize("method, params, field", INVALID_PARAMS_CASES)
async def test_invalid_params_name_the_offending_field(served, method, params, field):
    assert not os.path.exists(MISSING_DIR)
    async with raw_connection(served.socket) as conn:
        reply = await conn.call(method, params)
        error = assert_error(reply, INVALID_PARAMS, "invalid_params", request_id=1)
        assert error["data"]["field"] == field, error


async def test_params_that_are_not_an_object_are_invalid_params(served):
    async with raw_connection(served.socket) as conn:
        error = assert_error(await conn.call("thread.get", ["thr_x"]), INVALID_PARAMS, "invalid_params", request_id=1)
        assert "thread.get" in error["message"]


# -- not found (F20) -----------------------------------------------------------------

NOT_FOUND_CASES = [
    pytest.param("thread.get", {"threadId": "thr_missing1"}, "thr_missing1", id="thread.get"),
    pytest.param("thread.message.send", {"threadId": "thr_missing2", "text": "hi"}, "thr_missing2",
                 id="thread.message.send"),
    pytest.param("events.subscribe", {"threadId": "thr_missing3"}, "thr_missing3", id="events.subscribe"),
    pytest.param("run.get", {"runId": "run_missing4"}, "run_missing4", id="run.get"),
    # Documented since issue 13: an unknown run is not_found, not unsupported.
    pytest.param("run.resume", {"runId": "run_missing6"}, "run_missing6", id="run.resume"),
]


@pytest.mark.parametrize("method, params, missing_id", NOT_FOUND_CASES)
async def test_unknown_ids_are_not_found_and_the_message_names_them(served, method, params, missing_id):
    """The message names the id, and (protocol/README.md, Errors) so does ``data``."""
    async with raw_connection(served.socket) as conn:
        error = assert_error(await conn.call(method, params), wire_code("not_found"), "not_found", request_id=1)
        assert missing_id in error["message"]
        assert missing_id in error["data"].values(), error


async def test_unknown_subscription_is_not_found_and_the_message_names_it(served):
    async with raw_connection(served.socket) as conn:
        reply = await conn.call("events.unsubscribe", {"subscriptionId": "sub_missing5"})
        error = assert_error(reply, wire_code("not_found"), "not_found", request_id=1)
        assert "sub_missing5" in error["message"]


async def test_unknown_subscription_not_found_carries_the_id_in_data(served):
    async with raw_connection(served.socket) as conn:
        reply = await conn.call("events.unsubscribe", {"subscriptionId": "sub_missing6"})
        error = assert_error(reply, wire_code("not_found"), "not_found", request_id=1)
        assert error["data"].get("subscriptionId") == "sub_missing6", error


# -- dispatch while a run is active (F2) ----------------------------------------------


async def test_dispatch_while_a_run_is_active(daemon, client):
    """start_immediately is refused while run 1 hangs; the default dispatch
    queues run 2 behind it. The daemon still shuts down cleanly."""
    thread_id = (await client.call("thread.create", title="busy"))["threadId"]
    first = await client.call("thread.message.send", threadId=thread_id, text=HANG)
    # Past session start-up: the run is running.
    await wait_event(client, lambda e: e["type"] == "run.started" and e.get("runId") == first["runId"],
                     thread_id=thread_id, timeout=TIMEOUT)

    async with raw_connection(daemon.socket) as conn:
        reply = await conn.call("thread.message.send", {
            "threadId": thread_id, "text": "now please", "dispatchMode": {"type": "start_immediately"},
        })
        error = assert_error(reply, wire_code("invalid_state"), "invalid_state", request_id=1)
        assert error["data"]["runId"] == first["runId"]
        assert first["runId"] in error["message"]

    second = await client.call("thread.message.send", threadId=thread_id, text="after that")
    detail = await client.call("thread.get", threadId=thread_id)
    runs = {run["id"]: run for run in detail["runs"]}
    assert set(runs) == {first["runId"], second["runId"]}, "the refused send must not have made a run"
    assert runs[first["runId"]]["status"] == "running"
    assert runs[second["runId"]]["status"] == "queued"
    assert runs[second["runId"]]["ordinal"] == 2

    with trio.fail_after(TIMEOUT):
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


GATED_SITECUSTOMIZE = """\
import os, sys
if sys.orig_argv[1:3] == ["-m", "agentd.actors.providers.scripted_agent"]:
    # Hold the scripted agent before it answers `initialize`, until the test
    # opens this FIFO for writing (or the daemon's stop ladder signals it).
    os.close(os.open(os.environ["AGENTD_TEST_AGENT_GATE"], os.O_RDONLY))
"""


async def test_shutdown_while_a_provider_session_is_starting(tmp_path, data_dir, socket_path):
    """F20/F2: the daemon exits 0 on SIGTERM even while a run's provider
    session is still starting. The scripted agent is held before its
    handshake by a sitecustomize gate, so the state is reached without timing."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GATED_SITECUSTOMIZE)
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = {**os.environ, "PYTHONPATH": str(site), "AGENTD_TEST_AGENT_GATE": str(gate)}
    proc = await start_daemon(data_dir, socket_path, env=env)
    try:
        starting = None
        async with Client.connect(socket_path) as client:  # swallows errors: checked below
            thread_id = (await client.call("thread.create"))["threadId"]
            await client.call("thread.message.send", threadId=thread_id, text=HANG)
            starting = await wait_event(client, lambda e: e["type"] == "session.starting",
                                        thread_id=thread_id, timeout=TIMEOUT)
        if starting is None or starting["payload"]["session"]["status"] != "starting":
            pytest.fail(f"the provider session was never seen starting: {starting}")
        # A correct daemon needs the stop ladder's grace (about 2 s) to end the held agent.
        code = await proc.terminate(timeout=6)
    finally:
        await proc.kill()
        _open_gate(gate)
    assert code == 0, proc.log_text()[-4000:]


def _open_gate(gate) -> None:
    """Release a scripted agent still held by the gate (none, if it was killed)."""
    try:
        os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: nobody is waiting
        pass


# -- commandId receipts (F1, F2) --------------------------------------------------------


# The module's daemon serves these: each test's commandIds and thread titles are its own.


async def test_repeated_command_id_on_thread_create_returns_the_first_receipt(served_client):
    client = served_client
    first = await client.call("thread.create", title="once", commandId="cmd-create-1")
    again = await client.call("thread.create", title="once", commandId="cmd-create-1")
    assert again == first
    assert set(first) == {"threadId", "seq"}
    threads = [t for t in (await client.call("thread.list"))["threads"] if t["title"] == "once"]
    assert [t["id"] for t in threads] == [first["threadId"]]


async def test_same_command_id_from_two_connections_at_once_makes_one_thread(served, served_client):
    client = served_client
    results: list[dict[str, Any]] = []

    async def create() -> None:
        async with Client.connect(served.socket) as other:  # swallows errors: len(results) tells
            results.append(await other.call("thread.create", title="race", commandId="cmd-race"))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(create)
    assert len(results) == 2 and results[0] == results[1]
    threads = [t for t in (await client.call("thread.list"))["threads"] if t["title"] == "race"]
    assert [t["id"] for t in threads] == [results[0]["threadId"]]


async def test_a_thread_create_command_id_reused_for_message_send_is_a_conflict(served, served_client):
    client = served_client
    thread_id = (await client.call("thread.create", commandId="cmd-shared"))["threadId"]
    async with raw_connection(served.socket) as conn:
        reply = await conn.call("thread.message.send", {"threadId": thread_id, "text": "hi", "commandId": "cmd-shared"})
        error = assert_error(reply, wire_code("conflict"), "conflict", request_id=1)
        assert "cmd-shared" in error["message"]
    detail = await client.call("thread.get", threadId=thread_id)
    assert detail["runs"] == [] and detail["messages"] == []


async def test_a_command_id_is_any_1_to_128_printable_ascii_characters(served):
    """Hostile round item 12c (F1): the contract says printable ASCII, so a
    space (0x20) and ``~`` (0x7e) are accepted, 0x1f, 0x7f and a trailing
    newline are not, and the length is 1 to 128."""
    accepted = ["a b", " ", "~", "".join(chr(c) for c in range(0x20, 0x7f)), "x" * 128]
    refused = ["a\x1fb", "a\x7fb", "", "x" * 129, "caf\u00e9", "a\n"]
    async with raw_connection(served.socket) as conn:
        for n, command_id in enumerate(accepted):
            reply = await conn.call("thread.create", {"title": f"ok {n}", "commandId": command_id})
            assert "threadId" in reply.get("result", {}), (command_id, reply)
            again = await conn.call("thread.create", {"title": f"ok {n}", "commandId": command_id})
            assert again["result"] == reply["result"], "the receipt answers a repeat"
        for command_id in refused:
            reply = await conn.call("thread.create", {"commandId": command_id})
            error = assert_error(reply, wire_code("invalid_params"), "invalid_params")
            assert error["data"]["field"] == "commandId", (command_id, error)


async def test_repeated_command_id_on_message_send_makes_one_run(served_client):
    client = served_client
    thread_id = (await client.call("thread.create"))["threadId"]
    text = script({"say": "once"})
    first = await client.call("thread.message.send", threadId=thread_id, text=text, commandId="cmd-send-1")
    again = await client.call("thread.message.send", threadId=thread_id, text=text, commandId="cmd-send-1")
    assert again == first
    run = await wait_run_terminal(client, thread_id, first["runId"], timeout=TIMEOUT)
    assert run["status"] == "completed"
    detail = await client.call("thread.get", threadId=thread_id)
    assert [r["id"] for r in detail["runs"]] == [first["runId"]]
    assert [m["id"] for m in detail["messages"] if m["role"] == "user"] == [first["messageId"]]


async def test_a_fork_made_by_thread_create_with_a_command_id_is_made_once(served_client):
    """SPEC F6, F8: ``thread.create {relationship: fork}`` is ``thread.fork``
    in the parent's actor under the create's commandId; repeating it returns
    the first receipt (and does not wait on its own reservation)."""
    client = served_client
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    params = {"parentThreadId": parent, "relationship": "fork", "commandId": "cmd-fork-create"}
    with trio.fail_after(TIMEOUT):
        first = await client.call("thread.create", **params)
        again = await client.call("thread.create", **params)
    assert again == first
    forks = [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == parent]
    assert [t["id"] for t in forks] == [first["threadId"]]


async def test_one_command_id_sent_at_once_to_two_threads_runs_once(served, served_client):
    """Hostile-round issue, item 6 (SPEC F2, F20 — "Safe retries: commandId"):
    the same commandId sent at the same moment to two threads used to run on
    both. Each pair goes out in one write, so the daemon reads both requests
    in the same wake-up: exactly one of them may run, and both answers are its
    receipt."""
    client = served_client
    pairs = 25
    first = (await client.call("thread.create", title="a"))["threadId"]
    second = (await client.call("thread.create", title="b"))["threadId"]
    answers: list[tuple[dict[str, Any], dict[str, Any]]] = []
    async with raw_connection(served.socket) as conn:
        for pair in range(pairs):
            command_id = f"cmd-pair-{pair}"
            lines = b"".join(
                json.dumps({"jsonrpc": "2.0", "id": f"{pair}-{n}", "method": "thread.message.send",
                            "params": {"threadId": thread_id, "text": f"pair {pair}", "commandId": command_id,
                                       "dispatchMode": {"type": "queue_after_active"}}}).encode() + b"\n"
                for n, thread_id in enumerate((first, second))
            )
            await conn.send_bytes(lines)
            replies = {}
            while len(replies) < 2:
                message = await conn.read()
                if "id" in message:
                    replies[message["id"]] = message
            a, b = replies[f"{pair}-0"], replies[f"{pair}-1"]
            assert "result" in a and "result" in b, (a, b)
            answers.append((a["result"], b["result"]))
    for a, b in answers:
        assert a == b, "the second request got another answer than the first's receipt"
    runs = [r for thread_id in (first, second) for r in (await client.call("thread.get", threadId=thread_id))["runs"]]
    assert len(runs) == pairs, f"{len(runs)} runs for {pairs} commandIds"
    assert sorted(r["id"] for r in runs) == sorted(a["runId"] for a, _b in answers)


# -- notifications (F20) --------------------------------------------------------------------


async def test_a_notification_gets_no_response_but_still_acts(daemon, socket_path):
    """A thread.create without id creates the thread and answers nothing. The
    follow-up request with the same commandId waits for the notification's
    create (or its receipt), so a stray response would arrive before it."""
    async with raw_connection(socket_path) as conn:
        await conn.send({"jsonrpc": "2.0", "method": "thread.create", "params": {"title": "n", "commandId": "cmd-note"}})
        receipt = await conn.result("thread.create", {"title": "n", "commandId": "cmd-note"})
        detail = await conn.result("thread.get", {"threadId": receipt["threadId"]})
        assert detail["thread"]["title"] == "n"
        assert await thread_count(conn) == 1


async def test_a_failing_notification_gets_no_response(served):
    """JSON-RPC 2.0: a notification is never answered, not even with an error."""
    async with raw_connection(served.socket) as conn:
        # One write: the server starts the notification's task before the request's.
        await conn.send_bytes(
            b'{"jsonrpc": "2.0", "method": "thread.get", "params": {"threadId": 5}}\n'
            b'{"jsonrpc": "2.0", "id": 1, "method": "daemon.status"}\n'
        )
        reply = await conn.read()
        assert reply.get("id") == 1 and "result" in reply, f"the notification was answered: {reply}"


# -- the client library (F20) ---------------------------------------------------------------


def _contains(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``error`` is, or an exception group holds, a ``kind``."""
    if isinstance(error, BaseExceptionGroup):
        return any(_contains(inner, kind) for inner in error.exceptions)
    return isinstance(error, kind)


async def test_an_error_inside_client_connect_reaches_the_caller(served):
    with pytest.raises(BaseException) as raised:
        async with Client.connect(served.socket) as client:
            await client.call("daemon.status")
            raise LookupError("raised inside the block")
    assert _contains(raised.value, LookupError), raised.value


# -- nothing half-done after bad input (F1, F20) ------------------------------------------


async def test_bad_requests_leave_no_record_and_the_daemon_keeps_serving(daemon, socket_path, client):
    async with raw_connection(socket_path) as conn:
        await conn.result("thread.create", {"title": "the only one"})
        before = await conn.result("daemon.status")
        assert await thread_count(conn) == 1

        bad_creates = [
            {"provider": "no-such-provider"},
            {"provider": "no-such-provider", "commandId": "cmd-bad-1"},
            {"workspace": "relative/dir"},
            {"workspace": MISSING_DIR},
            {"title": 5},
            {"title": "t" * 501},
            {"titel": "typo"},
            {"commandId": ""},
            {"commandId": "has\ttab"},
        ]
        for params in bad_creates:
            assert_error(await conn.call("thread.create", params), INVALID_PARAMS, "invalid_params")
        await conn.send_bytes(b"not json at all\n")
        assert_error(await conn.read(), PARSE_ERROR, "parse_error", request_id=None)
        assert_error(await conn.call("thread.nope"), METHOD_NOT_FOUND, "method_not_found")

        after = await conn.result("daemon.status")
        assert after["pid"] == before["pid"] == daemon.pid
        assert after["lastSeq"] == before["lastSeq"], "a refused request committed events"
        assert await thread_count(conn) == 1
        # A commandId whose create was refused is still free to use.
        created = await conn.result("thread.create", {"title": "second", "commandId": "cmd-bad-1"})
        assert await thread_count(conn) == 2
        assert created["threadId"] in {t["id"] for t in (await client.call("thread.list"))["threads"]}


# -- the socket (F20) -----------------------------------------------------------------------


async def test_socket_is_0600_in_a_0700_directory(served):
    mode = os.stat(served.socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(served.socket.parent).st_mode) == 0o700


async def test_a_peer_with_another_uid_is_refused(daemon, socket_path):
    """SO_PEERCRED: even with the file modes opened up, another user is refused."""
    if os.getuid() != 0:
        pytest.skip("needs root to connect as another uid")
    os.chmod(socket_path.parent, 0o755)
    os.chmod(socket_path, 0o666)
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        # Only read: the refusal comes at once and the server closes, so a
        # write could race the close (EPIPE).
        "print(s.makefile().readline())\n"
    )
    result = await trio.run_process([sys.executable, "-c", probe, str(socket_path)], capture_stdout=True, check=False)
    reply = json.loads(result.stdout)
    assert "result" not in reply
    assert "only serves its own user" in reply["error"]["message"]
