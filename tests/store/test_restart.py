"""Restart does not resume execution (SPEC F12) and resume failure (F11),
with a real daemon process killed by SIGKILL."""

from __future__ import annotations

import pytest

from agentd.protocol.client import Client
from agentd.launch import start_daemon
from agentd.store.reconcile import BACKGROUND_NOT_OBSERVED, TOOL_NOT_RESUMED
from tests.helpers import script, send_and_wait, wait_event


async def test_sigkill_during_a_hanging_tool_gives_the_exact_f12_states(data_dir, socket_path):
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            running = await client.call(
                "thread.message.send", threadId=thread_id,
                text=script({"say": "starting the migration"}, {"tool": {"name": "migrate", "hang": True}}),
            )
            queued = await client.call("thread.message.send", threadId=thread_id, text="then deploy it")
            await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
            sub_thread = (await client.call("thread.create"))["threadId"]
            sub_run = await client.call(
                "thread.message.send", threadId=sub_thread,
                text=script({"subagent": {"steps": [{"tool": {"name": "scan", "hang": True}}]}}),
            )
            await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=sub_thread)
    finally:
        await daemon.kill()

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            run = await client.call("run.get", runId=running["runId"])
            assert (run["run"]["status"], run["run"]["reason"]) == ("interrupted", "daemon_restart")
            (tool,) = [n for n in run["nodes"] if n["kind"] == "tool"]
            assert tool["status"] == "incomplete" and tool["summary"] == TOOL_NOT_RESUMED
            root = next(n for n in run["nodes"] if n["kind"] == "root_turn")
            assert root["status"] == "interrupted"
            assert run["attempts"][0]["status"] == "interrupted"

            detail = await client.call("thread.get", threadId=thread_id)
            by_id = {m["id"]: m for m in detail["messages"]}
            assert by_id[queued["messageId"]]["status"] == "not_sent"
            assert by_id[queued["messageId"]]["text"] == "then deploy it", "nothing typed is lost"
            assistant = [m for m in detail["messages"] if m["role"] == "assistant"]
            assert [m["text"] for m in assistant] == ["starting the migration"]
            queued_run = next(r for r in detail["runs"] if r["id"] == queued["runId"])
            assert queued_run["status"] == "cancelled" and "not_sent" in queued_run["reason"]
            assert detail["thread"]["status"] == "idle"

            sub = await client.call("run.get", runId=sub_run["runId"])
            subagent = next(n for n in sub["nodes"] if n["kind"] == "subagent")
            assert subagent["status"] == "incomplete" and subagent["summary"] == BACKGROUND_NOT_OBSERVED

            status = await client.call("daemon.status")
            assert status["sessions"] == [], "nothing was restarted by itself"
            reconciled = await wait_event(client, lambda e: e["type"] == "daemon.reconciled")
            assert reconciled["payload"]["runs_interrupted"] == 2
            assert reconciled["payload"]["messages_not_sent"] == 1
            assert reconciled["payload"]["effects_retired"] == 1, "the queued run's turn start is retired, not sent"

            with pytest.raises(Exception) as info:
                await client.call("run.resume", runId=running["runId"])
            assert info.value.kind == "unsupported"

            nxt = await send_and_wait(client, thread_id, "what now?")
            assert nxt["status"] == "completed", "the thread takes a new message at once"
    finally:
        assert await daemon.terminate() == 0


async def test_resume_failure_replaces_the_provider_thread_from_app_context(data_dir, socket_path):
    """F11: native state gone → the ProviderThread is marked unusable and the
    next message runs on a replacement built from a stored ContextHandoff."""
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            first = await send_and_wait(client, thread_id, "the password is swordfish")
            old_pt = (await client.call("run.get", runId=first["id"]))["attempts"][0]["providerThreadId"]
    finally:
        assert await daemon.terminate() == 0
    native_files = list((data_dir / "providers" / "scripted" / "threads").glob("*.json"))
    assert len(native_files) == 1
    native_files[0].write_text("{ this is not json")

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            run = await send_and_wait(client, thread_id, script({"reportHistory": True}))
            assert run["status"] == "completed"
            attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
            assert attempt["providerThreadId"] != old_pt and attempt["handoffId"]
            unusable = await wait_event(client, lambda e: e["type"] == "provider_thread.unusable", thread_id=thread_id)
            assert unusable["payload"]["providerThreadId"] == old_pt and "corrupt" in unusable["payload"]["reason"]
            handoff = (await wait_event(client, lambda e: e["type"] == "context_handoff.created", thread_id=thread_id))["payload"]["handoff"]
            assert handoff["id"] == attempt["handoffId"] and handoff["strategy"] == "full_thread_summary"
            assert handoff["reason"].startswith("cannot_resume: resume failed") and "corrupt" in handoff["reason"]
            assert handoff["sourceProviderThreadId"] == old_pt
            # Stored before the new provider thread existed; the record names it once it does.
            stored = (await client.call("handoff.get", handoffId=handoff["id"]))["handoff"]
            assert stored["targetProviderThreadId"] == attempt["providerThreadId"]
            assert stored["text"] == handoff["text"]
            assert "the password is swordfish" in handoff["text"] and handoff["coveredRunCount"] == 1
            answer = (await client.call("thread.get", threadId=thread_id))["messages"][-1]["text"]
            assert answer == f"history: 0 turns + {len(handoff['text'])} chars of context", \
                "the new native thread got the stored handoff, not an empty context"
            history = [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"]]
            assert history[0] == "the password is swordfish", "history is kept"
    finally:
        assert await daemon.terminate() == 0
