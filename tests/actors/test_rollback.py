"""``rollback.toRun`` through the socket with real scripted-agent processes
(SPEC F13, F14; issue 10): files and the agent's memory go back together, the
user's own repository is never touched, nothing is lost (the safety
checkpoint brings the rolled-back state back), and a rollback cut off by a
SIGKILL leaves a graph the next run can trust.

The agent's memory is read with the scripted ``recall`` oracle: for each word,
whether the agent sees it in its own native history (``native``), only in a
stored handoff (``context``), or not at all (``absent``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import InvalidParams, InvalidState, NotFound
from tests.helpers import configured_module_daemon, script, send_and_wait, stored_events, wait_event, wait_run_terminal
from tests.actors.checkpoints.test_checkpoints_daemon import RUN1, RUN2, RUN3, StalledGit, dot_git_state, files_of, user_repo
from tests.actors.test_lineage import recall

CONFIG = """
[providers.basic]
kind = "scripted"
capabilities = { nativeFork = false }

[providers.norewind]
kind = "scripted"
capabilities = { rollback = false }
"""


async def _start(tmp_path: Path, short_dir: Path, **kwargs):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    return await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config, **kwargs)


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module's tests that need only threads (and
    workspaces) of their own (issue 28 item 13: a start and stop is about 2 s
    here); those that restart or kill a daemon start their own."""
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
async def client(shared_daemon):
    async with Client.connect(shared_daemon.socket) as c:
        yield c


def with_word(run_script: str, word: str) -> str:
    """A RUN script that also says ``word`` (so recall can find it)."""
    return run_script[:-1] + f', {{"say": "the word is {word}"}}]'


WORDS = ("alpha", "bravo", "charlie")


async def three_runs(client: Client, ws: Path, provider: str | None = None):
    params = {"provider": provider} if provider else {}
    thread_id = (await client.call("thread.create", workspace=str(ws), **params))["threadId"]
    states = []
    runs = []
    for run_script, word in zip((RUN1, RUN2, RUN3), WORDS):
        runs.append(await send_and_wait(client, thread_id, with_word(run_script, word)))
        states.append(files_of(ws))
    assert [r["status"] for r in runs] == ["completed"] * 3
    return thread_id, runs, states


@pytest.mark.parametrize("repo", [True, False], ids=["git-repository", "plain-folder"])
async def test_rollback_to_run_1_restores_files_and_memory_and_is_undoable(client, tmp_path, repo):
    """F14: after three runs, rollback.toRun 1 — the files are exactly those
    after run 1, the user's .git is byte-for-byte unchanged, the agent
    remembers run 1 only, runs 2–3 are rolled_back (kept), their checkpoints
    stale; the safety checkpoint brings run 3's files back."""
    ws = user_repo(tmp_path, repo=repo)
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"ignored build output")
    before = dot_git_state(ws)
    thread_id, runs, states = await three_runs(client, ws)
    (ws / "by-hand.txt").write_text("edited by the person after run 3\n")
    after3 = files_of(ws)

    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    assert answer["rolledBackRunIds"] == [runs[1]["id"], runs[2]["id"]]
    assert answer["providerRollback"] == "native"
    assert answer["checkpointId"] == runs[0]["checkpointId"]
    assert files_of(ws) == states[0]
    assert set(answer["restoredFiles"]) == {"src/app.py", "untracked.txt", "docs/guide.md", "plain/notes.txt", "by-hand.txt"}
    assert dot_git_state(ws) == before
    assert (ws / "build" / "out.o").read_bytes() == b"ignored build output"

    got = await client.call("thread.get", threadId=thread_id)
    statuses = [(r["ordinal"], r["status"], r["statusBeforeRollback"]) for r in got["runs"]]
    assert statuses == [(1, "completed", None), (2, "rolled_back", "completed"), (3, "rolled_back", "completed")]
    listed = {c["id"]: c for c in (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]}
    assert listed[runs[0]["checkpointId"]]["status"] == "captured"
    assert {listed[r["checkpointId"]]["status"] for r in runs[1:]} == {"stale"}
    assert sorted(answer["staleCheckpointIds"]) == sorted(r["checkpointId"] for r in runs[1:])

    events = await stored_events(client, thread_id)
    rolled = [e for e in events if e["type"] == "run.rolled_back"]
    assert [(e["runId"], e["nodeId"]) for e in rolled] == [(r["id"], r["rootNodeId"]) for r in runs[1:]]
    thread_event = next(e for e in events if e["type"] == "thread.rolled_back")
    assert thread_event["runId"] == runs[0]["id"] and thread_event["nodeId"] == runs[0]["rootNodeId"]
    assert thread_event["payload"]["safetyCheckpointId"] == answer["safetyCheckpointId"]
    assert thread_event["seq"] == answer["seq"]

    # The agent's own history holds run 1 only.
    assert await recall(client, thread_id, *WORDS) == {"alpha": "native", "bravo": "absent", "charlie": "absent"}

    # Nothing lost: the safety checkpoint brings the state before the rollback back.
    undo = await client.call("checkpoint.restore", checkpointId=answer["safetyCheckpointId"])
    assert undo["complete"]
    assert files_of(ws) == after3
    assert dot_git_state(ws) == before


async def test_rollback_to_0_goes_back_before_the_first_run(client, tmp_path):
    """targetOrdinal 0: the workspace as it was before any run, an agent with no history."""
    ws = user_repo(tmp_path, repo=False)
    before = files_of(ws)
    thread_id, runs, _states = await three_runs(client, ws)
    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=0)
    assert answer["rolledBackRunIds"] == [r["id"] for r in runs]
    assert files_of(ws) == before
    assert await recall(client, thread_id, *WORDS) == {w: "absent" for w in WORDS}
    # Ordinals go on: the new runs never reuse a rolled-back run's number.
    got = await client.call("thread.get", threadId=thread_id)
    assert [r["ordinal"] for r in got["runs"]] == [1, 2, 3, 4]


async def test_a_provider_that_cannot_rewind_gets_a_rebuilt_provider_thread(client, tmp_path):
    """F14 on a runtime without rollback (as Claude): its provider thread is
    retired and the next run starts a fresh one whose stored full_thread_summary
    handoff carries run 1 and not runs 2–3."""
    ws = user_repo(tmp_path, repo=False)
    thread_id, runs, states = await three_runs(client, ws, provider="norewind")
    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    assert answer["providerRollback"] == "rebuilt" and len(answer["retiredProviderThreadIds"]) == 1
    assert files_of(ws) == states[0]
    assert await recall(client, thread_id, *WORDS) == {"alpha": "context", "bravo": "absent", "charlie": "absent"}
    run = (await client.call("thread.get", threadId=thread_id))["runs"][-1]
    attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
    handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
    assert handoff["strategy"] == "full_thread_summary" and handoff["reason"].startswith("rolled_back")
    assert handoff["coveredRunIds"] == [runs[0]["id"]]
    assert "alpha" in handoff["text"] and "bravo" not in handoff["text"] and "charlie" not in handoff["text"]


async def test_rollback_across_a_provider_switch_keeps_what_each_agent_really_saw(client, tmp_path):
    """Run 1 on scripted, run 2 on basic (given run 1 in a handoff): back to
    run 1, basic's thread is reverted to nothing — it saw run 1 only through
    run 2's handoff — and scripted's thread, which never saw run 2, is kept."""
    ws = user_repo(tmp_path, repo=False)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    await send_and_wait(client, thread_id, with_word(RUN1, "alpha"))
    await send_and_wait(client, thread_id, with_word(RUN2, "bravo"), provider="basic")
    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    assert answer["providerRollback"] == "native" and answer["retiredProviderThreadIds"] == []
    assert await recall(client, thread_id, "alpha", "bravo", provider="scripted") == {"alpha": "native", "bravo": "absent"}
    # (That recall's own text names bravo: basic is asked for alpha only.)
    assert await recall(client, thread_id, "alpha", provider="basic") == {"alpha": "context"}
    run = (await client.call("thread.get", threadId=thread_id))["runs"][-1]
    attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
    handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
    assert handoff["strategy"] == "delta" and "the word is bravo" not in handoff["text"]
    assert "the word is alpha" in handoff["text"]


async def test_rollback_refusals_and_queued_runs(client, tmp_path):
    """Clear errors: an active run, an ordinal the thread does not have, a run
    rolled back already, a negative ordinal; queued runs are cancelled first."""
    ws = user_repo(tmp_path, repo=False)
    thread_id, runs, states = await three_runs(client, ws)
    with pytest.raises(NotFound):
        await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=7)
    with pytest.raises(InvalidParams):
        await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=-1)
    with pytest.raises(NotFound):
        await client.call("rollback.toRun", threadId="thr_nope", targetOrdinal=1)

    hanging = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
    queued = await client.call("thread.message.send", threadId=thread_id, text=script({"say": "later"}))
    await wait_event(client, lambda e: e["type"] == "run.started" and e["runId"] == hanging["runId"], thread_id=thread_id)
    with pytest.raises(InvalidState) as refused:
        await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    assert refused.value.data["runId"] == hanging["runId"]
    await client.call("thread.stop", threadId=thread_id)  # holds the queued run
    await wait_event(client, lambda e: e["type"] == "run.interrupted" and e["runId"] == hanging["runId"], thread_id=thread_id)

    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=2)
    assert answer["rolledBackRunIds"] == [runs[2]["id"], hanging["runId"]]
    later = (await client.call("run.get", runId=queued["runId"]))["run"]
    assert later["status"] == "cancelled" and later["reason"].startswith("rolled_back")
    assert files_of(ws) == states[1]
    with pytest.raises(InvalidState):
        await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=3)
    # The same commandId gets the same answer, and nothing happens twice.
    first = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1, commandId="cmd-rb-1")
    again = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1, commandId="cmd-rb-1")
    assert again == first
    assert files_of(ws) == states[0]


async def test_sigkill_during_a_rollback_leaves_a_graph_the_next_run_can_trust(tmp_path, short_dir):
    """F12 + F14: a daemon killed mid-rollback: after the restart every run is
    still shown, the rollback is reported as cut off, the agent's provider
    thread is retired (its memory is not trusted) and the next run gets the
    whole thread from a stored summary."""
    ws = user_repo(tmp_path, repo=False)
    # Between the restore's deletes and its writes (its safety capture writes no index when
    # nothing changed since the last run's capture, and the restore itself updates none).
    git = StalledGit(tmp_path, at="cat-file --batch")
    daemon = await _start(tmp_path, short_dir, env=git.env)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id, runs, _states = await three_runs(client, ws)
            # The rollback's restore stalls.
            await git.kill_during(daemon, partial(client.call, "rollback.toRun", threadId=thread_id, targetOrdinal=1))
    finally:
        git.release()
        await daemon.terminate()

    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            got = await client.call("thread.get", threadId=thread_id)
            assert [r["status"] for r in got["runs"]] == ["completed"] * 3
            events = await stored_events(client, thread_id)
            cut = [e for e in events if e["type"] == "thread.rollback_interrupted"]
            assert len(cut) == 1 and cut[0]["payload"]["runIds"] == [r["id"] for r in runs[1:]]
            assert await recall(client, thread_id, *WORDS) == {w: "context" for w in WORDS}
            # And the rollback can be done now.
            answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
            assert runs[1]["id"] in answer["rolledBackRunIds"]
    finally:
        assert await daemon.terminate() == 0


async def test_rollback_in_a_fork_keeps_its_inherited_history_and_the_source_rollback_leaves_the_fork_alone(client, tmp_path):
    """F6 + F14: a fork rolled back to 0 forgets its own runs but keeps what it
    inherited at the fork point; a source rolled back after the fork does not
    touch the fork's history (F6: a fork is its own thread)."""
    ws = user_repo(tmp_path, repo=False)
    source = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    runs = [await send_and_wait(client, source, script({"say": f"the word is {w}"})) for w in WORDS]
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": runs[1]["id"]})
    fork_id = forked["threadId"]
    await send_and_wait(client, fork_id, script({"say": "the word is delta"}))
    # The source goes back to run 1: the fork still has alpha and bravo.
    await client.call("rollback.toRun", threadId=source, targetOrdinal=1)
    assert await recall(client, fork_id, "alpha", "bravo", "charlie", "delta") == {
        "alpha": "native", "bravo": "native", "charlie": "absent", "delta": "native"}
    # The fork goes back to before its own first run: delta (and the recall run) are gone, the inherited runs stay.
    answer = await client.call("rollback.toRun", threadId=fork_id, targetOrdinal=0)
    assert answer["providerRollback"] == "native" and len(answer["rolledBackRunIds"]) == 2
    assert await recall(client, fork_id, "alpha", "bravo", "delta") == {"alpha": "native", "bravo": "native", "delta": "absent"}
    assert await recall(client, source, "alpha", "bravo") == {"alpha": "native", "bravo": "absent"}


async def test_rollback_after_a_daemon_restart_reverts_the_reloaded_agent(tmp_path, short_dir):
    """F11 + F14: no provider process is running after a restart; the rollback
    starts one, resumes the native thread and reverts it."""
    ws = user_repo(tmp_path, repo=False)
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id, runs, states = await three_runs(client, ws)
    finally:
        assert await daemon.terminate() == 0
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=2)
            assert answer["providerRollback"] == "native" and answer["rolledBackRunIds"] == [runs[2]["id"]]
            assert files_of(ws) == states[1]
            assert await recall(client, thread_id, *WORDS) == {"alpha": "native", "bravo": "native", "charlie": "absent"}
    finally:
        assert await daemon.terminate() == 0


async def test_a_native_history_that_cannot_be_reverted_is_rebuilt_and_says_why(tmp_path, short_dir):
    """F14: when the native revert fails (here the agent's own thread file is
    unreadable after a restart) the rollback still completes: the provider
    thread is retired with the reason and the next run is rebuilt from the graph."""
    ws = user_repo(tmp_path, repo=False)
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id, runs, states = await three_runs(client, ws)
            native = (await stored_events(client, thread_id))
            native_id = next(e["payload"]["providerThread"]["nativeThreadId"] for e in native
                             if e["type"] == "provider_thread.created")
    finally:
        assert await daemon.terminate() == 0
    (tmp_path / "data" / "providers" / "scripted" / "threads" / f"{native_id}.json").write_text("{ not json")
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
            assert answer["providerRollback"] == "rebuilt"
            assert answer["providerRollbackReason"].startswith("rolled_back: the native revert failed")
            assert files_of(ws) == states[0]
            assert await recall(client, thread_id, *WORDS) == {"alpha": "context", "bravo": "absent", "charlie": "absent"}
    finally:
        assert await daemon.terminate() == 0


async def test_rollback_node_restores_a_child_scope_and_keeps_the_parent_history(client, tmp_path):
    """F14 rollback.node: the files go back to when the outer subagent ended;
    the checkpoints of the children nested under it become stale; the parent's
    runs and memory are kept, and the answer names the files the parent
    changed since (a shared workspace)."""
    ws = user_repo(tmp_path, repo=False)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"subagent": {"steps": [{"write": {"path": "child.txt", "content": "from the child\n"}},
                                {"subagent": {"steps": [{"write": {"path": "inner.txt", "content": "inner\n"}}]}}]}},
        {"approval": {"kind": "command", "command": "go on"}},
        {"write": {"path": "child.txt", "content": "changed by the parent\n"}},
        {"write": {"path": "parent.txt", "content": "parent\n"}},
        {"say": "the word is alpha"},
    ))
    requested = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id)
    await client.call("approval.respond", requestId=requested["payload"]["request"]["id"], decision="accept")
    run = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run["status"] == "completed"
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    inner, outer = [c for c in listed if c["scope"] == "child"]
    assert inner["parentNodeId"] == outer["nodeId"]

    with pytest.raises(InvalidParams):
        await client.call("rollback.node", nodeId=outer["nodeId"], checkpointId=run["checkpointId"])
    with pytest.raises(NotFound):
        await client.call("rollback.node", nodeId="nod_nope", checkpointId=outer["id"])

    answer = await client.call("rollback.node", nodeId=outer["nodeId"], checkpointId=outer["id"])
    assert answer["sharedWorkspace"] is True and answer["providerRollback"] == "none"
    assert answer["parentChangedFiles"] == ["child.txt", "parent.txt"]
    assert (ws / "child.txt").read_text() == "from the child\n" and not (ws / "parent.txt").exists()
    assert (ws / "inner.txt").read_text() == "inner\n"
    assert answer["staleCheckpointIds"] == [inner["id"]]
    events = await stored_events(client, thread_id)
    rolled = next(e for e in events if e["type"] == "node.rolled_back")
    assert (rolled["runId"], rolled["nodeId"]) == (run["id"], outer["nodeId"])
    # The parent's history is kept: the run, and the agent's memory of it.
    assert (await client.call("run.get", runId=run["id"]))["run"]["status"] == "completed"
    assert await recall(client, thread_id, "alpha") == {"alpha": "native"}
    # Undo through the safety checkpoint.
    await client.call("checkpoint.restore", checkpointId=answer["safetyCheckpointId"])
    assert (ws / "child.txt").read_text() == "changed by the parent\n" and (ws / "parent.txt").exists()


async def test_rollback_node_rolls_a_threaded_childs_memory_back_with_its_files(client, tmp_path):
    """Issue 23 item 7 (seed 000: "roll back provider thread for that child
    scope if supported"): a subagent with a thread of its own is a child
    AppThread; after the person worked in it (run 1 there, word bravo),
    rollback.node of its node puts its files back and reverts its memory
    natively — that run is rolled_back and bravo is gone from its agent's
    native history — while the parent's history is kept."""
    ws = user_repo(tmp_path, repo=False)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run = await send_and_wait(client, thread_id, script(
        {"subagent": {"thread": True, "steps": [{"write": {"path": "child.txt", "content": "from the child\n"}},
                                                {"say": "the word is alpha"}]}},
        {"say": "parent done"}))
    assert run["status"] == "completed", run
    created = await wait_event(client, lambda e: e["type"] == "subagent.thread_created", thread_id=thread_id)
    child_id = created["payload"]["threadId"]
    [outer] = [c for c in (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"] if c["scope"] == "child"]
    later = await send_and_wait(client, child_id, script(
        {"write": {"path": "child.txt", "content": "changed in the child's thread\n"}}, {"say": "the word is bravo"}))
    assert later["status"] == "completed", later

    answer = await client.call("rollback.node", nodeId=outer["nodeId"], checkpointId=outer["id"])
    assert answer["childThreadId"] == child_id and answer["providerRollback"] == "native", answer
    assert (ws / "child.txt").read_text() == "from the child\n"
    assert (await client.call("run.get", runId=later["id"]))["run"]["status"] == "rolled_back"
    memory = next(e for e in await stored_events(client, child_id) if e["type"] == "thread.memory_rolled_back")
    assert memory["payload"]["rolledBackRunIds"] == [later["id"]] and memory["payload"]["byNodeId"] == outer["nodeId"]
    assert await recall(client, child_id, "alpha", "bravo") == {"alpha": "native", "bravo": "absent"}
    assert (await client.call("run.get", runId=run["id"]))["run"]["status"] == "completed", "the parent's run is kept"


async def test_a_restore_is_refused_while_another_thread_runs_in_that_workspace(client, tmp_path):
    """Hostile-round issue item 10, SPEC F14 (+ F13 checkpoint.restore): a
    rollback of one thread must not delete what another thread is writing.
    Thread B runs in the same folder as A (named through a symlink, one
    level down: same resolved path, one inside the other) and has written a
    new file: rollback.toRun, checkpoint.restore and rollback.node of A are
    ``invalid_state`` naming B's thread and run, and B's file stays. Once B
    has stopped, the rollback goes through."""
    ws = user_repo(tmp_path, repo=False)
    (ws / "sub").mkdir()
    (tmp_path / "link").symlink_to(ws)
    a = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run = await send_and_wait(client, a, script(
        {"subagent": {"steps": [{"write": {"path": "child.txt", "content": "from the child\n"}}]}},
        {"write": {"path": "a.txt", "content": "from a\n"}}))
    assert run["status"] == "completed", run
    [child] = [c for c in (await client.call("checkpoint.list", threadId=a))["checkpoints"] if c["scope"] == "child"]

    b = (await client.call("thread.create", workspace=str(tmp_path / "link" / "sub")))["threadId"]
    sent = await client.call("thread.message.send", threadId=b, text=script(
        {"write": {"path": "new.txt", "content": "b is writing this\n"}}, {"hang": True}))
    await wait_event(client, lambda e: e["type"] == "file_change.completed", thread_id=b)
    assert (ws / "sub" / "new.txt").exists()

    attempts = {
        "rollback.toRun": {"threadId": a, "targetOrdinal": 0},
        "checkpoint.restore": {"checkpointId": run["checkpointId"]},
        "rollback.node": {"nodeId": child["nodeId"], "checkpointId": child["id"]},
    }
    for method, params in attempts.items():
        with pytest.raises(InvalidState) as refused:
            await client.call(method, **params)
        message = str(refused.value)
        assert b in message and sent["runId"] in message, (method, message)
        assert [(r["threadId"], r["runId"]) for r in refused.value.data["activeRuns"]] == [(b, sent["runId"])], method
    assert (ws / "sub" / "new.txt").read_text() == "b is writing this\n"
    assert (ws / "a.txt").exists(), "nothing of A's was restored either"

    await client.call("thread.stop", threadId=b)
    assert (await wait_run_terminal(client, b, sent["runId"]))["status"] == "interrupted"
    answer = await client.call("rollback.toRun", threadId=a, targetOrdinal=0)
    assert answer["rolledBackRunIds"] == [run["id"]] and not (ws / "a.txt").exists()


async def test_a_run_that_starts_during_another_threads_restore_waits_for_it(tmp_path, autojump_clock, monkeypatch):
    """Hostile-round issue item 10, SPEC F13/F14: the entry check cannot see a
    run that becomes active after it, so a restore marks its folder while it
    writes, and a run of another thread in that folder starts (and takes its
    baseline) only after the restore ended — never in a half-restored tree."""
    from functools import partial

    from agentd.actors import effects as fx
    from agentd.actors.executors import Executor
    from agentd.actors.restoring_folders import RestoringFolders
    from agentd.actors.workspace_guard import overlaps, refusing_while_shared
    from agentd.protocol.wire import CheckpointRestoreParams
    from tests.supervisor.test_supervision import next_event, virtual_daemon

    ws = tmp_path / "ws"
    ws.mkdir()
    release, half_done, b_waits = trio.Event(), trio.Event(), trio.Event()
    real_wait = RestoringFolders.wait_until_free

    async def watched_wait(self, folder):
        if any(overlaps(folder, other) for other in self._folders.values()):
            b_waits.set()
        await real_wait(self, folder)

    monkeypatch.setattr(RestoringFolders, "wait_until_free", watched_wait)

    async def slow_restore(_executor, _effect):
        (ws / "half.txt").write_text("restored first\n")
        half_done.set()
        await release.wait()
        (ws / "whole.txt").write_text("restored last\n")

    # The restore's own effect, slowed down: the guard around it is the real one.
    monkeypatch.setattr(Executor, "_restore", slow_restore)

    def restore(_ctx, _command):
        yield fx.RestoreFiles(str(ws), "0" * 40, "refs/x", (), lambda _capture: None)
        return {"restored": True}

    async with virtual_daemon(tmp_path) as (daemon, client):
        a = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        b = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(daemon.registry.call, a, refusing_while_shared(restore),
                                       CheckpointRestoreParams(checkpoint_id=None), method="checkpoint.restore"))
            await half_done.wait()
            sent = await client.call("thread.message.send", threadId=b, text="hello")
            first: list[str] = []

            async def race(name, wait):
                await wait()
                first.append(name)
                race_scope.cancel()

            with trio.CancelScope() as race_scope:
                async with trio.open_nursery() as racers:
                    racers.start_soon(race, "waits", b_waits.wait)
                    racers.start_soon(race, "started", partial(
                        next_event, client, b, lambda e: e["type"] == "run.started"))
            assert first == ["waits"], "b's run waited for the restore instead of starting"
            assert (await client.call("run.get", runId=sent["runId"]))["run"]["status"] == "queued"
            release.set()
        run = await next_event(client, b, lambda e: e["type"] == "run.completed")
        baseline = next(c for c in (await client.call("checkpoint.list", threadId=b))["checkpoints"]
                        if c["kind"] == "baseline")
        files = {f["path"] for f in (await client.call("checkpoint.diff", checkpointId=run["payload"]["run"]["checkpointId"],
                                                       baseCheckpointId=baseline["id"]))["files"]}
        assert "whole.txt" not in files, "b's baseline was taken after the restore ended"
