"""``agentd web``: the web console's URL, with the WebSocket token in the
fragment (``http://127.0.0.1:PORT/#token=…``) — a browser never sends a
fragment to a server, so the token reaches no log and no Referer.

At a desktop the console is opened too, but never with that URL: a browser
keeps the URL it was started with in its command line, which every local
user can read (``/proc/PID/cmdline``). It is opened with a one-time login
code instead (``web.loginCode``, protocol/login.py): good once, for a
minute, and only for this user's browser.

``add_web_command`` is the one hook in the parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import trio

from agentd.protocol.client import Client

from .common import CliError, print_json, run_with_client

TOKEN_FILE = "websocket.token"  # as protocol/websocket.py names it (not imported: it loads the WebSocket stack)


def console_url(web_url: str, token: str) -> str:
    """The URL a person opens: the console's, with the token in the fragment."""
    return f"{web_url}#token={token}"


def at_a_desktop() -> bool:
    """Whether opening a browser can work here and is what a person expects:
    a graphical session and a terminal (not a script reading the output)."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and sys.stdout.isatty()


def cmd_web(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        status = await client.call("daemon.status")
        if not status.get("web"):
            raise CliError("the web console is off; start the daemon with `agentd serve --web` "
                           "(or `web = true` under [daemon] in config.toml)")
        token_path = Path(status["dataDir"]) / TOKEN_FILE
        try:
            token = (await trio.Path(token_path).read_text()).strip()
        except OSError as exc:
            raise CliError(f"cannot read the WebSocket token in {token_path}: {exc.strerror or exc}") from None
        url = console_url(status["web"], token)
        if args.json:
            print_json({"url": url})
        else:
            print(url)
        if not args.no_open and at_a_desktop():
            import webbrowser

            login = await client.call("web.loginCode")
            if not await trio.to_thread.run_sync(webbrowser.open, login["url"]):
                print("agentd: no browser could be started; open the URL above", file=sys.stderr)
            else:
                print(f"opened the console with a one-time login link (good for {login['expiresIn']:.0f} s)",
                      file=sys.stderr)
        return 0

    return run_with_client(args, go)


def add_web_command(sub: argparse._SubParsersAction, results: argparse.ArgumentParser) -> None:
    p = sub.add_parser("web", parents=[results],
                       help="print the web console's URL with its token; at a desktop, open the console "
                            "with a one-time login code")
    p.add_argument("--no-open", action="store_true", help="only print the URL, never open a browser")
    p.set_defaults(fn=cmd_web)
