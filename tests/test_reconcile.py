"""Startup reconciliation closes everything a restart left open, every thread's (F12)."""

from __future__ import annotations

import pytest

from agentd.store.batch import WriteBatch
from agentd.store.db import Store
from agentd.store.records import AppThread, ConversationMessage, ProviderSession, Run
from agentd.store.reconcile import plan_reconciliation


@pytest.fixture
async def store(tmp_path, nursery):
    s = Store(tmp_path / "store", inline_commits=True, map_size=1 << 26)
    await nursery.start(s.writer.serve)
    yield s
    s.close()


async def test_an_answer_cut_off_mid_stream_does_not_narrow_reconciliation_to_its_thread(store):
    batch = WriteBatch()
    batch.put(AppThread(id="thr_a", status="running", active_run_id="run_a"))
    batch.put(Run(id="run_a", thread_id="thr_a", ordinal=1, status="running"))
    batch.put(ConversationMessage(id="msg_a", thread_id="thr_a", run_id="run_a", role="assistant", text="hal",
                                  status="streaming"))
    batch.put(AppThread(id="thr_b"))
    batch.put(ProviderSession(id="ses_b", provider="scripted", kind="scripted", thread_id="thr_b", status="ready"))
    await store.commit(batch)

    planned, report = plan_reconciliation(store, 1.0)

    assert report.runs_interrupted == ["run_a"]
    assert report.sessions_stopped == ["ses_b"], "another thread's session is closed too"
    assert [e.type for e in planned.events] == [
        "run.interrupted", "message.completed", "session.stopped", "daemon.reconciled"]
