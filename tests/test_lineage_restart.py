"""Lineage across daemon restarts (SPEC F6, F12; F4 "frozen context"):
a transfer is pending or failed after a SIGKILL — never half-consumed — and
the next message resolves it; a thread's recorded provider settings are not
overwritten by a later config, and an incompatible change is explicit in the
graph."""

from __future__ import annotations

from pathlib import Path

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from tests.helpers import script, send_and_wait, wait_event
from tests.test_lineage import recall, say, transfers


async def _daemon(tmp_path: Path, short_dir: Path, config: str):
    path = tmp_path / "config.toml"
    path.write_text(config)
    return await start_daemon(tmp_path / "data", short_dir / "s.sock", config=path)


async def test_sigkill_between_a_fork_and_its_first_message_leaves_it_pending(tmp_path, short_dir):
    daemon = await _daemon(tmp_path, short_dir, "")
    try:
        async with Client.connect(daemon.socket) as client:
            source = (await client.call("thread.create"))["threadId"]
            await send_and_wait(client, source, say("alpha"))
            forked = await client.call("thread.fork", threadId=source)
    finally:
        await daemon.kill()
    daemon = await _daemon(tmp_path, short_dir, "")
    try:
        async with Client.connect(daemon.socket) as client:
            (transfer,) = await transfers(client, forked["threadId"])
            assert transfer["status"] == "pending"
            assert await recall(client, forked["threadId"], "alpha") == {"alpha": "native"}
            (transfer,) = await transfers(client, forked["threadId"])
            assert (transfer["status"], transfer["resolution"]) == ("consumed", "native")
    finally:
        assert await daemon.terminate() == 0


STUCK = """
[providers.stuck]
kind = "codex"
binary = "{binary}"
"""


async def test_sigkill_during_a_handoffs_resolution_fails_the_transfer_and_the_next_message_resolves_it(tmp_path, short_dir):
    """The fork's first message goes to a runtime that never answers: the
    transfer is resolved (its handoff stored) but no turn took it in when the
    daemon is killed. After the restart it is ``failed`` (not consumed), and
    the next message resolves it again."""
    stuck = tmp_path / "stuck-runtime"
    stuck.write_text("#!/bin/sh\nexec sleep 3600\n")
    stuck.chmod(0o755)
    config = STUCK.format(binary=stuck)
    daemon = await _daemon(tmp_path, short_dir, config)
    try:
        async with Client.connect(daemon.socket) as client:
            source = (await client.call("thread.create"))["threadId"]
            await send_and_wait(client, source, say("alpha"))
            forked = await client.call("thread.fork", threadId=source)
            sent = await client.call("thread.message.send", threadId=forked["threadId"], text="hello", provider="stuck")
            resolved = await wait_event(client, lambda e: e["type"] == "context_transfer.resolved", thread_id=forked["threadId"])
            assert resolved["payload"]["transfer"]["status"] == "resolved_portable"
    finally:
        await daemon.kill()
    daemon = await _daemon(tmp_path, short_dir, config)
    try:
        async with Client.connect(daemon.socket) as client:
            (transfer,) = await transfers(client, forked["threadId"])
            assert transfer["status"] == "failed" and transfer["error"].startswith("daemon_restart")
            assert transfer["consumedAt"] is None
            reconciled = await wait_event(client, lambda e: e["type"] == "daemon.reconciled")
            assert reconciled["payload"]["transfers_failed"] == 1
            detail = await client.call("thread.get", threadId=forked["threadId"])
            assert [m["status"] for m in detail["messages"]] == ["not_sent"]
            assert [r["id"] for r in detail["runs"]] == [sent["runId"]]
            assert await recall(client, forked["threadId"], "alpha", provider="scripted") == {"alpha": "context"}
            (transfer,) = await transfers(client, forked["threadId"])
            assert (transfer["status"], transfer["resolution"], transfer["targetProvider"]) == ("consumed", "portable", "scripted")
    finally:
        assert await daemon.terminate() == 0


FROZEN = """
[providers.basic]
kind = "scripted"
model = "{model}"
idle_timeout = {idle}
"""


async def test_frozen_settings_an_incompatible_change_is_a_fresh_provider_thread_with_the_reason(tmp_path, short_dir):
    """F4: the settings a thread's provider thread was made under are
    recorded; a later config changing the model gives the next run a fresh
    provider thread with a full_thread_summary (settings_changed), while a
    compatible change (the idle timeout) just applies."""
    daemon = await _daemon(tmp_path, short_dir, FROZEN.format(model="m1", idle=60))
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", provider="basic"))["threadId"]
            first = await send_and_wait(client, thread_id, say("alpha"))
            pt_id = (await client.call("run.get", runId=first["id"]))["attempts"][0]["providerThreadId"]
            created = await wait_event(client, lambda e: e["type"] == "provider_thread.created", thread_id=thread_id)
            settings = created["payload"]["providerThread"]["settings"]
            assert (settings["kind"], settings["model"], settings["version"]) == ("scripted", "m1", "1")
    finally:
        assert await daemon.terminate() == 0

    daemon = await _daemon(tmp_path, short_dir, FROZEN.format(model="m2", idle=60))
    try:
        async with Client.connect(daemon.socket) as client:
            assert await recall(client, thread_id, "alpha") == {"alpha": "context"}
            run = (await client.call("thread.get", threadId=thread_id))["runs"][-1]
            attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
            assert attempt["providerThreadId"] != pt_id
            handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
            assert handoff["strategy"] == "full_thread_summary"
            assert handoff["reason"] == "settings_changed: model 'm1' → 'm2'"
            unusable = await wait_event(client, lambda e: e["type"] == "provider_thread.unusable", thread_id=thread_id)
            assert unusable["payload"] == {"providerThreadId": pt_id, "reason": handoff["reason"]}
            new_pt = attempt["providerThreadId"]
    finally:
        assert await daemon.terminate() == 0

    daemon = await _daemon(tmp_path, short_dir, FROZEN.format(model="m2", idle=30))
    try:
        async with Client.connect(daemon.socket) as client:
            last = await send_and_wait(client, thread_id, script({"reportHistory": True}))
            attempt = (await client.call("run.get", runId=last["id"]))["attempts"][0]
            assert attempt["providerThreadId"] == new_pt and attempt["handoffId"] is None, "a compatible change applies"
    finally:
        assert await daemon.terminate() == 0


async def test_repeated_bridges_and_runs_behind_fall_back_to_a_summary(tmp_path, short_dir):
    """F5: a provider thread bridged handoff_max_bridges times in a row, or
    more than handoff_max_runs_behind runs behind, is replaced, explicitly."""
    config = "[daemon]\nhandoff_max_bridges = 1\nhandoff_max_runs_behind = 1\n[providers.basic]\nkind = \"scripted\"\n"
    daemon = await _daemon(tmp_path, short_dir, config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            for provider, word in [("scripted", "alpha"), ("basic", "bravo"), ("scripted", "charlie"), ("basic", "delta")]:
                await send_and_wait(client, thread_id, say(word), provider=provider)
            # scripted was bridged once (charlie's run): a second bridge is one too many.
            run = await send_and_wait(client, thread_id, say("echo"), provider="scripted")
            attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
            handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
            assert handoff["strategy"] == "full_thread_summary"
            assert handoff["reason"] == "stale_context: bridged 1 times in a row (limit 1)"
            # On another thread basic is given the thread once (no bridge), then misses two runs (limit 1).
            other = (await client.call("thread.create"))["threadId"]
            for provider, word in [("scripted", "alpha"), ("basic", "bravo"), ("scripted", "charlie"), ("scripted", "delta")]:
                await send_and_wait(client, other, say(word), provider=provider)
            run = await send_and_wait(client, other, say("echo"), provider="basic")
            attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
            handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
            assert handoff["reason"] == "too_far_behind: 2 runs behind (limit 1)"
            assert len(handoff["coveredRunIds"]) == 4, "the whole thread, not a delta"
    finally:
        assert await daemon.terminate() == 0


async def test_frozen_settings_a_new_major_runtime_version_is_a_fresh_provider_thread(tmp_path, short_dir):
    """F4: the runtime's version is frozen with the provider thread; a
    runtime of another major version does not silently continue it (a minor
    upgrade does). The scripted agent reports the version in its home's
    ``version`` file, standing in for an upgraded binary."""
    config = "[providers.basic]\nkind = \"scripted\"\n"
    version_file = tmp_path / "data" / "providers" / "basic" / "version"
    daemon = await _daemon(tmp_path, short_dir, config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", provider="basic"))["threadId"]
            first = await send_and_wait(client, thread_id, say("alpha"))
            pt_id = (await client.call("run.get", runId=first["id"]))["attempts"][0]["providerThreadId"]
    finally:
        assert await daemon.terminate() == 0

    for version, fresh in [("1.4", False), ("2.0.0", True)]:
        version_file.write_text(version)
        daemon = await _daemon(tmp_path, short_dir, config)
        try:
            async with Client.connect(daemon.socket) as client:
                seen = await recall(client, thread_id, "alpha")
                run = (await client.call("thread.get", threadId=thread_id))["runs"][-1]
                attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
                if not fresh:
                    assert seen == {"alpha": "native"} and attempt["providerThreadId"] == pt_id, version
                    continue
                assert seen == {"alpha": "context"} and attempt["providerThreadId"] != pt_id
                handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
                assert handoff["strategy"] == "full_thread_summary"
                assert handoff["reason"] == "settings_changed: runtime version 1 → 2.0.0"
        finally:
            assert await daemon.terminate() == 0
