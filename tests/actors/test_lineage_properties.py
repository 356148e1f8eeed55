"""The audit invariant of lineage (SPEC F5, F6, F8), over random sequences
of sends, forks and provider switches.

Hypothesis generates a sequence of operations on a few threads — a send
(on the thread's provider, or switching to ``scripted`` / ``basic``, now and
then with ``cleanContext``), a fork (from the latest stable point or from one
of the thread's runs), a merge-back of a fork into its source (SPEC F7: the
source then holds the fork's new words too) — against a real daemon whose agents are scripted-agent
processes: ``scripted`` forks natively, ``basic`` (its own native store)
cannot. Every send says a word no other send says. A model of the test keeps
each thread's conversation as the list of words it must hold.

Afterwards the durable record is audited against the agents' own native
files: every provider turn's input is explained by its provider thread's
native history plus stored handoffs —

1. each native turn of each agent belongs to a provider turn agentd recorded
   (a native fork copies its source's turns, and their ids);
2. an attempt's native turn has exactly the run's message as input and exactly
   its stored handoff's text as context (none when it has no handoff);
3. what the agent could see at that turn — its native history before it
   (inputs, outputs, contexts) plus the turn's context — holds every word of
   the thread's conversation before the run (nothing lost) and no other word
   (nothing leaked from a later run, the source after a fork, or a fork).

Reproduce a failure with the ``@reproduce_failure`` line Hypothesis prints.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.store.db import Store
from agentd.store.records import ContextHandoff, ConversationMessage, ProviderThread, RunAttempt
from tests.helpers import script, send_and_wait

CONFIG = """
[providers.basic]
kind = "scripted"
capabilities = { nativeFork = false }
"""
WORD = re.compile(r"WORD\d+X")
EXAMPLES = int(os.environ.get("AGENTD_LINEAGE_EXAMPLES", "8"))


@dataclass(frozen=True)
class Send:
    thread: int
    provider: str | None  # None: the thread's current provider; "other": switch to the other one
    clean: bool = False


@dataclass(frozen=True)
class Fork:
    thread: int
    run: int | None  # None: latest_stable; else an index into the thread's own runs
    side: bool = False


@dataclass(frozen=True)
class Merge:
    """A send on a fork's source thread that merges the fork back (SPEC F7);
    a no-op unless ``thread`` names a fork with runs not merged yet."""

    thread: int
    provider: str | None = None


sends = st.builds(Send, st.integers(0, 3), st.sampled_from([None, "other", "other", "scripted", "basic"]),
                  st.sampled_from([False] * 9 + [True]))
ops = st.one_of(sends, sends, st.builds(Fork, st.integers(0, 3), st.one_of(st.none(), st.integers(0, 5)), st.booleans()),
                st.builds(Merge, st.integers(1, 4), st.sampled_from([None, None, "other"])))
sequences = st.builds(lambda first, rest: [first, *rest], st.builds(Send, st.just(0), st.just(None)),
                      st.lists(ops, min_size=4, max_size=10))


@dataclass
class ModelThread:
    id: str
    #: the conversation's words, inherited first
    words: list[str] = field(default_factory=list)
    inherited: int = 0
    #: own runs, in order: (run id, word)
    runs: list[tuple[str, str]] = field(default_factory=list)
    #: the provider its last run went to
    provider: str = "scripted"
    #: a fork's source (an index into Model.threads), and how many of its own runs were merged back
    parent: int | None = None
    merged: int = 0


@dataclass
class Model:
    threads: list[ModelThread] = field(default_factory=list)
    counter: int = 0
    #: run id -> the words the thread held before that run
    before: dict[str, list[str]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    merges: int = 0


async def apply(client: Client, model: Model, op: Send | Fork | Merge) -> None:
    thread = model.threads[op.thread % len(model.threads)]
    if isinstance(op, Merge):
        if thread.parent is None or len(thread.runs) == thread.merged:
            return
        parent = model.threads[thread.parent]
        brought = [word for _run, word in thread.runs[thread.merged:]]
        model.counter += 1
        word = f"WORD{model.counter}X"
        params: dict[str, Any] = {"mergeBack": {"forkThreadId": thread.id}}
        if op.provider == "other":
            params["provider"] = parent.provider = "basic" if parent.provider == "scripted" else "scripted"
        run = await send_and_wait(client, parent.id, script({"say": f"the word is {word}"}), **params)
        model.merges += 1
        model.trace.append(f"merge {thread.id[-6:]} into {parent.id[-6:]} {op.provider} bringing {brought} -> {word} {run['status']}")
        assert run["status"] == "completed", (run, model.trace)
        # What the run was given: the parent's conversation and the fork's new conclusions.
        model.before[run["id"]] = [*parent.words, *brought]
        parent.runs.append((run["id"], word))
        parent.words += [*brought, word]
        thread.merged = len(thread.runs)
        return
    if isinstance(op, Send):
        model.counter += 1
        word = f"WORD{model.counter}X"
        params: dict[str, Any] = {}
        if op.provider is not None:
            provider = op.provider
            if provider == "other":
                provider = "basic" if thread.provider == "scripted" else "scripted"
            params["provider"] = thread.provider = provider
        if op.clean:
            params["cleanContext"] = True
        run = await send_and_wait(client, thread.id, script({"say": f"the word is {word}"}), **params)
        model.trace.append(f"send {thread.id[-6:]} {op.provider} clean={op.clean} -> {word} {run['status']} {run.get('reason')}")
        assert run["status"] == "completed", (run, model.trace)
        model.before[run["id"]] = list(thread.words)
        thread.runs.append((run["id"], word))
        thread.words.append(word)
        return
    params = {"threadId": thread.id, "sideChat": op.side}
    if op.run is not None and thread.runs:
        index = op.run % len(thread.runs)
        params["sourcePoint"] = {"type": "run", "runId": thread.runs[index][0]}
        run_id, word = thread.runs[index]
        words = [*model.before[run_id], word]  # what the thread held after that run (merged words too)
    else:
        words = list(thread.words)
    forked = await client.call("thread.fork", **params)
    model.trace.append(f"fork {thread.id[-6:]} at {op.run} -> {forked['threadId'][-6:]} holding {words}")
    source_provider = thread.provider
    if op.run is not None and thread.runs:
        run = await client.call("run.get", runId=params["sourcePoint"]["runId"])
        source_provider = run["run"]["provider"]
    model.threads.append(ModelThread(id=forked["threadId"], words=list(words), inherited=len(words), provider=source_provider,
                                     parent=model.threads.index(thread)))


def audit(data_dir: Path, model: Model) -> None:
    """The invariant, on the stopped daemon's store and the agents' native files."""
    store = Store(data_dir / "store", map_size=1 << 30)
    try:
        native_files: dict[str, dict] = {}
        for path in (data_dir / "providers").glob("*/threads/*.json"):
            native_files[path.stem] = msgspec.json.decode(path.read_bytes())
        recorded_turns: set[str] = set()
        for thread in model.threads:
            for run in store.thread_runs(thread.id):
                for attempt in store.run_attempts(run.id):
                    recorded_turns.update(t.native_turn_id for t in store.attempt_turns(attempt.id) if t.native_turn_id)
        for native_id, native in native_files.items():
            for turn in native["turns"]:
                assert turn["turnId"] in recorded_turns, f"native turn {turn['turnId']} of {native_id} was never a provider turn of agentd"

        for thread in model.threads:
            for run_id, word in thread.runs:
                run = store.run(run_id)
                attempt = store.get(RunAttempt, run.selected_attempt_id)
                pt = store.get(ProviderThread, attempt.provider_thread_id)
                (provider_turn,) = store.attempt_turns(attempt.id)
                native = native_files[pt.native_thread_id]
                index = next(i for i, t in enumerate(native["turns"]) if t["turnId"] == provider_turn.native_turn_id)
                turn = native["turns"][index]
                message = store.get(ConversationMessage, run.user_message_id)
                assert turn["input"] == message.text
                merges = [store.get(ContextHandoff, t.handoff_id) for t in store.thread_transfers(thread.id)
                          if t.type == "merge_back" and t.run_id == run_id and t.status == "consumed"]
                handoffs = [store.get(ContextHandoff, attempt.handoff_id)] if attempt.handoff_id else []
                handoffs += [h for h in merges if h.id != attempt.handoff_id]
                assert turn.get("context", "") == "\n\n".join(h.text for h in handoffs), (
                    f"run {run_id}: context is not the stored handoffs")
                earlier = native["turns"][:index]
                seen = " ".join(t[k] for t in earlier for k in ("input", "output", "context") if t.get(k)) + " " + turn.get("context", "")
                visible = set(WORD.findall(seen))
                expected = set(model.before[run_id])
                assert expected <= visible, f"run {run_id} ({word}) lost {sorted(expected - visible)}\n" + "\n".join(model.trace)
                assert visible <= expected, f"run {run_id} ({word}) leaked {sorted(visible - expected)}\n" + "\n".join(model.trace)
            for transfer in store.thread_transfers(thread.id):
                assert transfer.status in ("pending", "consumed"), transfer
                if transfer.handoff_id:
                    assert store.get(ContextHandoff, transfer.handoff_id).transfer_id == transfer.id
    finally:
        store.close()


async def scenario(sequence: list[Send | Fork], root: Path) -> None:
    config = root / "config.toml"
    config.write_text(CONFIG)
    daemon = await start_daemon(root / "data", root / "s.sock", config=config)
    model = Model()
    try:
        async with Client.connect(daemon.socket) as client:
            model.threads.append(ModelThread(id=(await client.call("thread.create"))["threadId"]))
            for op in sequence:
                await apply(client, model, op)
    finally:
        code = await daemon.terminate()
    assert code == 0, daemon.log_text()[-4000:]
    audit(root / "data", model)
    if sequence is MERGES:
        assert model.merges == 2, model.trace


#: always run: merges after a fork worked on, then forks and switches of the merged thread
MERGES = [Send(0, None), Fork(0, None), Send(1, None), Send(1, "basic"), Merge(1), Send(1, None), Merge(1, "other"),
          Fork(0, None), Send(2, "scripted"), Fork(0, 1), Send(3, None, clean=True)]


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(MERGES)
@given(sequences)
def test_every_provider_turn_is_explained_by_native_history_plus_stored_handoffs(sequence):
    root = Path(tempfile.mkdtemp(prefix="ad-lp-"))
    try:
        trio.run(scenario, sequence, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
