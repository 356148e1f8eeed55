"""The first message's baseline and its provider session start at once
(SPEC F13, issue 24 §2): the session's start never cuts the baseline short,
and the turn can only start once both are done."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from agentd.actors import starter
from agentd.actors.providers.base import ProviderRuntimeError


def _actor(ensure_session):
    return SimpleNamespace(thread_id="thr_beside", sessions=SimpleNamespace(ensure_session=ensure_session))


def _active():
    return SimpleNamespace(run=SimpleNamespace(provider="scripted"), session_id=None)


async def test_the_session_starts_while_the_baseline_is_captured(monkeypatch):
    order: list[str] = []
    session_started = trio.Event()

    async def baseline(actor, active):
        order.append("baseline started")
        await session_started.wait()  # the session starts meanwhile, not after
        order.append("baseline recorded")

    async def ensure_session(thread_id, provider):
        order.append(f"session for {thread_id} on {provider}")
        session_started.set()
        return "ses_1", "connection"

    monkeypatch.setattr(starter, "ensure_baseline", baseline)
    active = _active()
    with trio.fail_after(30):  # (a baseline that waited for the session before starting it would hang)
        found = await starter._session_beside_baseline(_actor(ensure_session), active)
    assert found == ("ses_1", "connection") and active.session_id == "ses_1"
    assert order == ["baseline started", "session for thr_beside on scripted", "baseline recorded"]


async def test_a_session_that_fails_to_start_is_raised_after_the_baseline_is_recorded(monkeypatch):
    order: list[str] = []
    failed = trio.Event()

    async def baseline(actor, active):
        order.append("baseline started")
        await failed.wait()
        order.append("baseline recorded")

    async def ensure_session(thread_id, provider):
        order.append("session failed")
        failed.set()
        raise ProviderRuntimeError("the runtime could not start")

    monkeypatch.setattr(starter, "ensure_baseline", baseline)
    active = _active()
    with pytest.raises(ProviderRuntimeError, match="could not start"):
        await starter._session_beside_baseline(_actor(ensure_session), active)
    assert order == ["baseline started", "session failed", "baseline recorded"]
    assert active.session_id is None
