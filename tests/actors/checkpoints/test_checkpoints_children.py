"""Child-scope checkpoints (SPEC F13, issue 10), through the socket with the
scripted agent's ``subagent`` step: a checkpoint per child node when it ends,
under its parent's scope, diffed against the previous child or the parent's
base; the run count never moves; the run's checkpoint lists its children."""

from __future__ import annotations


import os
import subprocess

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from tests.helpers import configured_module_daemon, script, send_and_wait, stored_events, wait_event, wait_run_terminal
from tests.actors.checkpoints.test_checkpoints_daemon import StalledGit


CONFIG = '[providers.nosteer]\nkind = "scripted"\ncapabilities = { steer = false }\n'


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module (issue 28 item 13): each test's thread works
    in a folder of its own; the tests that stall git or SIGKILL the daemon
    start their own."""
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
def daemon(shared_daemon):
    return shared_daemon


def write(path: str, content: str) -> dict:
    return {"write": {"path": path, "content": content}}


def child_checkpoints(listed: list[dict]) -> list[dict]:
    return [c for c in listed if c["scope"] == "child"]


async def test_f13_each_subagent_gets_a_child_checkpoint_under_its_parent_scope(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("keep\n")
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    # The agent does not wait for agentd's capture: an approval holds it
    # after the first child until that child's checkpoint is recorded.
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        write("a.txt", "a\n"),
        {"subagent": {"steps": [write("b.txt", "b\n"), {"subagent": {"steps": [write("c.txt", "c\nc\n")]}}]}},
        {"approval": {"kind": "command", "command": "go on"}},
        {"subagent": {"steps": [{"delete": {"path": "a.txt"}}]}},
        {"say": "done"},
    ))
    requested = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id)
    captured = [e for e in await stored_events(client, thread_id) if e["type"] == "checkpoint.captured"]
    assert [e["payload"]["checkpoint"]["kind"] for e in captured] == ["baseline", "child", "child"]
    await client.call("approval.respond", requestId=requested["payload"]["request"]["id"], decision="accept")
    run1 = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run1["status"] == "completed"
    detail = await client.call("run.get", runId=run1["id"])
    subagents = [n for n in detail["nodes"] if n["kind"] == "subagent"]
    outer, inner, second = sorted(subagents, key=lambda n: n["createdAt"])
    assert inner["parentNodeId"] == outer["id"] and outer["parentNodeId"] == second["parentNodeId"] == run1["rootNodeId"]

    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    baseline, run_ckp = listed[0], next(c for c in listed if c["id"] == run1["checkpointId"])
    children = child_checkpoints(listed)
    # Captured as each child ended: the inner one first.
    assert [c["nodeId"] for c in children] == [inner["id"], outer["id"], second["id"]]
    assert all((c["kind"], c["status"], c["ordinal"], c["runId"]) == ("child", "captured", 1, run1["id"]) for c in children)
    assert [c["parentNodeId"] for c in children] == [outer["id"], run1["rootNodeId"], run1["rootNodeId"]]
    c_inner, c_outer, c_second = children
    # No earlier child under the same parent: the parent's base (the run's baseline).
    assert c_inner["baseCheckpointId"] == c_outer["baseCheckpointId"] == baseline["id"]
    # The previous child under the same parent.
    assert c_second["baseCheckpointId"] == c_outer["id"]
    diff = await client.call("checkpoint.diff", checkpointId=c_outer["id"])
    assert {(f["path"], f["change"]) for f in diff["files"]} == {("a.txt", "added"), ("b.txt", "added"), ("c.txt", "added")}
    diff = await client.call("checkpoint.diff", checkpointId=c_second["id"])
    assert [(f["path"], f["change"]) for f in diff["files"]] == [("a.txt", "deleted")]
    assert (c_second["summary"]["filesChanged"], c_second["summary"]["deletions"]) == (1, 1)

    # The run's checkpoint references its children's summaries.
    assert run_ckp["summary"]["children"] == [
        {"checkpointId": c["id"], "nodeId": c["nodeId"], "status": "captured", "filesChanged": c["summary"]["filesChanged"],
         "insertions": c["summary"]["insertions"], "deletions": c["summary"]["deletions"]}
        for c in children
    ]
    assert run_ckp["summary"]["filesChanged"] == 2  # b.txt and c.txt against the baseline

    events = await stored_events(client, thread_id)
    captured = [e for e in events if e["type"] == "checkpoint.captured" and e["payload"]["checkpoint"]["scope"] == "child"]
    assert [(e["runId"], e["nodeId"]) for e in captured] == [(run1["id"], c["nodeId"]) for c in children]
    # Each committed with its child's end: right after subagent.completed.
    for event in captured:
        at = events.index(event)
        assert (events[at - 1]["type"], events[at - 1]["nodeId"]) == ("subagent.completed", event["nodeId"])
        assert events[at - 1]["seq"] + 1 == event["seq"]

    # Child checkpoints never advance the run count: run 2 is ordinal 2 and
    # is diffed against run 1's checkpoint (no new baseline).
    run2 = await send_and_wait(client, thread_id, script(write("d.txt", "d\n")))
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    run2_ckp = next(c for c in listed if c["id"] == run2["checkpointId"])
    assert (run2["ordinal"], run2_ckp["ordinal"], run2_ckp["baseCheckpointId"]) == (2, 2, run1["checkpointId"])
    assert [c["kind"] for c in listed].count("baseline") == 1
    assert "children" not in run2_ckp["summary"]


async def test_f13_a_child_left_open_by_a_stop_is_captured_in_the_barrier(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"subagent": {"steps": [write("half.txt", "half done\n"), {"hang": True}]}}))
    await wait_event(client, lambda e: e["type"] == "file_change.completed", thread_id=thread_id)
    await client.call("thread.stop", threadId=thread_id)
    run = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run["status"] == "interrupted"
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    (child,) = child_checkpoints(listed)
    node = next(n for n in (await client.call("run.get", runId=run["id"]))["nodes"] if n["kind"] == "subagent")
    assert (child["nodeId"], child["status"], node["status"]) == (node["id"], "captured", "interrupted")
    diff = await client.call("checkpoint.diff", checkpointId=child["id"])
    assert [(f["path"], f["change"]) for f in diff["files"]] == [("half.txt", "added")]
    run_ckp = next(c for c in listed if c["id"] == run["checkpointId"])
    assert [c["checkpointId"] for c in run_ckp["summary"]["children"]] == [child["id"]]


async def test_f13_sigkill_during_a_child_capture_records_a_missing_child_not_the_runs(data_dir, socket_path, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    git = StalledGit(tmp_path)
    daemon = await start_daemon(data_dir, socket_path, env=git.env)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            sent = await client.call("thread.message.send", threadId=thread_id, text=script(
                {"tool": {"name": "wait", "seconds": 0.3}}, {"subagent": {"steps": [write("x.txt", "x\n")]}}))
            await wait_event(client, lambda e: e["type"] == "run.started", thread_id=thread_id)
            git.stall()  # the baseline is done: the child's capture stalls
            await git.stalled()
        await daemon.kill()
    finally:
        git.release()
        await daemon.terminate()
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            run = (await client.call("run.get", runId=sent["runId"]))["run"]
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            (child,) = child_checkpoints(listed)
            assert (child["kind"], child["status"], child["reason"], child["runId"]) == (
                "child", "missing", "daemon_restart", run["id"])
            assert child["parentNodeId"] == run["rootNodeId"] and child["nodeId"] != run["rootNodeId"]
            # The run's own capture never started: the child's is not taken for it.
            assert run["status"] == "interrupted" and run["checkpointId"] is None
    finally:
        await daemon.terminate()


@pytest.mark.parametrize("change", ["child_checkpoint", "file_change"])
async def test_f3_changed_files_make_a_steer_supersede(client, tmp_path, change):
    """SPEC F3: once an attempt produced a checkpoint with changes (a child's)
    or a completed file change (what its run checkpoint will hold), a steer
    by restart starts a new run that supersedes it — even though all it said
    was commentary."""
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws), provider="nosteer"))["threadId"]
    edit = {"subagent": {"steps": [write("x.txt", "x\n")]}} if change == "child_checkpoint" else write("x.txt", "x\n")
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"say": "let me look", "phase": "commentary"}, edit, {"tool": {"name": "more", "hang": True}}))
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    steer = await client.call("thread.message.send", threadId=thread_id, text="now this",
                              dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == "superseding_run" and steer["runId"] != sent["runId"]
    old = await wait_run_terminal(client, thread_id, sent["runId"])
    new = await wait_run_terminal(client, thread_id, steer["runId"])
    assert old["status"] == "interrupted" and new["supersedesRunId"] == old["id"]
    diff = await client.call("checkpoint.diff", checkpointId=old["checkpointId"])
    assert [(f["path"], f["change"]) for f in diff["files"]] == [("x.txt", "added")]


async def test_f13_a_write_of_the_parent_while_a_child_is_captured_is_named_not_given_to_the_child(
        data_dir, socket_path, tmp_path):
    """Issue 23 item 1: the parent writes ``after.txt`` right after its
    subagent ended, while agentd's git reads the child's files (git is held
    at the child capture until the write landed). The child checkpoint does
    not silently take it for the child's: ``concurrentPaths`` names it, and
    what the child wrote (``sub.txt``) is the rest."""
    ws = tmp_path / "ws"
    ws.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    wrapper = tmp_path / "git-wrapper"
    # Held only while the child's file exists and the parent's does not yet
    # (the baseline and the run's own capture pass straight through); bounded.
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" update-index "*) n=0; while [ -e "{ws}/sub.txt" ] && [ ! -e "{ws}/after.txt" ] '
        '&& [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done;; esac\n'
        f'exec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    daemon = await start_daemon(data_dir, socket_path, env={**os.environ, "AGENTD_CHECKPOINT_GIT": str(wrapper)})
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run = await send_and_wait(client, thread_id, script(
                {"subagent": {"steps": [write("sub.txt", "the child's\n")]}}, write("after.txt", "the parent's\n")))
            assert run["status"] == "completed"
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            (child,) = child_checkpoints(listed)
            assert child["status"] == "captured" and child["concurrentPaths"] == ["after.txt"]
            files = {f["path"] for f in (await client.call("checkpoint.diff", checkpointId=child["id"]))["files"]}
            assert files - set(child["concurrentPaths"]) == {"sub.txt"}, "the child's own work is what is left"
            own = next(c for c in listed if c["id"] == run["checkpointId"])
            assert own["concurrentPaths"] == [], "a run's own checkpoint has nothing concurrent to name"
    finally:
        await daemon.terminate()
