"""The daemon root: one trio nursery tree of supervisors (supervisor/tree.py):

    root (one_for_one; a core that gives up ends the daemon)
    ├── core (rest_for_one): store writer → thread registry → provider-session manager → socket server(s)
    └── maintenance (one_for_one, temporary): checkpoint compactor

The core's children start in this order and stop in reverse. The thread
registry is itself a dynamic supervisor of per-thread actors (actors/registry.py):
an actor's failure ends that actor only and never reaches this tree. The
compactor depends on nothing after it: its crashes restart only it, and if
it keeps crashing the daemon goes on without compaction.

Startup: lock the data dir, open the store, start the writer; the registry's
start ends provider processes a previous instance left behind and reconciles
what it left open (SPEC F12), then the sessions and the socket follow.
Shutdown (SIGINT/SIGTERM or ``request_shutdown``): stop accepting, stop
provider processes with the shutdown ladder (the actors record how their runs
ended), retire the actors, final commit.

A restart of one child restarts every child after it. Whatever restarts, the
registry starts again after everything that owned live work (actors, provider
sessions, client connections) is gone, so its reconciliation closes only
orphaned work, with reason ``<child>_restart`` (e.g. ``store_writer_restart``)
instead of ``daemon_restart``; it never meets, kills or re-runs live work.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec
import trio

from agentd.actors.providers import mcp_secrets
from agentd.actors.providers.guard import guarding
from agentd.actors.providers.base import (
    Capabilities,
    EventSink,
    ProviderAdapter,
    ProviderConnection,
    ProviderEvent,
    ProviderRuntimeError,
)
from agentd.actors.checkpoints import CheckpointEngine
from agentd.actors.checkpoints.compaction import Compactor
from agentd.actors.config import DaemonConfig, ProviderConfig
from agentd.actors.providers.agentd_tool import AgentdTool
from agentd.actors.providers.tool_credentials import ToolCredentials
from agentd.actors.providers.scripted import ScriptedAdapter
from agentd.actors.registry import ThreadRegistry
from agentd.protocol.limits import ServerLimits, return_freed_memory_promptly
from agentd.protocol.server import prepare_socket_path, serve_unix
from agentd.store.db import Store
from agentd.store.hub import EventHub
from agentd.store.reconcile import RESTART_REASON, ReconcileReport, plan_reconciliation

from agentd.actors.providers.procinfo import is_same_process, process_group_members

from .context import DaemonContext, Endpoints
from .mcp_grants import ThreadGrants
from .methods import METHODS
from .paths import Paths
from .router import DaemonRouter
from .search_indexer import SearchIndexer
from .sessions import ProviderSessionManager
from .tree import ChildSpec, Restart, RestartIntensity, Strategy, Supervisor

if TYPE_CHECKING:
    # Loaded only when a WebSocket is served (it loads h11), or a runtime of that kind is configured.
    from agentd.actors.providers.acp import AcpAdapter
    from agentd.actors.providers.claude import ClaudeAdapter
    from agentd.actors.providers.codex import CodexAdapter
    from agentd.protocol.login import LoginCodes

log = logging.getLogger(__name__)

#: the WebSocket port of ``--web`` when none is given, so the console's URL stays the same
DEFAULT_WEB_PORT = 7311
#: seconds the provider sessions may take to stop politely (each runtime's
#: own shutdown ladder is shorter) before they are cancelled
SESSIONS_SHUTDOWN = 60.0


class DaemonAlreadyRunning(RuntimeError):
    """Another agentd holds the data dir."""


@dataclass
class DaemonOptions:
    paths: Paths
    config: DaemonConfig = field(default_factory=DaemonConfig)
    wall_clock: Callable[[], float] = time.time
    inline_commits: bool = False
    actor_idle_timeout: float = 60.0
    #: overrides the config's idle timeout of every provider (``--idle-timeout``)
    idle_timeout: float | None = None
    restart_intensity: tuple[int, float] = (3, 60.0)
    #: serve the protocol over a WebSocket on this loopback port too (0: any free port)
    websocket_port: int | None = None
    websocket_host: str = "127.0.0.1"
    #: also serve the web console on the WebSocket's port (``--web``; the config's ``web`` too)
    web: bool = False
    #: bound on every provider primitive; None in virtual-time tests
    request_timeout: float | None = 30.0
    #: read end of a launcher's lifeline pipe: its end of file shuts the daemon down
    lifeline_fd: int | None = None


@dataclass(frozen=True)
class _WebSocketPlan:
    """How the WebSocket is served: its port (0: any free one), whether the
    web console is served on it too, its token and the console's login codes."""

    port: int
    console: bool
    token: str
    login_codes: LoginCodes | None


class UnavailableAdapter(ProviderAdapter):
    """A configured provider whose runtime cannot be used here; every session
    start fails with the reason, and ``agentd providers`` shows it."""

    def __init__(self, config: ProviderConfig, why: str, capabilities: Capabilities | None = None) -> None:
        self.name = config.name
        self.kind = config.kind
        #: what its kind can do (not what an unset config defaults to: issue 28 item 3)
        self.capabilities = capabilities or config.capabilities
        self.why = why

    async def open(self, *, session_id: str, emit: EventSink,
                   task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        raise ProviderRuntimeError(f"provider {self.name} ({self.kind}) is unusable: {self.why}")

    async def probe(self) -> dict[str, Any]:
        return {"usable": False, "why": self.why}


async def end_orphan(pid: int, start_ticks: int | None, *, timeout: float = 10.0) -> bool:
    """SIGKILL ``pid`` if it is still the runtime process that started at
    ``start_ticks``, and wait until it has exited (a pidfd becomes readable
    then), so nothing it did can overlap the new instance. Only the runtime:
    the processes its tools started are not agentd's to end (F12).
    Returns whether a process was ended."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        # Checked after the pidfd pins the process: a pid reused later can't fool us.
        if not is_same_process(pid, start_ticks):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        with trio.move_on_after(timeout):
            await trio.lowlevel.wait_readable(pidfd)
        return True
    finally:
        os.close(pidfd)


async def _unix_listener(path: Path) -> trio.SocketListener:
    """A listener on a 0600 Unix socket at ``path`` (a stale one is replaced)."""
    if len(os.fsencode(path)) > 107:
        raise OSError(errno.ENAMETOOLONG, "the path is too long for a Unix socket")
    prepare_socket_path(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old_umask)
    sock.listen(128)
    return trio.SocketListener(sock)


def build_adapters(
    config: DaemonConfig, providers_dir: Path, *, request_timeout: float | None = 30.0, agentd_tool: AgentdTool | None = None,
) -> dict[str, ProviderAdapter]:
    """One adapter per configured provider instance; ``agentd_tool``: how
    their sessions reach agentd's MCP endpoint (each instance's ``agentd_tool``
    setting says whether they do, SPEC F9)."""
    adapters: dict[str, ProviderAdapter] = {}
    for name, provider in config.providers.items():
        home = providers_dir / name
        adapter: ScriptedAdapter | CodexAdapter | ClaudeAdapter | AcpAdapter
        if provider.kind == "scripted":
            adapter = ScriptedAdapter(name, home=home, capabilities=provider.capabilities, request_timeout=request_timeout,
                                      args=provider.args)
        else:
            try:
                adapter = _runtime_adapter(provider, home, request_timeout)
            except (ImportError, ProviderRuntimeError) as exc:
                adapters[name] = UnavailableAdapter(provider, str(exc), native_capabilities(provider))
                continue
        if provider.agentd_tool != "off":
            adapter.agentd_tool = agentd_tool
        adapters[name] = adapter
    return adapters


def _runtime_adapter(
    provider: ProviderConfig, home: Path, request_timeout: float | None,
) -> CodexAdapter | ClaudeAdapter | AcpAdapter:
    """The adapter of a real runtime (``codex``, ``claude`` or any ``acp``
    agent), imported only when one is configured."""
    if provider.kind == "acp":
        from agentd.actors.providers.acp import AcpAdapter

        return AcpAdapter(provider, home=home, request_timeout=request_timeout)
    if provider.kind == "codex":
        from agentd.actors.providers.codex import CodexAdapter

        return CodexAdapter(provider, home=home, request_timeout=request_timeout)
    from agentd.actors.providers.claude import ClaudeAdapter

    return ClaudeAdapter(provider, home=home, request_timeout=request_timeout)


def native_capabilities(provider: ProviderConfig) -> Capabilities:
    """What an instance of ``provider``'s kind can do, as its adapter would
    say, with the config's switches (for an instance whose runtime is
    missing: ``agentd providers`` must not claim what Claude cannot do)."""
    if provider.kind == "claude":
        from agentd.actors.providers.claude import NATIVE_CAPABILITIES

        native = msgspec.structs.asdict(NATIVE_CAPABILITIES)
        return Capabilities(**{k: v and getattr(provider.capabilities, k) for k, v in native.items()})
    if provider.kind == "acp":
        from agentd.actors.providers.acp import NATIVE_CAPABILITIES as ACP_NATIVE

        native = msgspec.structs.asdict(ACP_NATIVE)
        return Capabilities(**{k: v and getattr(provider.capabilities, k) for k, v in native.items()})
    return provider.capabilities


def make_private_dir(path: Path) -> None:
    """Create the data dir 0700, or tighten an existing one to 0700: it holds
    the agents' conversations, their stderr logs and the WebSocket token.

    Raises:
        PermissionError: it belongs to another user.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = os.stat(path)
    if info.st_uid != os.getuid():
        raise PermissionError(f"data dir {path} belongs to another user (uid {info.st_uid}); pass a --data-dir of your own")
    if info.st_mode & 0o077:
        log.warning("data dir %s was readable by others (mode %o); tightened to 0700", path, info.st_mode & 0o777)
        os.chmod(path, 0o700)


class Daemon:
    """The whole daemon. ``await nursery.start(daemon.serve)`` returns once the
    socket accepts connections."""

    def __init__(self, options: DaemonOptions) -> None:
        self.options = options
        self.paths = options.paths
        self._shutdown = trio.Event()
        self._lock_fd: int | None = None
        self.store: Store | None = None
        self.hub: EventHub | None = None
        self.registry: ThreadRegistry | None = None
        self.sessions: ProviderSessionManager | None = None
        #: where clients reach the daemon (the WebSocket's URLs once it listens)
        self.endpoints = Endpoints(socket=str(self.paths.socket))
        self.reconcile_report: ReconcileReport | None = None
        # Made by ``serve``:
        self.context: DaemonContext
        self.router: DaemonRouter
        self.supervisor: Supervisor
        self.core: Supervisor
        self.maintenance: Supervisor

    def request_shutdown(self) -> None:
        """Begin an orderly shutdown (what SIGINT/SIGTERM do)."""
        self._shutdown.set()

    def _lock_data_dir(self) -> None:
        make_private_dir(self.paths.data_dir)
        fd = os.open(self.paths.data_dir / "agentd.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise DaemonAlreadyRunning(
                f"another agentd (pid {holder or '?'}) is using data dir {self.paths.data_dir}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _unlock_data_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def serve(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``request_shutdown``; ``task_status.started(self)`` once the socket accepts."""
        self.paths.check_socket()
        self._lock_data_dir()
        try:
            # Agent runtimes die with this daemon, even a SIGKILLed one.
            async with guarding():
                await self._serve(task_status)
        finally:
            self._unlock_data_dir()

    async def _serve(self, task_status: trio.TaskStatus[Daemon]) -> None:
        """Make the daemon's parts in the order they depend on each other, then run
        the supervision tree over them until ``request_shutdown``."""
        opts = self.options
        hub = self.hub = EventHub()
        store = self.store = Store(self.paths.store, on_commit=hub.publish, inline_commits=opts.inline_commits)
        hub.last_seq = store.last_seq
        # The search index follows the store after each commit (post-commit
        # hook: it only wakes the indexer, which reads the log in a thread).
        search = SearchIndexer(store, self.paths.search_index)
        store.set_on_commit(partial(_publish, hub, search))
        # agentd mcp's own credential per session: the tool methods take no
        # guessable session id for proof (hostile-round item 11).
        credentials = ToolCredentials(self.paths.tool_credentials)
        credentials.reset()
        # agentd's MCP tools are served by the daemon itself: one loopback
        # port for its life (bound here, so a restart of its server keeps
        # the URL the live sessions were given), only when an instance offers them.
        mcp_listeners = await self._mcp_listeners(credentials)
        sessions = self.sessions = self._session_manager(store, credentials)
        checkpoints, compactor = self._checkpoints()
        registry = self.registry = ThreadRegistry(
            store, hub, sessions, opts.config, workspaces_dir=self.paths.workspaces,
            wall_clock=opts.wall_clock, actor_idle_timeout=opts.actor_idle_timeout, checkpoints=checkpoints,
        )
        websocket = self._websocket_plan()
        context = self.context = DaemonContext(
            store, hub, registry, sessions, self.endpoints, started_at=trio.current_time(), credentials=credentials,
            login_codes=websocket.login_codes if websocket is not None else None, search=search,
            mcp_grants=ThreadGrants() if mcp_listeners else None,
        )
        router = self.router = DaemonRouter(METHODS, context)
        servers = self._servers(router, websocket)
        if mcp_listeners:
            servers.insert(0, ChildSpec("mcp-server", partial(self._serve_mcp, router, credentials, mcp_listeners)))
        self.supervisor = self._supervision_tree(store, registry, sessions, compactor, search, servers=servers)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.supervisor.serve)
                log.info("agentd listening on %s (data dir %s)", self.paths.socket, self.paths.data_dir)
                task_status.started(self)
                await self._shutdown.wait()
                self.supervisor.request_stop()
        finally:
            search.close()
            for listener in mcp_listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            if credentials.mcp_socket is not None:
                Path(credentials.mcp_socket).unlink(missing_ok=True)
            store.close()

    async def _mcp_listeners(self, credentials: ToolCredentials) -> list[trio.SocketListener]:
        """The loopback listener of agentd's MCP endpoint (a free port), or
        none when no provider instance offers agentd's tool."""
        if all(p.agentd_tool == "off" for p in self.options.config.providers.values()):
            return []
        host = self.options.websocket_host
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"agentd's MCP endpoint listens on loopback only (127.0.0.1 or ::1), not {host!r}")
        listeners = await trio.open_tcp_listeners(0, host=host)
        port = listeners[0].socket.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.endpoints.mcp = credentials.mcp_url = f"http://{shown}:{port}/mcp"
        # The same endpoint on a Unix socket beside the daemon's, for clients
        # that cannot reach the port: the relay, a runtime in a network namespace.
        path = Path(f"{self.paths.socket}.mcp")
        try:
            listeners.append(await _unix_listener(path))
        except OSError as exc:
            log.warning("agentd's MCP endpoint is not served on %s: %s", path, exc)
        else:
            credentials.mcp_socket = str(path)
        return listeners

    async def _serve_mcp(self, router: DaemonRouter, credentials: ToolCredentials,
                         listeners: list[trio.SocketListener], *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """agentd's MCP tools on their listener (h11 loads here, only then)."""
        from agentd.protocol.mcp_http import serve_mcp

        from .mcp_tools import AgentdTools
        from .queries import VERSION

        assert router.context.mcp_grants is not None
        tools = AgentdTools(credentials, router.context.mcp_grants, version=VERSION)
        tools.router = router
        await serve_mcp(tools, listeners, identify_peer=router.identify_peer,
                        limits=ServerLimits.for_this_process(), task_status=task_status)

    async def _deliver(self, thread_id: str, event: ProviderEvent) -> None:
        """A provider session's event, to its thread's actor (the sessions
        are made before the registry they deliver to)."""
        assert self.registry is not None
        await self.registry.deliver(thread_id, event)

    def _session_manager(self, store: Store, credentials: ToolCredentials) -> ProviderSessionManager:
        opts = self.options
        adapters = build_adapters(opts.config, self.paths.providers, request_timeout=opts.request_timeout,
                                  agentd_tool=AgentdTool(socket=str(self.paths.socket), credentials=credentials))
        return ProviderSessionManager(
            store, adapters, deliver=self._deliver, wall_clock=opts.wall_clock, idle_timeouts=self._idle_timeouts(),
            restart_intensity=opts.restart_intensity, max_sessions=opts.config.max_sessions, credentials=credentials,
        )

    def _checkpoints(self) -> tuple[CheckpointEngine, Compactor]:
        """One checkpoint engine per daemon, and the compactor of its shadow repositories."""
        settings = self.options.config.checkpoints
        # $AGENTD_CHECKPOINT_GIT names the git executable (default: git on
        # PATH), so tests can make it missing or slow.
        checkpoints = CheckpointEngine(self.paths.checkpoints, git=os.environ.get("AGENTD_CHECKPOINT_GIT") or None,
                                       max_file_bytes=settings.max_file_bytes)
        # Shadow repositories are compacted in the background, after every
        # compact_after captures of a workspace (actors/checkpoints/compaction.py).
        return checkpoints, Compactor(checkpoints, after=settings.compact_after, delay=settings.compact_delay)

    def _websocket_plan(self) -> _WebSocketPlan | None:
        """How the WebSocket is served (``--websocket-port``, ``--web`` or the
        config), or None: the Unix socket alone."""
        opts = self.options
        port = opts.websocket_port if opts.websocket_port is not None else opts.config.websocket_port
        console = opts.web or opts.config.web
        if console and port is None:
            port = DEFAULT_WEB_PORT
        if port is None:
            return None
        # Only here: trio-websocket, wsproto and h11 are a quarter of the
        # daemon's start-up, and most daemons serve the Unix socket alone.
        from agentd.protocol.login import LoginCodes
        from agentd.protocol.websocket import load_or_create_token

        token = load_or_create_token(self.paths.data_dir)
        # The console's one-time login codes (`agentd web`), issued over the Unix socket.
        return _WebSocketPlan(port, console, token, LoginCodes(token) if console else None)

    def _servers(self, router: DaemonRouter, websocket: _WebSocketPlan | None) -> list[ChildSpec]:
        """The protocol servers, last children of the core: the Unix socket, then the WebSocket if any."""
        # One set of bounds for every transport: connections, buffered bytes, subscriptions.
        return_freed_memory_promptly()
        limits = ServerLimits.for_this_process()
        servers = [ChildSpec("socket-server", partial(serve_unix, self.paths.socket, router, limits=limits))]
        if websocket is not None:
            servers.append(ChildSpec("websocket-server", partial(self._serve_websocket, router, websocket, limits)))
        return servers

    async def _serve_websocket(self, router: DaemonRouter, plan: _WebSocketPlan, limits: ServerLimits, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The WebSocket server; its URLs are known once it listens (``plan.port`` may be 0: any free port)."""
        from agentd.protocol.websocket import serve_websocket

        host = self.options.websocket_host
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(
                serve_websocket, router, host=host, port=plan.port, token=plan.token,
                allowed_origins=self.options.config.websocket_origins, limits=limits, console=plan.console,
                login_codes=plan.login_codes,
            ))
            self.endpoints.websocket = f"ws://{host}:{port}/"
            self.endpoints.web = f"http://{host}:{port}/" if plan.console else None
            task_status.started()

    async def _serve_registry(self, store: Store, registry: ThreadRegistry, *,
                              task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The thread registry, after reconciling what the store still shows open."""
        # rest_for_one: every actor, provider session and connection of an
        # earlier life ended before this start, so whatever the store still
        # shows open has no owner left and reconciliation may close it.
        registry.shutting_down = False
        # Records stored before an MCP server's secrets left them (issue 26):
        # their values move to the secrets files before any client reads one.
        await mcp_secrets.migrate(store, mcp_secrets.folder_beside(str(self.paths.workspaces)))
        await self._reconcile(store, self._reconcile_reason())
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.serve)
            nursery.start_soon(self._replay_effects, store, registry)
            task_status.started()

    def _supervision_tree(self, store: Store, registry: ThreadRegistry, sessions: ProviderSessionManager,
                          compactor: Compactor, search: SearchIndexer, *, servers: list[ChildSpec]) -> Supervisor:
        """The root supervisor, over the core (``self.core``) and maintenance (``self.maintenance``)."""
        # The order is the dependency order, and rest_for_one restarts a child
        # with everything after it: the registry's actors commit through the
        # writer; the sessions deliver to the actors; the socket calls them all.
        # Stopping runs backwards: the socket closes first, the provider
        # sessions stop while their actors can still record how the runs ended,
        # the actors retire, and the writer commits last.
        self.core = Supervisor(
            [
                ChildSpec("store-writer", store.writer.serve),
                ChildSpec("thread-registry", partial(self._serve_registry, store, registry)),
                ChildSpec("provider-sessions", sessions.serve, stop=partial(self._stop_sessions, registry, sessions),
                          shutdown=SESSIONS_SHUTDOWN),
                *servers,
            ],
            strategy=Strategy.REST_FOR_ONE,
            intensity=RestartIntensity(3, 60.0),
        )
        self.maintenance = Supervisor([ChildSpec("checkpoint-compactor", compactor.serve),
                                       ChildSpec("search-indexer", search.serve)],
                                      strategy=Strategy.ONE_FOR_ONE, intensity=RestartIntensity(3, 60.0))
        # The root restarts nothing itself: a core that gave up ends the
        # daemon (as a crash loop should), a maintenance branch that gave up
        # is dropped with its error logged.
        return Supervisor(
            [self.core.child_spec("core", shutdown=SESSIONS_SHUTDOWN + 60.0),
             self.maintenance.child_spec("maintenance", restart=Restart.TEMPORARY)],
            strategy=Strategy.ONE_FOR_ONE,
            intensity=RestartIntensity(0, 60.0),
        )

    async def _stop_sessions(self, registry: ThreadRegistry, sessions: ProviderSessionManager) -> None:
        # First no new run may start (a run the stop interrupts would otherwise
        # hand its turn to the next queued one), then the runtimes stop. The
        # registry's next start, if any, lets runs start again.
        registry.shutting_down = True
        cause = self.core.restart_cause
        await sessions.stop_all("daemon_shutdown" if cause is None else restart_reason(cause))

    def _reconcile_reason(self) -> str:
        """``daemon_restart`` on the first start (a previous instance left the
        work), ``<child>_restart`` when a restart inside this one did."""
        cause = self.core.restart_cause
        return RESTART_REASON if cause is None else restart_reason(cause)

    def _idle_timeouts(self) -> dict[str, float]:
        config = self.options.config
        default = self.options.idle_timeout if self.options.idle_timeout is not None else config.idle_timeout
        return {name: p.idle_timeout or default for name, p in config.providers.items()}

    async def _replay_effects(self, store: Store, registry: ThreadRegistry) -> None:
        """Run again the replay-safe effects a previous instance did not
        finish (process-bound ones were retired by reconciliation)."""
        from agentd.actors.executors import stop_delegated_children
        from agentd.store.batch import WriteBatch
        from agentd.store.db import struct_copy

        for effect in store.open_effects():
            if not effect.replay_safe:
                continue
            if effect.kind == "thread.stop_children":
                await stop_delegated_children(registry, effect.payload["threadId"])
                status, reason = "done", "replayed after restart"
            else:
                status, reason = "retired", f"no runner for {effect.kind} in this agentd"
            batch = WriteBatch()
            batch.put(struct_copy(effect, status=status, reason=reason))
            await store.commit(batch)

    async def _reconcile(self, store: Store, reason: str) -> None:
        # End runtimes a previous instance left behind, but only the very
        # processes it started: a pid plus its start time, checked in /proc.
        # (After a restart inside this instance its own sessions have already
        # exited through the shutdown ladder; their pids no longer match.)
        left_running: list[tuple[str | None, int, list[int]]] = []
        for session in store.live_sessions():
            if session.pid and await end_orphan(session.pid, session.process_start_ticks):
                log.info("ended orphan provider process %s of session %s", session.pid, session.id)
            # Runtimes run in a session of their own (pgid = their pid); what
            # is left in it was started by their tools: reported, not touched.
            if session.pid and session.process_start_ticks is not None:
                # A scan of /proc: off the event loop, which serves clients meanwhile.
                group = await trio.to_thread.run_sync(process_group_members, session.pid)
                members = [p for p in group if p != session.pid]
                if members:
                    left_running.append((session.thread_id, session.pid, members))
        batch, report = plan_reconciliation(store, self.options.wall_clock(), reason=reason)
        for thread_id, runtime_pid, members in left_running:
            batch.event(
                "runtime.warning", thread_id=thread_id, at=self.options.wall_clock(), pids=members,
                message=(
                    f"processes started by the previous runtime (pid {runtime_pid}) are still running: "
                    f"pids {', '.join(map(str, members))}; agentd neither stops nor adopts them"
                ),
            )
        if batch:
            await store.commit(batch)
            log.info("reconciled (%s): %s", reason, report.as_dict())
        self.reconcile_report = report


def _publish(hub: EventHub, search: SearchIndexer, events: list[Any]) -> None:
    """The store's post-commit hook: subscribers first, then the search indexer's wake-up."""
    hub.publish(events)
    search.notify(events)


def restart_reason(child: str) -> str:
    """The reason recorded for work a restart of ``child`` ended, e.g.
    ``store_writer_restart``."""
    return child.replace("-", "_") + "_restart"


async def run_daemon(options: DaemonOptions, on_ready: Callable[[Daemon], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM (or the end of the launcher's lifeline),
    then shut down in order.

    A second signal during or after the shutdown changes nothing: the signals
    trio still holds when its receiver closes are delivered again, to the
    handlers that were in place before — so those ignore them, and a clean
    shutdown is never turned into a death by signal.
    """
    daemon = Daemon(options)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.serve)
            if on_ready is not None:
                on_ready(daemon)
            async with trio.open_nursery() as waiters:
                async def on_signal() -> None:
                    async for _sig in signals:
                        break
                    waiters.cancel_scope.cancel()

                waiters.start_soon(on_signal)
                lifeline_fd = options.lifeline_fd
                if lifeline_fd is not None:
                    async def on_lifeline_end() -> None:
                        await wait_for_end_of_file(lifeline_fd)
                        log.info("the process that launched agentd is gone; shutting down")
                        waiters.cancel_scope.cancel()

                    waiters.start_soon(on_lifeline_end)
            daemon.request_shutdown()


async def wait_for_end_of_file(fd: int) -> None:
    """Wait until the pipe ``fd`` reads end of file (its writers are gone)."""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            if not os.read(fd, 4096):
                return
        except BlockingIOError:
            continue
