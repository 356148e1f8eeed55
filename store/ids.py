"""App-owned identifiers: a kind prefix and a time-ordered, sortable body.

``thr_01JD…`` sorts by creation time, so LMDB keys built from IDs keep records
of one kind in creation order without a separate index.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case

PREFIXES = frozenset(
    {"thr", "msg", "run", "att", "nod", "pss", "pth", "ptu", "eff", "req", "art", "cmd", "sub", "hof", "ctr"}
)

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """Return a new ID such as ``run_01jd8x…``: 48 bits of milliseconds, then a
    counter that keeps IDs made in the same millisecond ordered, then randomness."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            now = _last_ms
            _counter += 1
        else:
            _last_ms = now
            _counter = 0
        counter = _counter
    body = _encode(now, 10) + _encode(counter, 4) + _encode(int.from_bytes(os.urandom(5), "big"), 8)
    return f"{prefix}_{body}"


def id_kind(value: str) -> str | None:
    """The prefix of an app-owned ID, or ``None`` if it is not one."""
    prefix, sep, body = value.partition("_")
    if not sep or prefix not in PREFIXES or len(body) != 22:
        return None
    return prefix
