"""One daemon and one fake-model world per test module, for the real-runtime
tests that need only threads of their own (issue 28 item 13).

Starting and stopping a daemon is 1–2 s of this loaded 2-core machine, paid
per test before; a module's tests now share one (``daemon_for_module``:
started before the module's first test, its clean exit checked after the
last). What keeps them independent of one another:

* each test works in threads (and so workspaces and runtime sessions) of its
  own, and reads the daemon's state only for those: :func:`sessions_of`
  instead of every session, :func:`requests_in` for the model requests of
  its own threads (a runtime's requests name its working directory, the
  thread's own workspace), never "the last request of the world";
* the fake model answers by the text it is sent, so a test's script is in
  its messages; the runtime processes of earlier tests are left idle, and
  ``[daemon] max_sessions`` (:data:`MAX_SESSIONS`) stops the longest idle of
  them when a new one needs the room, so a module never keeps more than a
  few runtimes alive;
* a test that stops, kills or restarts the daemon, or needs a config of
  its own, still starts its own.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from agentd.launch import DaemonProcess, start_daemon
from agentd.protocol.client import Client
from tests.helpers import daemon_for_module

#: runtime sessions a shared daemon keeps at once: a test of these modules
#: has at most two at work (a parent and its task); the idle ones of earlier
#: tests give way, longest idle first. A trade-off, measured on test_claude
#: (quiet machine): with 2 each new session waits for an old one's stop
#: (42 s, as with a daemon per test), with 16 up to ten idle claudes stay
#: (about 2 % of a core each), with 4 the file takes 37-38 s. A test that
#: needed more at once would fail loudly (``max_sessions``), never flakily.
MAX_SESSIONS = 4


@dataclass
class SharedDaemon:
    """A module's daemon and the worlds its providers talk to."""

    process: DaemonProcess
    worlds: dict[str, Any]

    @property
    def world(self) -> Any:
        """The one world of a single-runtime module."""
        (only,) = self.worlds.values()
        return only


@contextlib.contextmanager
def module_daemon(paths: tuple[Path, Path], providers: str, *, daemon: str = "", **worlds: Any) -> Iterator[SharedDaemon]:
    """Start a daemon on ``paths`` (``module_paths``: data dir, socket) with
    the ``providers`` tables and ``daemon`` lines of ``[daemon]`` (and
    :data:`MAX_SESSIONS`), for a sync module-scoped fixture; stop it after
    the module, expecting exit 0."""
    data_dir, socket = paths
    config = data_dir.parent / "config.toml"
    config.write_text(f"[daemon]\nmax_sessions = {MAX_SESSIONS}\n{daemon}\n\n{providers}")
    with daemon_for_module(start_daemon, data_dir, socket, config=config) as process:
        yield SharedDaemon(process, worlds)


@contextlib.asynccontextmanager
async def connect(shared: SharedDaemon) -> AsyncIterator[Client]:
    """A client of the module's daemon (``client.daemon`` is its process)."""
    async with Client.connect(shared.process.socket) as client:
        client.daemon = shared.process
        yield client


async def workspace_of(client: Client, thread_id: str) -> str:
    return (await client.call("thread.get", threadId=thread_id))["thread"]["workspace"]


def requests_in(requests: list[dict[str, Any]], workspace: str) -> list[dict[str, Any]]:
    """The model requests (bodies) of the runtime working in ``workspace``, oldest first."""
    return [body for body in requests if workspace in json.dumps(body)]


async def sessions_of(client: Client, thread_id: str) -> list[dict[str, Any]]:
    """``daemon.status``'s live sessions of one thread."""
    return [s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id]
