"""The ACP adapter against a second real ACP agent, offline: Codex through the
pinned ``@zed-industries/codex-acp`` (issue 25) — not Claude, and driven by
the project's fake OpenAI Responses server as it is (see
``tests/integration/acp_worlds.py`` for why this one).

The scenarios of ``tests/providers/test_acp_replay.py`` (``codex``) run
against the real agent, each exchange recorded, sanitized and replayed at
once (saved to ``tests/fixtures/transcripts/`` with ``AGENTD_RECORD_ACP=1``):
a text turn, a command's permission as an approval, an interrupt, and
``session/load`` in a new process with the earlier turn in the model's request.
"""

from __future__ import annotations

import os
import shutil

import pytest
import trio

from agentd.actors.providers.acp import AcpAdapter
from agentd.actors.providers.transport import recording
from scripts.offline.codex import user_texts
from tests.integration.acp_worlds import CODEX_ACP_VERSION, SKIP_REASON, CodexAcpWorld, codex_acp_available, sanitize
from tests.providers.test_acp_replay import SCENARIOS, TRANSCRIPTS, run_replay, transcript_paths
from tests.providers.test_claude_replay import Harness

pytestmark = pytest.mark.skipif(not codex_acp_available(), reason=SKIP_REASON)

RECORD = os.environ.get("AGENTD_RECORD_ACP") == "1"


@pytest.mark.parametrize("name", sorted(SCENARIOS["codex"]))
async def test_scenario_against_real_codex_acp(name, tmp_path):
    cwd = tmp_path / "ws"
    cwd.mkdir()
    world = CodexAcpWorld(tmp_path / "codex", cwd)
    raw = tmp_path / "recorded"
    header = {"provider": "acp", "agent": "@zed-industries/codex-acp", "version": CODEX_ACP_VERSION,
              "note": f"scenario {name} (tests/providers/test_acp_replay.py)"}
    try:
        async with trio.open_nursery() as nursery:
            adapter = AcpAdapter(world.provider_config(), home=tmp_path / "agentd-home", request_timeout=60,
                                 spawn=recording(raw / f"acp_codex_{name}.ndjson", header))
            facts = await SCENARIOS["codex"][name](Harness(nursery, adapter, live=True), str(cwd))
            nursery.cancel_scope.cancel()
        if "file" in facts:
            assert (cwd / facts["file"]).exists(), "the agent really did it in the workspace"
        if name == "resume":
            assert any("remember pineapple" in texts and texts[-1] == "which fruit?"
                       for texts in map(user_texts, world.model_requests())), "session/resume carried the earlier turn"
    finally:
        world.close()

    sanitized = tmp_path / "sanitized"
    for path in transcript_paths("codex", name, raw):
        sanitize(path, sanitized / path.name, [tmp_path])
    await run_replay("codex", name, tmp_path / "replay", directory=sanitized)
    if RECORD:
        for old in transcript_paths("codex", name):
            old.unlink(missing_ok=True)
        for path in sanitized.iterdir():
            shutil.copy(path, TRANSCRIPTS / path.name)
