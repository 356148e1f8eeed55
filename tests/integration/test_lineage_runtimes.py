"""Lineage on the real pinned runtimes, offline (SPEC F5, F6): native forks
of Codex and Claude, and a Codex → Claude → Codex provider switch, proved
with the fake model servers' request logs — what each runtime actually sent
to its model.

Skipped when a binary is not installed (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from tests.helpers import stored_events, wait_run_terminal
from tests.integration.shared import connect, requests_in, workspace_of

needs_codex = pytest.mark.skipif(codex_world.codex_binary() is None, reason=codex_world.SKIP_REASON)
needs_claude = pytest.mark.skipif(claude_world.claude_binary() is None, reason=claude_world.SKIP_REASON)


@contextlib.asynccontextmanager
async def agentd(tmp_path: Path, short_dir: Path, *worlds):
    config = tmp_path / "config.toml"
    config.write_text("[daemon]\ninterrupt_grace = 30\n\n" + "\n".join(w.provider_toml(w.kind) for w in worlds))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            yield client
    finally:
        code = await daemon.terminate()
        assert code == 0, daemon.log_text()[-4000:]


async def last_request(client: Client, world, thread_id: str) -> dict:
    """The newest model request of the thread's own runtime (its workspace
    names it: the worlds are shared with other tests, ``runtimes_daemon``)."""
    return requests_in(world.model_requests(), await workspace_of(client, thread_id))[-1]


async def send_and_wait(client: Client, thread_id: str, text: str, **params) -> dict:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text, **params)
    return await wait_run_terminal(client, thread_id, sent["runId"], timeout=120)


async def three_runs(client: Client, provider: str) -> tuple[str, list[dict]]:
    thread_id = (await client.call("thread.create", provider=provider))["threadId"]
    runs = [await send_and_wait(client, thread_id, text) for text in ("one alpha", "two bravo", "three charlie")]
    assert [r["status"] for r in runs] == ["completed"] * 3, runs
    return thread_id, runs


async def fork_and_send(client: Client, source: str, run_id: str, text: str) -> tuple[str, dict]:
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": run_id})
    run = await send_and_wait(client, forked["threadId"], text)
    assert run["status"] == "completed", run
    (transfer,) = (await client.call("thread.transfers", threadId=forked["threadId"]))["transfers"]
    return forked["threadId"], transfer


@needs_codex
async def test_codex_native_fork_at_run_2_of_3(runtimes_daemon):
    """Codex ``thread/fork`` with ``lastTurnId`` = run 2's turn: the fork's
    first model request carries turns 1–2 and not turn 3."""
    codex = runtimes_daemon.worlds["codex"]
    async with connect(runtimes_daemon) as client:
        source, runs = await three_runs(client, "codex")
        fork, transfer = await fork_and_send(client, source, runs[1]["id"], "fork hello")
        assert (transfer["status"], transfer["resolution"]) == ("consumed", "native")
        assert transfer["sourcePoint"]["nativeTurnRef"], "the source turn's codex id"
        last = codex_world.user_texts(await last_request(client, codex, fork))
        assert last == ["one alpha", "two bravo", "fork hello"], last
        # The source is unchanged: its next request still has all three turns.
        await send_and_wait(client, source, "four delta")
        assert codex_world.user_texts(await last_request(client, codex, source)) == ["one alpha", "two bravo", "three charlie", "four delta"]


@needs_claude
async def test_claude_native_fork_at_run_2_of_3(runtimes_daemon):
    """Claude ``--resume --resume-session-at <run 2's last message> --fork-session``:
    the fork's model request carries turns 1–2 and not turn 3; the source
    session is unchanged."""
    claude = runtimes_daemon.worlds["claude"]
    async with connect(runtimes_daemon) as client:
        source, runs = await three_runs(client, "claude")
        (created,) = [e for e in await stored_events(client, source) if e["type"] == "provider_thread.created"]
        assert created["payload"]["providerThread"]["settings"]["version"] == "2.1.332", "frozen with the binary's version"
        fork, transfer = await fork_and_send(client, source, runs[1]["id"], "fork hello")
        assert (transfer["status"], transfer["resolution"]) == ("consumed", "native")
        ref = transfer["sourcePoint"]["nativeTurnRef"]
        assert ref and not ref.startswith("turn_"), "a Claude message uuid, not agentd's turn id"
        last = claude_world.user_texts(await last_request(client, claude, fork))
        assert last == ["one alpha", "two bravo", "fork hello"], last
        await send_and_wait(client, source, "four delta")
        assert claude_world.user_texts(await last_request(client, claude, source)) == ["one alpha", "two bravo", "three charlie", "four delta"]


@needs_codex
@needs_claude
async def test_codex_to_claude_to_codex_carries_the_stored_handoffs_exactly(runtimes_daemon):
    """F5: Claude's first request carries the stored portable handoff, then
    the message; back on Codex the same Codex thread continues, and its
    request carries its own turn natively plus the stored delta (Claude's run)."""
    codex, claude = runtimes_daemon.worlds["codex"], runtimes_daemon.worlds["claude"]
    async with connect(runtimes_daemon) as client:
        thread_id = (await client.call("thread.create", provider="codex"))["threadId"]
        first = await send_and_wait(client, thread_id, "one alpha")
        middle = await send_and_wait(client, thread_id, "two bravo", provider="claude")
        back = await send_and_wait(client, thread_id, "three charlie", provider="codex")
        assert [r["status"] for r in (first, middle, back)] == ["completed"] * 3

        async def handoff_of(run: dict) -> dict:
            attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
            return (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]

        portable = await handoff_of(middle)
        assert portable["strategy"] == "portable_full" and portable["coveredRunIds"] == [first["id"]]
        assert claude_world.user_texts(await last_request(client, claude, thread_id)) == [portable["text"], "two bravo"]

        delta = await handoff_of(back)
        assert delta["strategy"] == "delta" and delta["coveredRunIds"] == [middle["id"]]
        assert "two bravo" in delta["text"] and "one alpha" not in delta["text"]
        # One user message of two parts (the fake joins parts with a newline): the delta, then the text.
        texts = codex_world.user_texts(await last_request(client, codex, thread_id))
        assert texts == ["one alpha", delta["text"] + "\nthree charlie"], "codex's own turn natively, then the stored delta"
        attempts = [(await client.call("run.get", runId=r["id"]))["attempts"][0]["providerThreadId"] for r in (first, back)]
        assert attempts[0] == attempts[1]
