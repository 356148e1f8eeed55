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

import argparse
import os
import socket
import threading
import time
from urllib.parse import urlsplit


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
    threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
    _pump(client, upstream)


def _watch_parent() -> None:
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.1)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--announce", action="store_true", help="print the port on stdout once listening")
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args()
    parts = urlsplit(args.url)
    listener = socket.create_server((parts.hostname or "127.0.0.1", parts.port or 80))
    if args.announce:
        print(listener.getsockname()[1], flush=True)
    if args.exit_with_parent:
        threading.Thread(target=_watch_parent, daemon=True).start()
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, args.socket), daemon=True).start()


if __name__ == "__main__":
    main()
