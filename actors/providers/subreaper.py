"""Agent runtimes are child subreapers: whatever they start stays under them.

agentd tells an agent's own processes from the person's by walking a
connecting peer's parent chain up to a runtime the daemon started (see
``supervisor/peers.py``). A command that double-forks to daemonise itself
would break that chain: its orphaned grandchild is reparented to the nearest
*subreaper* ancestor, else to init. So every runtime is made one
(``PR_SET_CHILD_SUBREAPER``) before it starts: a tiny exec shim (the daemon's
own Python, ``-I -S``) sets the flag and ``exec``s the runtime's argv. The
flag survives ``execve`` and ``exec`` keeps the pid, so the pid the session
records is the runtime's, and every orphan of its tree is reparented to it
for as long as it lives.

Cost: one short-lived interpreter start per runtime start (~15 ms). A
daemonised descendant that exits is the runtime's zombie until the runtime
itself exits (runtimes reap only the children they know); a descendant that
outlives its runtime is reparented out of agentd's reach.
"""

from __future__ import annotations

import sys

#: PR_SET_CHILD_SUBREAPER (36) for this process, then exec argv[1:]; any failure exits non-zero
SHIM = (
    "import ctypes,os,sys\n"
    "libc=ctypes.CDLL(None,use_errno=True)\n"
    "if libc.prctl(36,1,0,0,0)!=0:\n"
    " sys.exit('agentd: cannot make the agent runtime a subreaper: '+os.strerror(ctypes.get_errno()))\n"
    "os.execvp(sys.argv[1],sys.argv[1:])\n"
)


def subreaper_command(args: list[str]) -> list[str]:
    """``args`` run as a child subreaper (same pid, same argv once exec'd)."""
    return [sys.executable, "-I", "-S", "-c", SHIM, *args]
