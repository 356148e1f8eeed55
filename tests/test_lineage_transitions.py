"""Lineage decisions and transitions as plain functions (SPEC F4, F5, F6,
F8, F4): ``resolve_start_context`` on hand-made views, the transitions
on the batches they fill, and the handoff text's cap — no trio, no daemon."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.actors import lineage
from agentd.actors.graph import ThreadBatch
from agentd.actors.handoff import run_section
from agentd.actors.lineage import HandoffPlan, Limits, StartView, Target, resolve_start_context
from agentd.actors.state import ActiveRun, AttemptContext, ThreadState
from agentd.store.records import (
    RECORD_KINDS,
    AppThread,
    ContextTransfer,
    ConversationMessage,
    ExecutionNode,
    ProviderThread,
    Run,
    RunAttempt,
    SourcePoint,
    decode_record,
)

NOW = 2_000.0
SETTINGS = {"kind": "scripted", "model": None, "args": [], "envNames": [], "binary": None, "capabilities": {}}


def pt(pid: str, provider: str = "a", covered: tuple[str, ...] = (), **fields: Any) -> ProviderThread:
    return ProviderThread(id=pid, thread_id="thr_t", provider=provider, kind="scripted", native_thread_id=f"n-{pid}",
                          covered_run_ids=list(covered), **fields)


def view(provider: str = "a", history: tuple[str, ...] = (), backing: dict[str, ProviderThread] | None = None,
         **fields: Any) -> StartView:
    return StartView(thread_id="thr_t", run_id="run_new", target=Target(provider, "scripted", fields.pop("native_fork", True), SETTINGS),
                     history=history, backing=backing or {}, **fields)


def fork_transfer(status: str = "pending", provider: str = "a", native: str | None = "n-src", **fields: Any) -> ContextTransfer:
    point = SourcePoint(type="run", thread_id="thr_s", run_id="r2", provider=provider, provider_thread_id="pth_src",
                        native_thread_id=native, native_turn_ref="turn-2")
    return ContextTransfer(id="xfr_f", type="fork", source_thread_id="thr_s", target_thread_id="thr_t", source_point=point,
                           status=status, source_run_ids=["r1", "r2"], **fields)


# -- resolve_start_context ---------------------------------------------------------------------


def test_first_run_needs_nothing():
    assert resolve_start_context(view()).kind == "none"


def test_same_provider_thread_that_has_seen_everything_is_resumed_as_is():
    a = pt("pth_a", covered=("r1", "r2"))
    ctx = resolve_start_context(view(history=("r1", "r2"), backing={"a": a}, current=a, previous_provider="a"))
    assert (ctx.kind, ctx.resume, ctx.handoff) == ("none", a, None)


def test_switch_to_a_provider_never_used_gives_a_portable_handoff_of_the_whole_history():
    a = pt("pth_a", covered=("r1", "r2"))
    ctx = resolve_start_context(view("b", history=("r1", "r2"), backing={"a": a}, current=a, previous_provider="a"))
    assert ctx.kind == "portable" and ctx.resume is None and ctx.retire is None
    assert ctx.handoff == HandoffPlan("portable_full", ("r1", "r2"), "provider_switch: a → b")


def test_return_bridges_exactly_the_runs_missed():
    a = pt("pth_a", covered=("r1",))
    b = pt("pth_b", "b", covered=("r1", "r2"))
    ctx = resolve_start_context(view("a", history=("r1", "r2"), backing={"a": a, "b": b}, current=b, previous_provider="b"))
    assert (ctx.kind, ctx.resume) == ("delta", a)
    assert ctx.handoff.strategy == "delta" and ctx.handoff.run_ids == ("r2",)


@pytest.mark.parametrize(("fields", "reason"), [
    ({"status": "unusable", "reason": "gone"}, "cannot_resume: provider thread pth_a is unusable (gone)"),
    ({"bridges_in_a_row": 3}, "stale_context: bridged 3 times in a row (limit 3)"),
    ({"settings": {**SETTINGS, "model": "old"}}, "settings_changed: model 'old' → None"),
])
def test_fallbacks_replace_the_provider_thread_with_a_full_summary(fields, reason):
    a = pt("pth_a", covered=("r1",), **fields)
    ctx = resolve_start_context(view("a", history=("r1", "r2"), backing={"a": a}, current=a, previous_provider="b"))
    assert (ctx.kind, ctx.resume, ctx.retire, ctx.reason) == ("portable", None, a, reason)
    assert ctx.handoff == HandoffPlan("full_thread_summary", ("r1", "r2"), reason)


def test_too_far_behind_clean_context_and_a_lost_provider_thread_fall_back_too():
    a = pt("pth_a", covered=("r1",))
    history = tuple(f"r{i}" for i in range(1, 5))
    behind = resolve_start_context(view(history=history, backing={"a": a}, limits=Limits(max_runs_behind=2)))
    assert behind.reason == "too_far_behind: 3 runs behind (limit 2)"
    clean = resolve_start_context(view(history=("r1",), backing={"a": a}, clean_context=True))
    assert clean.kind == "portable" and clean.reason.startswith("clean_context") and clean.retire == a
    lost = resolve_start_context(view(history=("r1",), backing={"a": a}, lost=("pth_a", "resume failed: corrupt")))
    assert lost.reason == "cannot_resume: resume failed: corrupt" and lost.handoff.strategy == "full_thread_summary"
    version = resolve_start_context(view(history=("r1",), backing={"a": a}, lost=("pth_a", "settings_changed: runtime version 1.0.0 → 2.0.0")))
    assert version.reason == "settings_changed: runtime version 1.0.0 → 2.0.0"


def test_compatible_setting_changes_do_not_replace_the_provider_thread():
    a = pt("pth_a", covered=("r1",), settings={**SETTINGS, "capabilities": {"steer": True}, "envNames": ["X"]})
    assert resolve_start_context(view(history=("r1",), backing={"a": a})).kind == "none"


def test_a_pending_fork_resolves_natively_on_the_same_provider_that_can_fork():
    source = pt("pth_src", covered=("r1", "r2", "r3"))
    ctx = resolve_start_context(view(history=("r1", "r2"), transfer=fork_transfer(), source_backing=source))
    assert ctx.kind == "native" and ctx.handoff is None
    assert (ctx.native.native_thread_id, ctx.native.turn_ref, ctx.native.covered) == ("n-src", "turn-2", ("r1", "r2"))


def test_a_native_fork_whose_source_missed_runs_gets_a_delta_beside_it():
    source = pt("pth_src", covered=("r2",))
    ctx = resolve_start_context(view(history=("r1", "r2"), transfer=fork_transfer(), source_backing=source))
    assert ctx.kind == "native" and ctx.handoff.strategy == "delta" and ctx.handoff.run_ids == ("r1",)


@pytest.mark.parametrize(("transfer", "target", "why"), [
    (fork_transfer(provider="a"), dict(provider="b"), "the fork runs on b, the source ran on a"),
    (fork_transfer(), dict(native_fork=False), "a has no native fork"),
    (fork_transfer(native=None), {}, "the source point has no native thread"),
    (fork_transfer(status="failed", error="boom"), {}, "the earlier resolution failed (boom)"),
    (fork_transfer(), dict(source_rolled_back=("r2",)), "the source rolled back 1 run(s) of the fork point"),
])
def test_a_fork_resolves_portably_otherwise(transfer, target, why):
    source = pt("pth_src", covered=("r1", "r2"))
    ctx = resolve_start_context(view(history=("r1", "r2"), transfer=transfer, source_backing=source, **target))
    assert ctx.kind == "portable" and why in ctx.reason
    assert ctx.handoff.strategy == "portable_full" and ctx.handoff.run_ids == ("r1", "r2")


def test_a_fork_that_already_has_a_provider_thread_from_an_unfinished_resolution_retires_it():
    stale = pt("pth_half")
    ctx = resolve_start_context(view(history=("r1", "r2"), transfer=fork_transfer(status="failed", error="daemon_restart"),
                                     source_backing=pt("pth_src", covered=("r1", "r2")), current=stale))
    assert ctx.retire == stale and ctx.kind == "portable"


@pytest.mark.parametrize("kind", ["subagent_spawn", "subagent_result"])
def test_transfers_agentd_cannot_resolve_are_unsupported(kind):
    transfer = ContextTransfer(id="xfr_m", type=kind, source_thread_id="s", target_thread_id="thr_t",
                               source_point=SourcePoint(type="run", thread_id="s"))
    ctx = resolve_start_context(view(transfer=transfer))
    assert ctx.kind == "unsupported" and kind in ctx.reason


def test_settings_and_version_changes():
    assert lineage.settings_change({}, SETTINGS) is None, "a provider thread from before settings were recorded"
    assert lineage.settings_change(SETTINGS, {**SETTINGS, "kind": "codex"}) == "settings_changed: kind 'scripted' → 'codex'"
    assert lineage.version_change("0.171.0", "0.171.5") is None
    assert lineage.version_change("0.171.0", "0.172.0") == "settings_changed: runtime version 0.171.0 → 0.172.0"
    assert lineage.version_change("2.1.332", "2.9.0") is None
    assert lineage.version_change("2.1.332", "3.0.0") is not None
    assert lineage.version_change(None, "1.0.0") is None
    assert lineage.version_change("1", "1.7") is None, "the scripted agent's bare major version"
    assert lineage.version_change("1", "2") == "settings_changed: runtime version 1 → 2"
    assert lineage.version_change("built-in", "2") is None, "no version to hold it to"


def test_a_claude_fork_in_another_workspace_is_portable():
    """A Claude session is bound to its directory: a fork that works elsewhere
    cannot continue it natively (Codex and scripted take a cwd per turn)."""
    source = pt("pth_src", covered=("r1", "r2"))
    moved = StartView(thread_id="thr_t", run_id="run_new", target=Target("a", "claude", True, SETTINGS), history=("r1", "r2"),
                      backing={}, transfer=fork_transfer(), source_backing=source, workspace_moved=True)
    assert resolve_start_context(moved).kind == "portable"
    assert "another workspace" in resolve_start_context(moved).reason
    assert resolve_start_context(view(history=("r1", "r2"), transfer=fork_transfer(), source_backing=source,
                                      workspace_moved=True)).kind == "native"


def merge_transfer(status: str = "pending") -> ContextTransfer:
    return ContextTransfer(id="xfr_m", type="merge_back", source_thread_id="thr_f", target_thread_id="thr_t",
                           source_point=SourcePoint(type="latest_stable", thread_id="thr_f", run_id="f2"),
                           base_point=SourcePoint(type="run", thread_id="thr_t", run_id="r1"), run_id="run_new",
                           status=status, source_run_ids=["f1", "f2"])


def test_a_merge_back_rides_beside_whatever_the_provider_thread_needs():
    """F7: the merge is carried through the decision unchanged; the provider
    thread's own context is decided as without it."""
    a = pt("pth_a", covered=("r1",))
    ctx = resolve_start_context(view(history=("r1",), backing={"a": a}, current=a, previous_provider="a", merge=merge_transfer()))
    assert (ctx.kind, ctx.resume, ctx.merge.id) == ("none", a, "xfr_m")


def test_a_merge_back_is_resolved_with_its_handoff_consumed_with_the_turn_or_failed_without_it():
    for turn in (True, False):
        a = pt("pth_a", covered=("r1",))
        state = active_state(current=a)
        v = view(history=("r1",), backing={"a": a}, current=a, previous_provider="a", merge=merge_transfer())
        ctx = resolve_start_context(v)
        batch = ThreadBatch(thread_id="thr_t", now=NOW)
        lineage.record_start(batch, state, v, ctx, None)
        base = SourcePoint(type="run", thread_id="thr_t", run_id="r1")
        handoff = lineage.record_merge(batch, state, ctx, ctx.merge, built(("f1", "f2")), base=base, run_ids=("f1", "f2"),
                                       target_provider="a")
        merge = state.active.context.merge
        assert (merge.status, merge.resolution, merge.handoff_id, merge.source_run_ids) == (
            "resolved_portable", "portable", handoff.id, ["f1", "f2"])
        assert (handoff.strategy, handoff.transfer_id, handoff.covered_run_ids, handoff.target_provider_thread_id) == (
            "delta", "xfr_m", ["f1", "f2"], "pth_a")
        assert (state.active.attempt.handoff_id, state.active.attempt.transfer_id) == (handoff.id, "xfr_m")
        assert [e.type for e in batch.events] == ["context_handoff.created", "context_transfer.resolved"]
        after = ThreadBatch(thread_id="thr_t", now=NOW + 1)
        if turn:
            state.active.attempt = _with_pt(state.active.attempt, "pth_a")
            lineage.turn_started(after, state)
            assert state.active.context.merge.status == "consumed" and state.active.context.merge.consumed_at == NOW + 1
            lineage.attempt_closing(after, state, "later")
            assert [e.type for e in after.events] == ["context_transfer.consumed"]
        else:
            lineage.attempt_closing(after, state, "provider_start_failed: boom")
            assert (state.active.context.merge.status, state.active.context.merge.error) == ("failed", "provider_start_failed: boom")
            assert [e.type for e in after.events] == ["context_transfer.failed"]


# -- transitions ------------------------------------------------------------------------------


def written(b: ThreadBatch) -> list[Any]:
    return [decode_record(db, value) for db, _key, value in b.ops if db in RECORD_KINDS and value is not None]


def active_state(current: ProviderThread | None = None) -> ThreadState:
    state = ThreadState(AppThread(id="thr_t", workspace="/w", provider="a"), provider_thread=current)
    run = Run(id="run_new", thread_id="thr_t", ordinal=3, provider="a")
    state.active = ActiveRun(run=run, attempt=RunAttempt(id="att_1", run_id=run.id, thread_id="thr_t", number=1),
                             root=ExecutionNode(id="nod_r", thread_id="thr_t", run_id=run.id, kind="root_turn"),
                             user_message=ConversationMessage(id="msg_u", thread_id="thr_t", role="user", text="hi"))
    return state


def built(run_ids: tuple[str, ...]) -> Any:
    from agentd.actors.handoff import BuiltHandoff

    return BuiltHandoff(text="HANDOFF", covered_run_ids=list(run_ids), cap=100)


def test_a_delta_start_records_transfer_and_handoff_then_the_turn_consumes_and_the_end_covers():
    a = pt("pth_a", covered=("r1",))
    b = pt("pth_b", "b", covered=("r1", "r2"))
    state = active_state(current=b)
    v = view("a", history=("r1", "r2"), backing={"a": a, "b": b}, current=b, previous_provider="b")
    ctx = resolve_start_context(v)
    batch = ThreadBatch(thread_id="thr_t", now=NOW)
    context = lineage.record_start(batch, state, v, ctx, built(("r2",)))

    transfer, handoff = context.transfer, context.handoff
    assert (transfer.type, transfer.status, transfer.resolution, transfer.handoff_id) == (
        "provider_handoff", "resolved_portable", "portable", handoff.id)
    assert (transfer.source_provider, transfer.target_provider, transfer.target_provider_thread_id) == ("b", "a", "pth_a")
    assert transfer.base_point.run_id == "r1" and transfer.source_point.run_id == "r2"
    assert (handoff.strategy, handoff.covered_run_ids, handoff.target_provider_thread_id, handoff.size) == ("delta", ["r2"], "pth_a", 7)
    assert state.active.attempt.handoff_id == handoff.id and state.active.attempt.transfer_id == transfer.id
    assert [e.type for e in batch.events] == ["context_transfer.created", "context_handoff.created", "context_transfer.resolved"]

    # The starter resumes pth_a (graph.provider_thread_ready makes it current); the turn starts…
    state.provider_thread = a
    state.active.attempt = _with_pt(state.active.attempt, "pth_a")
    started = ThreadBatch(thread_id="thr_t", now=NOW + 1)
    lineage.turn_started(started, state)
    consumed = [r for r in written(started) if isinstance(r, ContextTransfer)][-1]
    assert (consumed.status, consumed.consumed_at) == ("consumed", NOW + 1)
    assert state.provider_thread.covered_run_ids == ["r1"], "not covered before the provider says the turn ended"
    # …and ends: now the provider thread has seen the delta and the run.
    ended = ThreadBatch(thread_id="thr_t", now=NOW + 2)
    lineage.turn_completed(ended, state)
    assert state.provider_thread.covered_run_ids == ["r1", "r2", "run_new"]
    assert state.provider_thread.bridges_in_a_row == 1
    closing = ThreadBatch(thread_id="thr_t", now=NOW + 3)
    lineage.attempt_closing(closing, state, "whatever")
    assert not closing.events, "a consumed transfer is not failed afterwards"


def _with_pt(attempt: RunAttempt, pt_id: str) -> RunAttempt:
    import msgspec

    return msgspec.structs.replace(attempt, provider_thread_id=pt_id)


def test_an_attempt_that_ends_before_its_turn_fails_its_transfer():
    state = active_state()
    v = view("a", history=("r1", "r2"), transfer=fork_transfer(), source_backing=pt("pth_src", covered=("r1", "r2")))
    ctx = resolve_start_context(v)
    batch = ThreadBatch(thread_id="thr_t", now=NOW)
    context = lineage.record_start(batch, state, v, ctx, None)
    assert context.transfer.status == "pending", "a native fork resolves when the provider made it"
    assert context.inherited == ("r1", "r2") and context.forked_from == "pth_src"
    closing = ThreadBatch(thread_id="thr_t", now=NOW + 1)
    lineage.attempt_closing(closing, state, "context_transfer_failed: native fork failed: boom")
    failed = [r for r in written(closing) if isinstance(r, ContextTransfer)][-1]
    assert (failed.status, failed.error) == ("failed", "context_transfer_failed: native fork failed: boom")
    assert [e.type for e in closing.events] == ["context_transfer.failed"]


def test_a_native_fork_is_resolved_when_its_provider_thread_is_made():
    state = active_state()
    state.active.context = AttemptContext(transfer=fork_transfer(), forked_from="pth_src", inherited=("r1", "r2"))
    fields = lineage.new_provider_thread_fields(state.active.context, SETTINGS, "1.2.3", forked=True)
    assert fields["covered_run_ids"] == ["r1", "r2"] and fields["forked_from"] == "pth_src"
    assert fields["settings"]["version"] == "1.2.3" and fields["settings"]["kind"] == "scripted"
    made = pt("pth_fork", covered=("r1", "r2"))
    batch = ThreadBatch(thread_id="thr_t", now=NOW)
    lineage.provider_thread_made(batch, state, made, native=True)
    transfer = state.active.context.transfer
    assert (transfer.status, transfer.resolution, transfer.target_provider_thread_id) == ("resolved_native", "native", "pth_fork")


def test_retire_marks_the_provider_thread_unusable_with_the_reason():
    a = pt("pth_a")
    state = active_state(current=a)
    batch = ThreadBatch(thread_id="thr_t", now=NOW)
    lineage.retire_provider_thread(batch, state, a, "clean_context")
    assert (state.provider_thread.status, state.provider_thread.reason) == ("unusable", "clean_context")
    assert batch.events[0].type == "provider_thread.unusable"


# -- handoff text -----------------------------------------------------------------------------


def test_a_run_section_tells_messages_answers_files_commands_and_decisions():
    run = Run(id="r1", thread_id="t", ordinal=1, status="completed", provider="codex", user_message_id="m1",
              selected_attempt_id="a1")
    messages = [
        ConversationMessage(id="m1", thread_id="t", run_id="r1", role="user", text="fix it"),
        ConversationMessage(id="m2", thread_id="t", run_id="r1", attempt_id="a1", role="assistant", text="fixed"),
        ConversationMessage(id="m0", thread_id="t", run_id="r1", attempt_id="a0", role="assistant", text="first try"),
    ]
    nodes = [
        ExecutionNode(id="n1", thread_id="t", run_id="r1", attempt_id="a1", kind="file_change", status="completed",
                      detail={"changes": [{"path": "src/a.py"}]}),
        ExecutionNode(id="n2", thread_id="t", run_id="r1", attempt_id="a1", kind="command_execution", status="completed",
                      detail={"command": "pytest", "exitCode": 1}),
        ExecutionNode(id="n3", thread_id="t", run_id="r1", attempt_id="a1", kind="approval", status="completed",
                      detail={"command": "rm -rf build", "decision": "accept"}),
        ExecutionNode(id="n4", thread_id="t", run_id="r1", attempt_id="a1", kind="reasoning", status="completed",
                      detail={"text": "protocol noise"}),
    ]
    text = run_section(run, messages, nodes, [])
    assert text.splitlines() == [
        "## Run 1 (completed; agent: codex)",
        "User: fix it",
        "Assistant: fixed",
        "Files changed: src/a.py",
        "Commands run: pytest (exit 1)",
        "Decisions: accept 'rm -rf build'",
    ]
    assert "first try" not in text, "only the selected attempt's answers"


async def test_the_handoff_cap_drops_the_oldest_runs_first_and_says_so(tmp_path, nursery):
    from agentd.actors.handoff import build_handoff
    from agentd.store.batch import WriteBatch
    from agentd.store.db import Store

    store = Store(tmp_path / "store", map_size=1 << 26, inline_commits=True)
    await nursery.start(store.writer.serve)
    batch = WriteBatch()
    batch.put(AppThread(id="t", title="t"))
    for i in range(1, 6):
        batch.put(Run(id=f"r{i}", thread_id="t", ordinal=i, status="completed", provider="a", user_message_id=f"m{i}",
                      selected_attempt_id=f"a{i}", started_at=1.0))
        batch.put(ConversationMessage(id=f"m{i}", thread_id="t", run_id=f"r{i}", role="user", text=f"question {i}"))
        batch.put(ConversationMessage(id=f"n{i}", thread_id="t", run_id=f"r{i}", attempt_id=f"a{i}", role="assistant",
                                      text=f"answer {i} " + "x" * 300))
    await store.commit(batch)
    ids = [f"r{i}" for i in range(1, 6)]

    whole = build_handoff(store, ids, strategy="portable_full", reason="r", cap=32_000)
    assert whole.dropped_run_ids == [] and whole.dropped == [] and whole.size == len(whole.text)
    assert all(f"question {i}" in whole.text for i in range(1, 6)) and whole.text.endswith("[end of handoff]")

    capped = build_handoff(store, ids, strategy="delta", reason="r", cap=1000)
    assert capped.size <= 1000 and capped.cap == 1000
    assert capped.dropped_run_ids == ["r1", "r2", "r3"], "oldest first"
    assert "question 5" in capped.text and "question 4" in capped.text and "question 1" not in capped.text
    assert capped.covered_run_ids == ids and capped.dropped == ["3 oldest run(s) left out to fit 1000 characters"]
    assert "3 earlier run(s) left out" in capped.text

    cut = build_handoff(store, ["r5"], strategy="delta", reason="r", cap=200)
    assert cut.size <= 200 and cut.dropped == ["the end of run r5 cut to fit 200 characters"]
    store.close()


async def test_a_forks_history_is_frozen_at_the_fork_even_if_the_source_rolls_back(tmp_path, nursery):
    """F6: a fork whose source is later rolled back keeps its own history —
    the run ids are frozen on its transfer; the stored runs still tell them."""
    from agentd.actors.handoff import build_handoff
    from agentd.actors.transfers import thread_history
    from agentd.store.batch import WriteBatch
    from agentd.store.db import Store

    store = Store(tmp_path / "store", map_size=1 << 26, inline_commits=True)
    await nursery.start(store.writer.serve)
    batch = WriteBatch()
    for i in (1, 2, 3):
        batch.put(Run(id=f"r{i}", thread_id="thr_s", ordinal=i, status="completed", provider="a", user_message_id=f"m{i}",
                      started_at=1.0))
        batch.put(ConversationMessage(id=f"m{i}", thread_id="thr_s", run_id=f"r{i}", role="user", text=f"word{i}"))
    batch.put(Run(id="f1", thread_id="thr_t", ordinal=1, status="completed", provider="a", started_at=1.0))
    batch.put(fork_transfer())
    await store.commit(batch)
    rollback = WriteBatch()
    rollback.put(Run(id="r2", thread_id="thr_s", ordinal=2, status="rolled_back", provider="a", user_message_id="m2",
                     started_at=1.0))
    await store.commit(rollback)
    assert thread_history(store, "thr_s") == ["r1", "r3"], "the source's own history drops its rolled-back run"
    assert thread_history(store, "thr_t") == ["r1", "r2", "f1"], "the fork keeps what it was forked with"
    text = build_handoff(store, ["r1", "r2"], strategy="portable_full", reason="fork", cap=32_000).text
    assert "word2" in text and "word3" not in text
    store.close()


async def test_a_merge_back_handoff_tells_conclusions_not_the_transcript_and_keeps_to_its_cap(tmp_path, nursery):
    """F7: per fork run only its conclusion (last answer), commands with their
    outcome, decisions, open questions and unanswered requests; the files
    footer; the oldest runs dropped first past the cap, and said so."""
    from agentd.actors.handoff import MergeFiles, build_merge_handoff
    from agentd.store.batch import WriteBatch
    from agentd.store.db import Store

    store = Store(tmp_path / "store", map_size=1 << 26, inline_commits=True)
    await nursery.start(store.writer.serve)
    batch = WriteBatch()
    batch.put(AppThread(id="f", title="fork"))
    for i in range(1, 5):
        batch.put(Run(id=f"f{i}", thread_id="f", ordinal=i, status="completed", provider="a", user_message_id=f"m{i}",
                      selected_attempt_id=f"a{i}", started_at=1.0))
        batch.put(ConversationMessage(id=f"m{i}", thread_id="f", run_id=f"f{i}", role="user", text=f"secret ask {i}"))
        batch.put(ConversationMessage(id=f"c{i}", thread_id="f", run_id=f"f{i}", attempt_id=f"a{i}", role="assistant",
                                      text=f"narration {i}"))
        batch.put(ConversationMessage(id=f"n{i}", thread_id="f", run_id=f"f{i}", attempt_id=f"a{i}", role="assistant",
                                      text=f"conclusion {i} " + "x" * 300))
    batch.put(ExecutionNode(id="t1", thread_id="f", run_id="f4", attempt_id="a4", kind="command_execution",
                            status="completed", detail={"command": "pytest", "exitCode": 2}))
    batch.put(ExecutionNode(id="t2", thread_id="f", run_id="f4", attempt_id="a4", kind="approval", status="incomplete",
                            title="rm -rf build"))
    await store.commit(batch)
    files = MergeFiles("checkpoint", ("a.py (modified, +1 −1)",), ("ckp_a", "ckp_b"), fork_workspace="/there", differ=("a.py",))
    ids = [f"f{i}" for i in range(1, 5)]
    whole = build_merge_handoff(store, ids, fork_label="fork", since="it was forked", files=files, reason="m", cap=32_000)
    text = whole.text
    assert "Conclusion: conclusion 4" in text and "narration" not in text and "secret ask" not in text
    assert "Commands and tests run: pytest (exit 2)" in text and "Unanswered requests: approval rm -rf build (incomplete)" in text
    assert "Files the fork changed (from checkpoint diff ckp_a → ckp_b): a.py (modified, +1 −1)" in text
    assert "Files that differ from this thread's workspace: a.py" in text and text.endswith("[end of handoff]")
    capped = build_merge_handoff(store, ids, fork_label="fork", since="it was forked", files=files, reason="m", cap=1000)
    dropped = len(capped.dropped_run_ids)
    assert capped.size <= 1000 == capped.cap and 0 < dropped < 4 and capped.dropped_run_ids == ids[:dropped], "oldest first"
    assert capped.dropped == [f"{dropped} oldest fork run(s) left out to fit 1000 characters"]
    assert "conclusion 4" in capped.text and "a.py" in capped.text, "the newest run and the files stay"
    store.close()
