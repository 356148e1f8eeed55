"""``agentd web``: the web console's URL, with the WebSocket token in the
fragment (``http://127.0.0.1:PORT/#token=…``) — a browser never sends a
fragment to a server, so the token reaches no log and no Referer.

At a desktop the console is opened too, but never with that URL: a browser
keeps the URL it was started with in its command line, which every local
user can read (``/proc/PID/cmdline``). It is opened with a one-time login
code instead (``web.loginCode``, protocol/login.py): good once, for a
minute, and only for this user's browser.

Its arguments are in commands.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .common import CliError, print_json, with_daemon
from .connection import DaemonConnection

TOKEN_FILE = "websocket.token"  # as protocol/websocket.py names it (not imported: it loads the WebSocket stack)


def console_url(web_url: str, token: str) -> str:
    """The URL a person opens: the console's, with the token in the fragment."""
    return f"{web_url}#token={token}"


def at_a_desktop() -> bool:
    """Whether opening a browser can work here and is what a person expects:
    a graphical session and a terminal (not a script reading the output)."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and sys.stdout.isatty()


def cmd_web(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        status = daemon.call("daemon.status")
        if not status.get("web"):
            raise CliError("the web console is off; start the daemon with `agentd serve --web` "
                           "(or `web = true` under [daemon] in config.toml)")
        token_path = Path(status["dataDir"]) / TOKEN_FILE
        try:
            token = token_path.read_text().strip()
        except OSError as exc:
            raise CliError(f"cannot read the WebSocket token in {token_path}: {exc.strerror or exc}") from None
        url = console_url(status["web"], token)
        if args.json:
            print_json({"url": url})
        else:
            print(url)
        if not args.no_open and at_a_desktop():
            import webbrowser

            login = daemon.call("web.loginCode")
            if not webbrowser.open(login["url"]):
                print("agentd: no browser could be started; open the URL above", file=sys.stderr)
            else:
                print(f"opened the console with a one-time login link (good for {login['expiresIn']:.0f} s)",
                      file=sys.stderr)
        return 0

    return with_daemon(args, go)
