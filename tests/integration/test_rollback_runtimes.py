"""``rollback.toRun`` on the real pinned runtimes, offline (SPEC F14): Codex
reverts its own thread natively; Claude, which cannot rewind a session, gets
a rebuilt provider thread whose first request carries the stored summary of
the kept runs. Proved with the fake model servers' request logs — what each
runtime actually sent to its model after the rollback.

Skipped when a binary is not installed (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from tests.integration.shared import connect
from tests.integration.test_lineage_runtimes import last_request, needs_claude, needs_codex, send_and_wait, three_runs


@needs_codex
async def test_codex_rollback_to_run_1_reverts_its_thread_natively(runtimes_daemon):
    codex = runtimes_daemon.worlds["codex"]
    async with connect(runtimes_daemon) as client:
        thread_id, runs = await three_runs(client, "codex")
        answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
        assert answer["providerRollback"] == "native", answer
        assert answer["rolledBackRunIds"] == [runs[1]["id"], runs[2]["id"]]
        run = await send_and_wait(client, thread_id, "four delta")
        assert run["status"] == "completed", (run["reason"], run)
        # The same Codex thread continues, holding run 1's turn only.
        texts = codex_world.user_texts(await last_request(client, codex, thread_id))
        assert texts == ["one alpha", "four delta"], texts
        attempts = [(await client.call("run.get", runId=r["id"]))["attempts"][-1]["providerThreadId"] for r in (runs[0], run)]
        assert attempts[0] == attempts[1]


@needs_claude
async def test_claude_rollback_to_run_1_rebuilds_its_provider_thread_from_a_stored_handoff(runtimes_daemon):
    claude = runtimes_daemon.worlds["claude"]
    async with connect(runtimes_daemon) as client:
        thread_id, runs = await three_runs(client, "claude")
        answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
        assert answer["providerRollback"] == "rebuilt", answer
        assert len(answer["retiredProviderThreadIds"]) == 1
        run = await send_and_wait(client, thread_id, "four delta")
        assert run["status"] == "completed", (run["reason"], run)
        attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
        handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
        assert handoff["strategy"] == "full_thread_summary" and handoff["coveredRunIds"] == [runs[0]["id"]]
        assert attempt["providerThreadId"] not in answer["retiredProviderThreadIds"]
        texts = claude_world.user_texts(await last_request(client, claude, thread_id))
        assert texts == [handoff["text"], "four delta"], texts
        assert "one alpha" in handoff["text"]
        assert not any("two bravo" in t or "three charlie" in t for t in texts)
