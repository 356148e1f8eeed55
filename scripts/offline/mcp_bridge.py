"""A bridge for a runtime in a loopback-only network namespace to agentd's
MCP endpoint (SPEC F9): it listens on the endpoint URL's port inside the
namespace and forwards each connection, byte for byte, to the endpoint's
Unix socket (``AGENTD_MCP_SOCKET``; the filesystem is shared, the network
is not). The namespace wrapper (``world.namespace_wrapper``) starts it
before it execs the runtime, so it is the runtime's child: agentd takes
its connections for that session's processes, and it exits with the runtime.

    python scripts/offline/mcp_bridge.py --url URL --socket PATH [--announce] [--exit-with-parent]
"""

from __future__ import annotations

import _thread
import os
import socket
import sys
import time

# The wrapper waits for it to listen before it execs the runtime, so it starts
# with -I -S and loads neither argparse nor urllib nor threading (re and
# gettext come with those): about a third of its start (issue 24).


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    _thread.start_new_thread(_pump, (upstream, client))
    _pump(client, upstream)


def _watch_parent() -> None:
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.1)
    os._exit(0)


def _arguments(argv: list[str]) -> dict[str, str | bool]:
    """``--url URL --socket PATH [--announce] [--exit-with-parent]``."""
    found: dict[str, str | bool] = {"announce": False, "exit_with_parent": False}
    index = 0
    while index < len(argv):
        name = argv[index].lstrip("-").replace("-", "_")
        if name in ("url", "socket") and index + 1 < len(argv):
            found[name] = argv[index + 1]
            index += 2
        elif name in ("announce", "exit_with_parent"):
            found[name] = True
            index += 1
        else:
            raise SystemExit(f"mcp_bridge: unknown argument {argv[index]!r}; {__doc__.splitlines()[-1].strip()}")
    if "url" not in found or "socket" not in found:
        raise SystemExit("mcp_bridge: --url and --socket are required")
    return found


def main() -> None:
    args = _arguments(sys.argv[1:])
    # http://HOST:PORT/…, as the daemon hands it out
    authority = str(args["url"]).split("://", 1)[-1].split("/", 1)[0]
    host, _, port = authority.rpartition(":")
    listener = socket.create_server((host.strip("[]") or "127.0.0.1", int(port or 80)))
    if args["announce"]:
        print(listener.getsockname()[1], flush=True)
    if args["exit_with_parent"]:
        _thread.start_new_thread(_watch_parent, ())
    while True:
        client, _ = listener.accept()
        _thread.start_new_thread(_serve, (client, str(args["socket"])))


if __name__ == "__main__":
    main()
