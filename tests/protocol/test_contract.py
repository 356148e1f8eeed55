"""protocol/README.md checked against what the daemon does (issue 13).

- The events table: a set of scripted scenarios on a real daemon (and a
  restart of it) emits every documented event type, and nothing it emits is
  undocumented. A row's ``<node kind>`` and ``<status>`` stand for the kinds
  the row lists and the statuses the contract lists; a row with such a
  placeholder must be emitted at least once, every other type exactly as
  written.
- Every event that has a ``runId`` has a ``nodeId`` (SPEC F17).
- The events table names exactly the event types of ``agentd schema``
  (``protocol/events.py``), its patterned rows spelled out, and every event
  the scenarios emit matches that schema (issue 22).
- The Records section names exactly the statuses the store writes.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.actors import turns
from agentd.actors.context import ThreadContext
from agentd.actors.providers.base import RuntimeWarning_
from agentd.actors.state import ActiveRun, ThreadState
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.events import EVENTS
from agentd.store import records
from tests.helpers import script, stored_events, wait_event, wait_run_terminal
from tests.schema_check import check_event, schema

CONTRACT = Path(__file__).resolve().parents[2] / "protocol" / "README.md"
TEXT = CONTRACT.read_text(encoding="utf-8")


def section(title: str) -> str:
    return TEXT.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def record_statuses(name: str) -> list[str]:
    """The statuses the Records section lists for record ``name``."""
    entry = section("Records").split(f"**{name}**", 1)[1].split("\n- **", 1)[0]
    match = re.search(r"\bstatus \(([^)]*)\)", " ".join(entry.split()))
    assert match, f"the contract lists no statuses for {name}"
    return [s.strip() for s in match.group(1).replace(" ", "").split("|")]


def node_statuses() -> list[str]:
    line = section("Events").split("Node statuses:", 1)[1].split("(", 1)[0]
    return re.findall(r"`([a-z_]+)`", line)


def documented_events() -> tuple[set[str], list[re.Pattern[str]], dict[str, str]]:
    """``(concrete types, patterns, pattern -> its row)`` from the events table."""
    rows = [line for line in section("Events").splitlines() if line.startswith("| `")]
    kinds_row = next(r for r in rows if r.startswith("| `<node kind>"))
    node_kinds = re.findall(r"`([a-z_]+)`", kinds_row.split("|")[3])
    def any_of(values: list[str]) -> str:
        return "(?:" + "|".join(map(re.escape, values)) + ")"

    concrete: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    source: dict[str, str] = {}
    for row in rows:
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if "<" not in name:
                concrete.add(name)
                continue
            # An attempt's statuses are the RunAttempt's; a node's the node statuses.
            statuses = record_statuses("RunAttempt") if name.startswith("attempt.") else node_statuses()
            regex = re.escape(name).replace(re.escape("<node kind>"), any_of(node_kinds))
            regex = regex.replace(re.escape("<status>"), any_of(statuses))
            pattern = re.compile(regex + r"\Z")
            patterns.append(pattern)
            source[pattern.pattern] = name
    return concrete, patterns, source


def documented_event_types() -> set[str]:
    """Every event type the events table names, its placeholders spelled out:
    ``<node kind>`` as each kind its row lists, ``<status>`` as each status
    the contract lists (a ``<node kind>.started`` row stands for ``started`` too)."""
    concrete, patterns, source = documented_events()
    kinds_row = next(r for r in section("Events").splitlines() if r.startswith("| `<node kind>"))
    # the kinds, before the row goes on about how an approval's node ends
    node_kinds = re.findall(r"`([a-z_]+)`", kinds_row.split("|")[3].split(";")[0])
    types_ = set(concrete)
    for pattern in patterns:
        name = source[pattern.pattern]
        statuses = record_statuses("RunAttempt") if name.startswith("attempt.") else node_statuses()
        kinds = node_kinds if "<node kind>" in name else [""]
        for kind in kinds:
            with_kind = name.replace("<node kind>", kind)
            types_ |= {with_kind.replace("<status>", status) for status in statuses} if "<status>" in name else {with_kind}
    return types_


def test_the_events_table_names_exactly_the_schemas_events():
    """Issue 22: what ``agentd schema`` exports under ``events`` is the table, type for type."""
    documented = documented_event_types()
    exported = set(schema()["events"])
    assert exported == set(EVENTS)
    assert documented == exported, (
        f"in the table, not the schema: {sorted(documented - exported)}; "
        f"in the schema, not the table: {sorted(exported - documented)}")


# -- the scenarios ------------------------------------------------------------------------------

CONFIG = """
[daemon]
interrupt_grace = 1

[providers.nosteer]
kind = "scripted"
capabilities = { steer = false }
"""

HANG_TOOL = script({"tool": {"name": "long job", "hang": True}})


async def event_of(client: Client, thread_id: str, type_: str, run_id: str | None = None) -> dict[str, Any]:
    return await wait_event(client, lambda e: e["type"] == type_ and (run_id is None or e.get("runId") == run_id),
                            thread_id=thread_id, timeout=60)


async def send(client: Client, thread_id: str, text: str, **params: Any) -> str:
    return (await client.call("thread.message.send", threadId=thread_id, text=text, **params))["runId"]


async def finish(client: Client, thread_id: str, run_id: str) -> dict[str, Any]:
    return await wait_run_terminal(client, thread_id, run_id, timeout=60)


async def first_life(client: Client) -> dict[str, str]:
    """Scenarios on a running daemon; returns the threads the second life uses."""
    t1 = (await client.call("thread.create", title="everything"))["threadId"]
    await finish(client, t1, await send(client, t1, "hello"))
    await finish(client, t1, await send(client, t1, script(
        {"plan": [{"step": "look", "status": "completed"}, {"step": "write", "status": "pending"}]},
        {"write": {"path": "a.txt", "content": "a"}},
        {"tool": {"name": "lint", "seconds": 0}},
        {"subagent": {"steps": [{"plan": [{"step": "inner", "status": "pending"}]}, {"say": "from the subagent"}]}},
        {"proposePlan": "# Plan\n1. do it"},
    )))
    plan = (await event_of(client, t1, "plan.proposed"))["payload"]["artifact"]
    implemented = await client.call("plan.implement", planId=plan["id"], mode="new_run")
    await finish(client, t1, implemented["runId"])

    for decision in ("accept",):
        run_id = await send(client, t1, script({"approval": {"kind": "command", "command": "make"}}))
        request = (await event_of(client, t1, "approval.requested", run_id))["payload"]["request"]
        await client.call("approval.respond", requestId=request["id"], decision=decision)
        await finish(client, t1, run_id)
    run_id = await send(client, t1, script({"ask": {"questions": [{"id": "color", "question": "Color?", "options": ["red"]}]}}))
    request = (await event_of(client, t1, "user_input.requested", run_id))["payload"]["request"]
    await client.call("user-input.respond", requestId=request["id"], answers={"color": "red"})
    await finish(client, t1, run_id)

    # A native steer, then an interrupt.
    run_id = await send(client, t1, HANG_TOOL)
    await event_of(client, t1, "tool.started", run_id)
    await send(client, t1, "also this", dispatchMode={"type": "steer_active", "targetRunId": run_id})
    await event_of(client, t1, "message.steered", run_id)
    await client.call("run.interrupt", runId=run_id)
    await finish(client, t1, run_id)

    # The queue: cancel, reorder, Stop (holds), release.
    active = await send(client, t1, HANG_TOOL)
    await event_of(client, t1, "tool.started", active)
    q1, q2, q3 = [await send(client, t1, text) for text in ("one", "two", "three")]
    await client.call("queued-run.cancel", runId=q2)
    await client.call("queued-run.reorder", threadId=t1, runIds=[q3, q1])
    await client.call("thread.stop", threadId=t1)
    await finish(client, t1, active)
    await client.call("thread.queue.release", threadId=t1)
    await finish(client, t1, q1)
    await finish(client, t1, await send(client, t1, script({"fail": "boom"})))

    # A steer by restart (run.retrying), and an interrupt the runtime ignores
    # (runtime.warning, then its session is stopped).
    t2 = (await client.call("thread.create", provider="nosteer"))["threadId"]
    run_id = await send(client, t2, HANG_TOOL)
    await event_of(client, t2, "tool.started", run_id)
    await send(client, t2, "instead", dispatchMode={"type": "steer_active", "targetRunId": run_id})
    await finish(client, t2, run_id)
    run_id = await send(client, t2, script({"hang": True, "ignoreInterrupt": True}))
    await event_of(client, t2, "run.started", run_id)
    await client.call("run.interrupt", runId=run_id)
    await finish(client, t2, run_id)

    # A crash loop (session.error, provider_thread.error).
    t3 = (await client.call("thread.create"))["threadId"]
    await finish(client, t3, await send(client, t3, script({"crash": 1})))

    # Left open for the restart: an approval, a question, a running tool and a queued run.
    t4 = (await client.call("thread.create"))["threadId"]
    await send(client, t4, script({"approval": {"kind": "command", "command": "deploy"}}))
    await event_of(client, t4, "approval.requested")
    t5 = (await client.call("thread.create"))["threadId"]
    await send(client, t5, script({"ask": {"questions": [{"id": "q", "question": "?"}]}}))
    await event_of(client, t5, "user_input.requested")
    t6 = (await client.call("thread.create"))["threadId"]
    await send(client, t6, HANG_TOOL)
    await event_of(client, t6, "tool.started")
    await send(client, t6, "never sent")
    native = (await event_of(client, t1, "provider_thread.created"))["payload"]["providerThread"]["nativeThreadId"]
    return {"t1": t1, "t2": t2, "t1_native": native}


async def second_life(client: Client, threads: dict[str, str]) -> None:
    """After a SIGKILL: reconciliation, a provider thread that cannot be
    resumed (replaced with a handoff), and one that is resumed."""
    await finish(client, threads["t1"], await send(client, threads["t1"], "are you there?"))
    await finish(client, threads["t2"], await send(client, threads["t2"], "and you?"))
    checkpoints = (await client.call("checkpoint.list", threadId=threads["t2"]))["checkpoints"]
    captured = [c for c in checkpoints if c["status"] == "captured"]
    await client.call("checkpoint.restore", checkpointId=captured[0]["id"])
    await client.call("thread.fork", threadId=threads["t2"])
    # A rollback (run.rolled_back, checkpoint.stale, provider_thread.reverted, thread.rolled_back).
    t7 = (await client.call("thread.create"))["threadId"]
    for word in ("one", "two"):
        await finish(client, t7, await send(client, t7, script({"write": {"path": f"{word}.txt", "content": word}})))
    await client.call("rollback.toRun", threadId=t7, targetOrdinal=1)
    # A child scope rolled back (node.rolled_back): t1's subagent.
    child = next(c for c in (await client.call("checkpoint.list", threadId=threads["t1"]))["checkpoints"]
                 if c["scope"] == "child" and c["status"] == "captured")
    await client.call("rollback.node", nodeId=child["nodeId"], checkpointId=child["id"])
    # Rename and delete (issue 28): thread.updated, thread.deleted.
    await client.call("thread.update", threadId=t7, title="renamed")
    await client.call("thread.delete", threadId=t7)


async def follow_ephemeral(client: Client, seen: set[str], task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with client.subscribe(after_seq=(await client.call("daemon.status"))["lastSeq"]) as events:
        task_status.started()
        async for event in events:
            if event.get("ephemeral"):
                seen.add(event["type"])


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> list[dict[str, Any]]:
    """Every event of the scenarios: the stored log after the restart, and
    the ephemeral events seen live before it."""
    base = tmp_path_factory.mktemp("contract")
    return trio.run(_run_scenarios, base)


async def _run_scenarios(base: Path) -> list[dict[str, Any]]:
    import shutil
    import tempfile

    config = base / "config.toml"
    config.write_text(CONFIG)
    data = base / "data"
    socket_dir = Path(tempfile.mkdtemp(prefix="ad-"))
    socket = socket_dir / "s.sock"
    live: set[str] = set()
    try:
        daemon = await start_daemon(data, socket, config=config)
        try:
            async with Client.connect(socket) as client:
                async with trio.open_nursery() as nursery:
                    await nursery.start(follow_ephemeral, client, live)
                    threads = await first_life(client)
                    nursery.cancel_scope.cancel()
        finally:
            await daemon.kill()
        (data / "providers" / "scripted" / "threads" / f"{threads['t1_native']}.json").write_text("{ not json")
        daemon = await start_daemon(data, socket, config=config)
        try:
            async with Client.connect(socket) as client:
                await second_life(client, threads)
                log = await stored_events(client)
        finally:
            assert await daemon.terminate() == 0, daemon.log_text()[-3000:]
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    return log + [{"type": t, "ephemeral": True} for t in sorted(live)]


def module_of(name: str) -> str:
    """The dotted module of test file ``name`` wherever it sits under tests/."""
    (path,) = Path(__file__).resolve().parents[1].rglob(f"{name}.py")
    relative = path.relative_to(Path(__file__).resolve().parents[2]).with_suffix("")
    return ".".join(relative.parts)


#: documented types whose scenario needs a fault this walk does not stage
#: (git missing, a SIGKILL inside a capture): each is asserted by the named test
EMITTED_ELSEWHERE = {
    "checkpoint.error": ("test_checkpoints_daemon", "test_git_missing_gives_error_checkpoints_and_the_run_ends_normally"),
    "checkpoint.missing": ("test_checkpoints_daemon", "test_sigkill_during_a_capture_gives_a_missing_checkpoint_never_recaptured"),
    "context_transfer.failed": ("test_lineage", "test_a_failed_native_fork_says_why_and_the_retry_resolves_portably"),
    "context_transfer.superseded": ("test_merge_back",
                                    "test_a_merge_back_whose_run_is_cancelled_is_superseded_and_the_fork_can_be_merged_again"),
    "thread.rollback_interrupted": ("test_rollback", "test_sigkill_during_a_rollback_leaves_a_graph_the_next_run_can_trust"),
    "checkpoint.restore_interrupted": ("test_checkpoints_hostile",
                                       "test_sigkill_during_a_restore_keeps_the_way_back_listed_and_restorable"),
    # Delegation needs agentd mcp's start (seconds of imports): its own tests (SPEC F9).
    "task.delegated": ("test_delegation", "test_f9_f10_stopping_the_parent_stops_its_task_and_the_result_waits_for_the_next_run"),
    "task.ended": ("test_delegation", "test_f9_delegate_without_waiting_the_result_reaches_the_next_run_as_a_stored_handoff"),
    "task.woke": ("test_wakeups", "test_f9_a_task_that_ends_wakes_its_parent_with_a_run_that_takes_its_result_in"),
    "task.wake_dropped": ("test_wakeups", "test_f9_f10_a_stop_drops_the_wake_ups_its_working_tasks_owe"),
    "node.interrupt_requested": ("test_node_interrupt", "test_f10_interrupting_a_running_node_ends_it_and_the_run_goes_on"),
    "thread.memory_rolled_back": ("test_rollback", "test_rollback_node_rolls_a_threaded_childs_memory_back_with_its_files"),
    "subagent.thread_created": ("test_delegation", "test_f9_f6_a_native_subagent_with_a_thread_of_its_own_is_a_child_thread"),
    # Faults in one thread's actor, and torn records (issue 20).
    "thread.failed": ("test_fault_isolation", "test_a_failed_actor_costs_its_thread_only_and_the_thread_runs_again"),
    "thread.unquarantined": ("test_fault_isolation", "test_three_failures_quarantine_the_thread_until_unquarantined"),
    "event.corrupt": ("test_fault_isolation", "test_a_torn_event_is_replayed_as_a_placeholder_without_a_gap"),
    # Usage reports and a provider's silence (issue 28): their own daemon, with a price table and a short stall_after.
    "run.usage": ("test_usage_and_stalls", "test_usage_lands_on_the_run_summed_on_the_thread_and_priced_where_known"),
    "run.stalled": ("test_usage_and_stalls", "test_a_silent_provider_stalls_its_run_which_goes_on_when_it_speaks"),
    "run.unstalled": ("test_usage_and_stalls", "test_a_silent_provider_stalls_its_run_which_goes_on_when_it_speaks"),
    # A fork's own worktree needs a git repository with a user's commit (issue 27).
    "thread.archived": ("test_archiving", "test_archive_removes_the_worktree_after_a_final_checkpoint_and_unarchive_brings_it_back"),
    "thread.unarchived": ("test_archiving", "test_archive_removes_the_worktree_after_a_final_checkpoint_and_unarchive_brings_it_back"),
    "merge_back.files": ("test_merge_files",
                         "test_a_clean_merge_writes_the_forks_changes_and_its_safety_checkpoint_undoes_it"),
    "workspace.created": ("test_worktrees",
                          "test_f6_a_worktree_fork_carries_the_uncommitted_state_and_leaves_the_users_git_alone"),
}


def test_events_emitted_elsewhere_name_tests_that_exist():
    import importlib

    for event_type, (module, test) in EMITTED_ELSEWHERE.items():
        assert hasattr(importlib.import_module(module_of(module)), test), f"{event_type}: no test {module}::{test}"


def test_every_documented_event_type_is_emitted_by_a_scenario(emitted):
    concrete, patterns, source = documented_events()
    types_ = {e["type"] for e in emitted}
    missing = sorted(concrete - types_ - set(EMITTED_ELSEWHERE))
    assert not missing, f"documented but never emitted: {missing}"
    unmatched = [source[p.pattern] for p in patterns if not any(p.match(t) for t in types_)]
    assert not unmatched, f"documented patterns never emitted: {unmatched}"


def test_no_emitted_event_type_is_undocumented(emitted):
    concrete, patterns, _source = documented_events()
    undocumented = sorted({e["type"] for e in emitted if e["type"] not in concrete and not any(p.match(e["type"]) for p in patterns)})
    assert not undocumented, f"emitted but not in protocol/README.md: {undocumented}"


def test_every_emitted_event_matches_the_schema(emitted):
    """Issue 22: the stored log of the scenarios — every documented type but
    the few staged elsewhere — against ``agentd schema``'s document (the
    suite's client checks each event as it arrives too; this says it once
    for the whole log)."""
    stored = [e for e in emitted if "payload" in e]
    assert len({e["type"] for e in stored}) > 60
    for event in stored:
        check_event(event)


def test_every_event_of_a_run_is_placed_at_a_node(emitted):
    """SPEC F17: an event with a runId also says which node it belongs to."""
    unplaced = sorted({e["type"] for e in emitted if e.get("runId") and not e.get("nodeId")})
    assert not unplaced, f"events with a runId but no nodeId: {unplaced}"


def test_the_scenarios_covered_what_the_contract_calls_out(emitted):
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in emitted:
        by_type.setdefault(event["type"], []).append(event)
    assert {n["payload"]["node"]["status"] for n in by_type["approval.completed"]} == {"completed"}
    assert any(e["payload"]["node"]["kind"] == "user_input_request" for e in by_type["user_input_request.completed"])
    assert by_type["run.waiting"] and by_type["run.running"]
    assert any(e["payload"]["scope"] == "child" for e in by_type["plan.updated"])
    assert any(e["payload"]["message"]["role"] == "user" and e["nodeId"] for e in by_type["message.created"])


# -- Records ---------------------------------------------------------------------------------------

RECORD_STATUS = {
    "AppThread": records.AppThread, "ConversationMessage": records.ConversationMessage, "Run": records.Run,
    "RunAttempt": records.RunAttempt, "ProviderSession": records.ProviderSession,
    "ProviderThread": records.ProviderThread, "RuntimeRequest": records.RuntimeRequest,
    "PlanArtifact": records.PlanArtifact,
}


def literal_values(annotation: Any) -> set[str]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(literal_values(a) for a in typing.get_args(annotation)))
    return set(typing.get_args(annotation))


@pytest.mark.parametrize("name", sorted(RECORD_STATUS))
def test_the_records_section_lists_exactly_the_statuses_the_store_writes(name):
    hints = typing.get_type_hints(RECORD_STATUS[name], vars(records))
    assert set(record_statuses(name)) == literal_values(hints["status"]), name


def test_node_statuses_are_the_stores():
    assert set(node_statuses()) == literal_values(records.NodeStatus)


# -- a provider's runtime.warning is placed too ------------------------------------------------------


async def test_a_providers_runtime_warning_is_placed_at_the_active_root():
    """The provider path (turns.on_runtime_warning), a transition run on its
    own: the scenarios cannot make the scripted agent warn on its own."""
    run = records.Run(id="run_w", thread_id="thr_w", ordinal=1, root_node_id="nod_root")
    state = ThreadState(records.AppThread(id="thr_w"))
    state.active = ActiveRun(
        run=run, attempt=records.RunAttempt(id="att_w", run_id="run_w", thread_id="thr_w", number=1),
        root=records.ExecutionNode(id="nod_root", thread_id="thr_w", run_id="run_w", kind="root_turn"),
        user_message=records.ConversationMessage(id="msg_w", thread_id="thr_w", role="user"),
    )
    ctx = ThreadContext(state=state, store=None, config=None, sessions=None, now=lambda: 1.0,  # type: ignore[arg-type]
                        checkpoints_on=False, shutting_down=lambda: False, workspaces_dir="/nonexistent")
    decision = turns.on_runtime_warning(ctx, RuntimeWarning_(attempt_id="att_w", message="rate limited"))
    committed = [decision.batch]
    (event,) = committed[0].events
    assert (event.type, event.run_id, event.node_id) == ("runtime.warning", "run_w", "nod_root")
