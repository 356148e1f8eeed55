"""Offline worlds for the real Codex and Claude runtimes.

A fake model server (``fake_openai.py``, ``fake_anthropic.py``: standard
library only, run as files), private homes, dead-end proxies and, where
``unshare -rn`` works, a loopback-only network namespace per runtime process
(``world.py``; ``codex.py`` and ``claude.py`` per runtime). Nothing a runtime
does in one can reach the network.

Shared by the integration tests (``tests/integration/``) and the provider
benchmarks (``scripts/bench_providers*.py``); it lives here, not under
``tests/``, because scripts import no test module.
"""
