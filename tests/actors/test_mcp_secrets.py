"""An editor's MCP servers keep their secrets out of the store (issue 26,
F20): the values of their environment variables and headers are in a file
of the daemon's own (``<data-dir>/mcp-secrets/<threadId>.json``), never in a
record, an event or the LMDB file, and still reach the provider; a fork
inherits the servers (F6), ``thread.create`` takes them (F1), a restart
keeps them (F12), and records stored before keep working."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import msgspec
import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError, InvalidState
from tests.helpers import script, send_and_wait, stored_events

SECRET = "s3cret"
SERVERS = [
    {"type": "stdio", "name": "files", "command": "/usr/bin/env", "args": ["files-mcp"], "env": {"TOKEN": SECRET}},
    {"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}},
]
#: what the scripted agent says of the values it was given (their SHA-256 only)
GIVEN = [f"mcp value files env TOKEN sha256={hashlib.sha256(SECRET.encode()).hexdigest()}",
         f"mcp value web header Authorization sha256={hashlib.sha256(f'Bearer {SECRET}'.encode()).hexdigest()}"]


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13) for the tests of one thread's
    servers; a test about every secrets file, the whole store or the
    daemon's secrets folder takes a daemon of its own (``own_client``)."""
    return module_daemon


def secrets_file(data_dir, thread_id):
    return data_dir / "mcp-secrets" / f"{thread_id}.json"


async def last_answer(client, thread_id) -> str:
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    return [m for m in messages if m["role"] == "assistant"][-1]["text"]


async def values_seen(client, thread_id) -> list[str]:
    """What the thread's provider was given, as its next run's agent says it."""
    run = await send_and_wait(client, thread_id, script({"reportMcpValues": True}))
    assert run["status"] == "completed", run
    return (await last_answer(client, thread_id)).splitlines()


def assert_names_only(thread) -> None:
    files, web = thread["mcpServers"]
    assert (files["name"], files["envNames"], files["headerNames"]) == ("files", ["TOKEN"], [])
    assert (web["name"], web["headerNames"], web["envNames"]) == ("web", ["Authorization"], [])
    assert SECRET not in json.dumps(thread)


async def test_the_values_are_in_no_record_event_or_store_file_but_reach_the_provider(own_client, own_daemon, data_dir):
    client = own_client  # every event, the whole store file and every secrets file: a daemon of its own
    thread_id = (await client.call("thread.create"))["threadId"]
    # Every event as a subscriber gets it live (ephemeral ones too), on a connection of its own.
    live: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(follow, own_daemon.socket, thread_id, live)
        await _use_the_servers(client, data_dir, thread_id)
    assert any('"envNames": ["TOKEN"]' in line for line in live), "the servers' updates were followed"
    assert [line for line in live if SECRET in line] == [], "no event a subscriber got holds a value"


async def follow(socket, thread_id, live, *, task_status=trio.TASK_STATUS_IGNORED):
    """Collect the thread's events, each as its JSON line, until its servers are removed."""
    async with Client.connect(socket) as watcher, watcher.subscribe(thread_id=thread_id) as events:
        task_status.started()
        async for event in events:
            live.append(json.dumps(event))
            if event["type"] == "thread.updated" and event["payload"]["thread"]["mcpServers"] is None:
                return


async def _use_the_servers(client, data_dir, thread_id):
    updated = await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    assert updated["changed"] == ["mcpServers"]
    assert_names_only(updated["thread"])
    assert_names_only((await client.call("thread.get", threadId=thread_id))["thread"])
    assert await values_seen(client, thread_id) == GIVEN, "the provider gets the values"
    # The same servers again change nothing; a new value is a change.
    again = await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    assert again["changed"] == []
    rotated = [{**SERVERS[0], "env": {"TOKEN": "rotated"}}, SERVERS[1]]
    assert (await client.call("thread.update", threadId=thread_id, mcpServers=rotated))["changed"] == ["mcpServers"]
    assert (await values_seen(client, thread_id))[0].endswith(hashlib.sha256(b"rotated").hexdigest())
    await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)

    events = await stored_events(client)
    assert any(e["type"] == "thread.updated" for e in events)
    assert [e["type"] for e in events if SECRET in json.dumps(e)] == [], "no event holds a value"
    exported = await client.call("thread.export", threadId=thread_id, format="json")
    assert SECRET not in json.dumps(exported)
    assert SECRET.encode() not in (data_dir / "store" / "data.mdb").read_bytes(), "nor does the store's file"

    path = secrets_file(data_dir, thread_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"servers": {"files": {"env": {"TOKEN": SECRET}},
                                                        "web": {"headers": {"Authorization": f"Bearer {SECRET}"}}}}
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file is left"

    # Removed: the file goes with the values.
    await client.call("thread.update", threadId=thread_id, mcpServers=[])
    assert not path.exists()


async def test_thread_create_takes_the_servers_and_thread_delete_removes_their_secrets(client, daemon):
    data_dir = daemon.data_dir
    created = await client.call("thread.create", mcpServers=[*SERVERS, {"type": "stdio", "name": "agentd",
                                                                         "command": "/bin/true"}])
    thread_id = created["threadId"]
    assert created["renamed"] == {"agentd": "agentd-editor"}
    thread = (await client.call("thread.get", threadId=thread_id))["thread"]
    assert [s["name"] for s in thread["mcpServers"]] == ["files", "web", "agentd-editor"]
    assert SECRET not in json.dumps(thread)
    assert await values_seen(client, thread_id) == GIVEN
    # Refused like thread.update's: nothing is made.
    with pytest.raises(AgentdError) as refused:
        await client.call("thread.create", mcpServers=[{"type": "stdio", "name": "x"}])
    assert refused.value.code == -32602
    assert secrets_file(data_dir, thread_id).exists()
    await client.call("thread.delete", threadId=thread_id)
    assert not secrets_file(data_dir, thread_id).exists()


async def test_a_fork_inherits_the_servers_and_a_copy_of_their_secrets(client, daemon):
    data_dir = daemon.data_dir
    source = (await client.call("thread.create"))["threadId"]
    await client.call("thread.update", threadId=source, mcpServers=SERVERS)
    assert (await send_and_wait(client, source, "first"))["status"] == "completed"
    fork = (await client.call("thread.fork", threadId=source))["threadId"]
    assert_names_only((await client.call("thread.get", threadId=fork))["thread"])
    assert await values_seen(client, fork) == GIVEN
    # The fork's are its own: removing the source's leaves them.
    await client.call("thread.update", threadId=source, mcpServers=[])
    assert secrets_file(data_dir, fork).exists() and not secrets_file(data_dir, source).exists()
    assert await values_seen(client, fork) == GIVEN


async def test_a_symlinked_secrets_folder_is_refused_and_the_thread_stays_usable(own_client, data_dir, tmp_path):
    client = own_client  # its secrets folder replaced, every thread listed: a daemon of its own
    thread_id = (await client.call("thread.create"))["threadId"]
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, data_dir / "mcp-secrets")
    with pytest.raises(InvalidState) as refused:
        await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    assert "symlink" in refused.value.message and refused.value.data["field"] == "mcpServers"
    assert list(outside.iterdir()) == [], "nothing was written where the symlink points"
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["mcpServers"] is None
    with pytest.raises(InvalidState, match="symlink"):
        await client.call("thread.create", mcpServers=SERVERS)
    assert list(outside.iterdir()) == []
    assert [t["id"] for t in (await client.call("thread.list"))["threads"]] == [thread_id], "no thread was made"
    assert (await send_and_wait(client, thread_id, "still here"))["status"] == "completed"


async def test_a_missing_secrets_file_fails_the_run_naming_the_server(client, daemon):
    data_dir = daemon.data_dir
    thread_id = (await client.call("thread.create"))["threadId"]
    await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    secrets_file(data_dir, thread_id).unlink()
    logged_before = len(daemon.log_text())  # the module's daemon: what it logs from here on
    run = await send_and_wait(client, thread_id, "hello")
    assert run["status"] == "failed" and run["reason"].startswith("context_failed: the MCP server 'files'"), run
    assert "TOKEN" in run["reason"]
    assert "Traceback" not in daemon.log_text()[logged_before:], "a refusal, said in one line"
    # Given again, the thread works.
    await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    assert await values_seen(client, thread_id) == GIVEN


async def test_a_restart_keeps_the_servers_and_their_secrets(data_dir, socket_path):
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            await client.call("thread.update", threadId=thread_id, mcpServers=SERVERS)
    finally:
        await daemon.terminate()
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            assert_names_only((await client.call("thread.get", threadId=thread_id))["thread"])
            assert await values_seen(client, thread_id) == GIVEN
    finally:
        await daemon.terminate()


async def test_a_record_stored_with_the_values_has_them_moved_out_at_the_start(data_dir, socket_path):
    """A store made before the values left the record (the shape of
    tests/fixtures/records/threads.v1.mcp-values.msgpack) keeps working and
    never shows them."""
    from agentd.store.db import Store

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
    finally:
        await daemon.terminate()
    # Its record as that agentd stored it: the fixture's servers, in this thread.
    fixture = (os.path.dirname(__file__) + "/../fixtures/records/threads.v1.mcp-values.msgpack")
    with open(fixture, "rb") as f:
        old = msgspec.msgpack.decode(f.read()[1:])
    store = Store(data_dir / "store")
    try:
        with store.env.begin(write=True) as txn:
            threads = store.dbs["threads"]
            record = msgspec.msgpack.decode(txn.get(thread_id.encode(), db=threads)[1:])
            record["mcpServers"] = old["mcpServers"]
            txn.put(thread_id.encode(), b"\x01" + msgspec.msgpack.encode(record), db=threads)
            # And its thread.created event as that agentd logged it, in a log never redacted.
            (key, value), = [(k, v) for k, v in txn.cursor(db=store.dbs["events"]) if b"thread.created" in v]
            event = msgspec.msgpack.decode(value[1:])
            event["payload"]["thread"] = record
            txn.put(key, b"\x01" + msgspec.msgpack.encode(event), db=store.dbs["events"])
            txn.delete(b"mcp_secrets.migrated", db=store.dbs["meta"])  # as a store made before is
    finally:
        store.close()
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            (created,) = [e for e in await stored_events(client) if e["type"] == "thread.created"]
            assert [s["envNames"] for s in created["payload"]["thread"]["mcpServers"]] == [["TOKEN"], []]
            assert SECRET not in json.dumps(created), "the logged event is rewritten with names only"
            thread = (await client.call("thread.get", threadId=thread_id))["thread"]
            assert_names_only(thread)
            assert [p["args"] for p in thread["mcpServers"]] == [["files-mcp"], []]
            assert json.loads(secrets_file(data_dir, thread_id).read_text())["servers"]["files"] == {
                "env": {"TOKEN": SECRET}}
            assert await values_seen(client, thread_id) == GIVEN
    finally:
        await daemon.terminate()


def test_the_file_is_never_written_or_read_through_a_symlink_or_a_fifo_and_a_damaged_one_is_replaced(tmp_path):
    from agentd.actors.providers import mcp_secrets

    folder = str(tmp_path / "data" / "mcp-secrets")
    kept = {"files": {"env": {"TOKEN": SECRET}}}
    assert mcp_secrets.write(folder, "thr_a", kept) and mcp_secrets.read(folder, "thr_a") == kept
    assert not mcp_secrets.write(folder, "thr_a", kept), "the same values: nothing written"
    # A symlink put in the file's place is refused when read, and replaced (not followed) when written.
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"servers": {}}')
    path = tmp_path / "data" / "mcp-secrets" / "thr_b.json"
    os.symlink(elsewhere, path)
    with pytest.raises(OSError):
        mcp_secrets.read(folder, "thr_b")
    assert mcp_secrets.write(folder, "thr_b", kept)
    assert not path.is_symlink() and elsewhere.read_text() == '{"servers": {}}'
    # A FIFO put there is refused at once (a plain open would wait for a writer forever), and replaced.
    os.mkfifo(tmp_path / "data" / "mcp-secrets" / "thr_c.json")
    with pytest.raises(OSError, match="named pipe"):
        mcp_secrets.read(folder, "thr_c")
    assert mcp_secrets.write(folder, "thr_c", kept) and mcp_secrets.read(folder, "thr_c") == kept
    # A damaged file is replaced by the next write; a read of it says so.
    path.write_text("not json")
    with pytest.raises(OSError, match="not a file of MCP server secrets"):
        mcp_secrets.read(folder, "thr_b")
    assert mcp_secrets.write(folder, "thr_b", kept) and mcp_secrets.read(folder, "thr_b") == kept


@pytest.mark.skipif(os.getuid() != 0, reason="giving the folder to another user needs root")
def test_a_secrets_folder_of_another_user_is_refused(tmp_path):
    from agentd.actors.providers import mcp_secrets

    folder = tmp_path / "mcp-secrets"
    folder.mkdir(mode=0o700)
    os.chown(folder, 4242, -1)
    with pytest.raises(OSError, match="belongs to user 4242"):
        mcp_secrets.write(str(folder), "thr_a", {"files": {"env": {"TOKEN": SECRET}}})
    assert list(folder.iterdir()) == []


def test_new_values_are_written_beside_the_old_until_the_record_naming_them_is_committed(tmp_path):
    """thread.update writes before its commit with ``beside_old`` and prunes
    after it: a commit that fails leaves the old record finding its values."""
    from agentd.actors.providers import mcp_secrets

    folder = str(tmp_path / "mcp-secrets")
    old = {"files": {"env": {"TOKEN": "old", "USER": "me"}}, "web": {"headers": {"Authorization": "a"}}}
    new = {"files": {"env": {"TOKEN": "new"}}}
    mcp_secrets.write(folder, "thr_a", old)
    assert mcp_secrets.keep(folder, "thr_a", new, beside_old=True), "a change"
    kept = mcp_secrets.read(folder, "thr_a")
    assert kept == {"files": {"env": {"TOKEN": "new", "USER": "me"}}, "web": {"headers": {"Authorization": "a"}}}
    mcp_secrets.prune(folder, "thr_a", new)
    assert mcp_secrets.read(folder, "thr_a") == new
    assert not mcp_secrets.keep(folder, "thr_a", new, beside_old=True), "the same values: no change"
    # Servers removed: nothing new to write before the commit, the file goes after it.
    assert mcp_secrets.keep(folder, "thr_a", {}, beside_old=True)
    assert mcp_secrets.read(folder, "thr_a") == new
    mcp_secrets.prune(folder, "thr_a", {})
    assert not os.path.exists(mcp_secrets.path_of(folder, "thr_a"))
