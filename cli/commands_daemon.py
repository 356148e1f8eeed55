"""The daemon itself and what it says about itself: ``serve``, ``demo``,
``status`` and ``providers``. Only ``serve`` and ``demo`` load trio and the
daemon's modules."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from typing import Any

from .common import EXIT_USAGE, CliError, paths, print_json, sole_error, with_daemon
from .connection import DaemonConnection


def cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from agentd.actors.config import ConfigError, load_config
    from agentd.supervisor.daemon import DaemonAlreadyRunning, DaemonOptions, run_daemon

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    where = paths(args, args.config)
    try:
        config = load_config(where.config, optional=where.config_is_default)
        where.check_socket()
        if args.idle_timeout is not None and args.idle_timeout <= 0:
            raise ValueError("--idle-timeout must be a positive number of seconds")
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None

    def on_ready(daemon) -> None:
        url = daemon.endpoints.websocket
        print(f"agentd {os.getpid()} listening on {where.socket}" + (f" and {url}" if url else ""), file=sys.stderr, flush=True)
        if daemon.endpoints.web:
            print(f"web console: {daemon.endpoints.web} (`agentd web` prints its URL with the token)", file=sys.stderr, flush=True)
        if args.ready_fd is not None:
            os.write(args.ready_fd, b"ready\n")
            os.close(args.ready_fd)

    try:
        options = DaemonOptions(paths=where, config=config, idle_timeout=args.idle_timeout,
                                websocket_port=args.websocket_port, web=args.web, lifeline_fd=_take_lifeline())
        trio.run(run_daemon, options, on_ready)
    except BaseException as exc:  # noqa: BLE001 - the one error a start can end with
        error = sole_error(exc)
        if isinstance(error, DaemonAlreadyRunning):
            raise CliError(f"{error}; stop it first, or use another --data-dir") from None
        if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
            raise CliError(f"{error.strerror}; stop it first, or use another --socket") from None
        if isinstance(error, OSError):
            raise CliError(f"cannot serve: {error.strerror or error}") from None
        raise error from None
    return 0


def _take_lifeline() -> int | None:
    """The read end of a launcher's lifeline (``agentd.launch``), if this
    daemon was started by one; kept from the agents this daemon starts."""
    from agentd.launch import LIFELINE_ENV

    value = os.environ.pop(LIFELINE_ENV, None)
    if value is None:
        return None
    fd = int(value)
    os.set_inheritable(fd, False)
    os.set_blocking(fd, False)
    return fd


def cmd_demo(args: argparse.Namespace) -> int:
    from agentd.demo import run_demo

    return run_demo(args)


def cmd_status(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        status = daemon.call("daemon.status")
        if args.json:
            print_json(status)
            return 0
        print(f"agentd {status['version']} pid {status['pid']} up {status['uptime']:.0f}s, last seq {status['lastSeq']}")
        print(f"socket: {status['socket']}")
        if status.get("websocket"):
            print(f"websocket: {status['websocket']} (token in {status['dataDir']}/websocket.token)")
        else:
            print("websocket: off (`agentd serve --websocket-port PORT` serves one)")
        print(f"data dir: {status['dataDir']}")
        print(f"loaded threads: {len(status['loadedActors'])}, subscribers: {status['subscribers']}")
        for session in status["sessions"]:
            print(f"  session {session['id']} {session['provider']} {session['status']} pid={session['pid']} "
                  f"thread={session['threadId']}" + (" busy" if session.get("busy") else ""))
        return 0

    return with_daemon(args, go)


def _agent_line(p: dict[str, Any]) -> str:
    """An ACP agent's name and version, and what it said it can do (``loadSession``, session list/fork/…)."""
    agent = p["agent"]
    said = p.get("agentCapabilities") or {}
    can = (["loadSession"] if said.get("loadSession") else []) + [f"session/{k}" for k in sorted(said.get("sessionCapabilities") or {})]
    logins = [m.get("name") or m.get("id") for m in p.get("authMethods") or []]
    return (f"{agent.get('title') or agent.get('name')} {agent.get('version', '')}".rstrip()
            + (f" ({', '.join(can)})" if can else "") + (f"; logins: {', '.join(map(str, logins))}" if logins else ""))


def cmd_providers(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        listed = daemon.call("providers.list")
        if args.json:
            print_json(listed)
            return 0
        for p in listed["providers"]:
            state = f"{p.get('version', '?')} at {p.get('binary', '?')}" if p["usable"] else f"UNUSABLE: {p.get('why')}"
            print(f"{p['name']:12} {p['kind']:9} {state}")
            on = [k for k, v in p["capabilities"].items() if v]
            off = [k for k, v in p["capabilities"].items() if not v]
            print(f"  can: {', '.join(on) or 'none'}" + (f"; cannot: {', '.join(off)}" if off else ""))
            if p.get("agent"):
                print(f"  agent: {_agent_line(p)}")
        return 0

    return with_daemon(args, go)
