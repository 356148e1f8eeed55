"""Reading a git index file (the user's, copied) far enough to seed a shadow
index from it: each entry's path, mode, size and the flags that would make
the shadow's git see it differently from the files on disk.

Only what ``seed`` needs is decoded: versions 2, 3 and 4 of SHA-1 indexes
(git's ``Documentation/gitformat-index.txt``); the extensions are only named
(a split index, ``link``, or a sparse one, ``sdir``, is refused: its entries
are not all in this file). Nothing here writes.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

#: the fixed part of an entry: ten 32-bit stat fields, a SHA-1, 16-bit flags
_FIXED = 40 + 20 + 2
_ASSUME_VALID = 0x8000
_EXTENDED = 0x4000
_STAGE = 0x3000
_NAME_MASK = 0x0FFF
_SKIP_WORKTREE = 0x4000
_INTENT_TO_ADD = 0x2000
GITLINK_MODE = 0o160000
#: an entry's stat data as git recorded it, at its start: ctime s, ctime ns,
#: mtime s, mtime ns, dev, ino, mode, uid, gid, size (32 bits each)
STAT_DATA = struct.Struct(">10I")
#: extensions whose index is not complete in itself
REFUSED_EXTENSIONS = (b"link", b"sdir")


class UnreadableIndex(Exception):
    """The index is not one ``read_index`` can seed from (the reason in the message)."""


@dataclass
class IndexEntries:
    """What ``read_index`` found.

    Attributes:
        paths: every stage-0 path that may be taken as it is (work-tree-relative).
        sizes: the size git recorded for each of ``paths`` (32 bits, as git stores it).
        spans: where each of ``paths``'s entry is in the file (start, end); its
            stat data is at the start (``STAT_DATA``).
        trees: the tree ids the cache-tree extension holds as valid (hex).
        version: the index format version.
        gitlinks: submodule entries.
        flagged: paths git would not compare with the disk as it is: assume-unchanged,
            skip-worktree, intent-to-add or unmerged entries.
    """

    paths: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    version: int = 2
    trees: list[str] = field(default_factory=list)
    gitlinks: list[bytes] = field(default_factory=list)
    flagged: list[bytes] = field(default_factory=list)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (``varint.c``): the value and the offset after it."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def read_index(data: bytes) -> IndexEntries:
    """The entries of the index file ``data`` (its whole bytes).

    Raises:
        UnreadableIndex: not a version 2–4 SHA-1 index, truncated, or split or sparse.
    """
    if len(data) < 12 + 20 or data[:4] != b"DIRC":
        raise UnreadableIndex("not an index file")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise UnreadableIndex(f"index version {version}")
    out = IndexEntries(version=version)
    fixed = struct.Struct(">24xI8xI20xH").unpack_from  # mode, size, flags
    flags_at = struct.Struct(">H").unpack_from
    at, previous, end = 12, b"", len(data) - 20
    try:
        for _ in range(count):
            start = at
            mode, size, flags = fixed(data, at)
            name_at = at + _FIXED
            extended = 0
            if flags & _EXTENDED and version >= 3:
                extended = flags_at(data, name_at)[0]
                name_at += 2
            if version == 4:
                strip, name_at = _varint(data, name_at)
                stop = data.index(b"\0", name_at)
                path = previous[:len(previous) - strip] + data[name_at:stop]
                at = stop + 1
            else:
                length = flags & _NAME_MASK
                stop = name_at + length if length < _NAME_MASK else data.index(b"\0", name_at)
                path = data[name_at:stop]
                at += ((name_at - at) + (stop - name_at) + 8) & ~7
            previous = path
            if at > end:
                raise UnreadableIndex("truncated index")
            if flags & (_ASSUME_VALID | _STAGE) or extended & (_SKIP_WORKTREE | _INTENT_TO_ADD):
                out.flagged.append(path)
            elif mode == GITLINK_MODE:
                out.gitlinks.append(path)
            else:
                out.paths.append(path)
                out.sizes.append(size)
                out.spans.append((start, at))
    except (struct.error, ValueError, IndexError) as exc:
        raise UnreadableIndex(f"malformed index: {exc}") from exc
    out.trees = _extensions(data, at, end)
    return out


def _extensions(data: bytes, at: int, end: int) -> list[str]:
    """The valid tree ids of the cache-tree extension; refuses a split or sparse index."""
    trees: list[str] = []
    while at + 8 <= end:
        signature, size = data[at:at + 4], struct.unpack_from(">I", data, at + 4)[0]
        if signature in REFUSED_EXTENSIONS:
            raise UnreadableIndex(f"the index has a {signature.decode()!r} extension (split or sparse)")
        if signature == b"TREE":
            trees = _cache_tree(data[at + 8:at + 8 + size])
        at += 8 + size
    return trees


def _cache_tree(ext: bytes) -> list[str]:
    """Each node: path NUL, entry count (-1: invalid) SP, subtree count LF, then the id if valid."""
    out, at = [], 0
    try:
        while at < len(ext):
            line_end = ext.index(b"\n", ext.index(b"\0", at))
            count = int(ext[ext.index(b"\0", at) + 1:line_end].split(b" ")[0])
            at = line_end + 1
            if count >= 0:
                out.append(ext[at:at + 20].hex())
                at += 20
    except ValueError:
        return []
    return out


def filtered(data: bytes, entries: IndexEntries, keep: list[int]) -> bytes:
    """A version 2 or 3 index of the entries ``keep`` (positions in
    ``entries.paths``) of the index ``data``, without extensions (the cache
    tree would be stale), with git's SHA-1 trailer."""
    if entries.version == 4:
        raise UnreadableIndex("a version 4 index cannot be cut (its paths are prefix-compressed)")
    body = b"".join(data[entries.spans[i][0]:entries.spans[i][1]] for i in keep)
    head = data[:8] + struct.pack(">I", len(keep))
    return head + body + hashlib.sha1(head + body).digest()  # noqa: S324 - git's index checksum
