"""What reaches a person's terminal: an agent's text, never its control codes.

Most of what the CLI prints comes from agents: answers, commands, file names,
diffs, titles. Written raw to a terminal, an escape sequence in them is obeyed
by it: ``ESC ] 52`` sets the clipboard, cursor moves and ``\\r`` write over
lines already shown (an approval prompt could show another command than the
one it approves), ``ESC [ 8 m`` hides text, and bidi overrides reorder it.
So at a terminal every control character but newline and tab — C0, DEL, C1 —
and every bidi control is shown as a visible mark (``^[``, ``^M``,
``<U+202E>``) instead. The CLI's own colours (``checkpoint_cmds``) pass: they
only colour, so an agent's copy of them is harmless too. Pipes and files get
the text as it is.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

#: the SGR codes the CLI itself writes (green, red, cyan, bold, reset)
OWN_CODES = ("\033[32m", "\033[31m", "\033[36m", "\033[1m", "\033[0m")
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


def shown(text: str) -> str:
    """``text`` as a terminal should get it (see the module's docstring)."""
    if _UNSAFE.search(text) is None:
        return text
    out: list[str] = []
    at = 0
    while (found := _UNSAFE.search(text, at)) is not None:
        start = found.start()
        out.append(text[at:start])
        own = next((code for code in OWN_CODES if text.startswith(code, start)), None)
        if own is not None:
            out.append(own)
            at = start + len(own)
        else:
            out.append(_visible(text[start]))
            at = start + 1
    out.append(text[at:])
    return "".join(out)


class GuardedStream:
    """A text stream to a terminal whose writes go through :func:`shown`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(shown(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_terminal() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` guarded where they are terminals
    (call before the commands' modules load: some bind ``sys.stdout`` as a default)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            at_terminal = stream is not None and stream.isatty()
        except (AttributeError, ValueError):
            at_terminal = False
        if at_terminal and not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))
