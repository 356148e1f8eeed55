"""File names as the engine hands them out: a path is bytes on disk and in
git, and may not be UTF-8 (an archive extracted from elsewhere is enough).

What leaves the engine goes into LMDB records (msgpack) and onto the JSON
wire, which take only valid Unicode: a ``str`` holding lone surrogates (what
``os.fsdecode`` makes of a byte that is not UTF-8) fails to encode there. So
every path leaves as ``shown(path)`` — the name decoded as UTF-8 with each
byte that is not shown as ``\\xNN`` (lossy, never a surrogate) — and, only when
that is not the name itself, with ``exact(path)`` beside it: the name's bytes
in base64 (the protocol's ``pathBytes``). ``raw`` gives the bytes back.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable


def is_utf8(path: bytes) -> bool:
    """Whether ``path`` is valid UTF-8 (so ``shown`` gives it exactly)."""
    try:
        path.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def shown(path: bytes) -> str:
    """The name as text: UTF-8, with each byte that is not valid UTF-8 as ``\\xNN``."""
    return path.decode("utf-8", "backslashreplace")


def exact(path: bytes) -> str | None:
    """The name's bytes in base64 when ``shown`` cannot carry them, else None."""
    return None if is_utf8(path) else base64.b64encode(path).decode("ascii")


def exact_map(paths: Iterable[bytes]) -> dict[str, str]:
    """``{shown(path): exact(path)}`` for the names among ``paths`` that are not UTF-8."""
    return {shown(p): b64 for p in paths if (b64 := exact(p)) is not None}


def raw(path: str, path_bytes: str | None = None) -> bytes:
    """The name's bytes: ``path_bytes`` (base64) when given, else ``path`` as UTF-8."""
    if path_bytes is not None:
        return base64.b64decode(path_bytes, validate=True)
    return path.encode("utf-8", "surrogateescape")


def clean(text: str) -> str:
    """``text`` (e.g. an ``OSError``'s message, which quotes the file name)
    with every lone surrogate as the ``\\xNN`` of the byte it stands for."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
