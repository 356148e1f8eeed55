"""App-owned identifiers: a kind prefix and a time-ordered, sortable body.

``thr_01JD…`` sorts by creation time, so LMDB keys built from IDs keep records
of one kind in creation order without a separate index.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case

#: the kinds of ID agentd makes; a new kind of record gets its prefix here
PREFIXES = frozenset({"thr", "msg", "run", "att", "nod", "pss", "pth", "ptu", "eff", "req", "art", "sub", "hof", "ckp", "xfr", "inc"})

_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Random bits come from a pool refilled 4 KiB at a time: os.urandom releases
# the GIL, and one syscall per ID made the event loop trade the GIL with the
# store's writer thread on every command.
_pool = b""
_pool_at = 0


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 characters


def _encode22(value: int) -> str:
    """``value`` (< 2**110) as 22 base32 characters, most significant first."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in range(100, -1, -10)])


def new_id(prefix: str) -> str:
    """Return a new ID such as ``run_01jd8x…``: 48 bits of milliseconds, then a
    counter that keeps IDs made in the same millisecond ordered, then 40
    random bits."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    global _last_ms, _counter, _pool, _pool_at
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            now = _last_ms
            _counter += 1
        else:
            _last_ms = now
            _counter = 0
        if _pool_at + 5 > len(_pool):
            _pool, _pool_at = os.urandom(4096), 0
        random_bits = int.from_bytes(_pool[_pool_at : _pool_at + 5], "big")
        _pool_at += 5
        # 48 + 20 + 40 bits = 108 bits, 22 base32 characters (the top two bits are 0).
        value = (now << 60) | ((_counter & 0xFFFFF) << 40) | random_bits
    return f"{prefix}_{_encode22(value)}"
