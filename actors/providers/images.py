"""Images that come with a user message (issue 26): checked, kept as files,
handed to the provider.

A message's images are not kept in the store: a value of LMDB stays small,
and so does the ``message.created`` event every subscriber gets. Each image
is written once, named by its SHA-256, to
``<data-dir>/attachments/<threadId>/<sha256>`` (0600, in 0700 folders,
fsynced before the message's batch is committed; ``thread.delete`` removes
the thread's folder), and
the message record holds ``{type, mimeType, sha256, size}``
(``MessageAttachment``). A provider gets an ``ImageInput`` per image: the
file's path (Codex's ``localImage``) and its bytes on demand (base64 for
Claude's stream-json and ACP's ``image`` content blocks).

``check`` is pure (the sizes, from the base64's length); ``save`` and
``inputs`` touch the disk and run off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentd.protocol.errors import InvalidParams
from agentd.protocol.wire import MAX_ATTACHMENT_BYTES, ImageAttachment
from agentd.store.records import ConversationMessage, MessageAttachment

from ..regular_files import read_regular, replace_durably

#: how each image type's bytes begin (a mismatch is refused: a runtime would fail the turn on it)
MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}


@dataclass(frozen=True)
class ImageInput:
    """One image of a turn's input, as a provider gets it."""

    mime_type: str
    #: the file that holds its bytes
    path: str
    size: int

    def read(self) -> bytes:
        """Its bytes (blocking: call it off the event loop). A symlink put in
        the file's place is refused, not followed: the bytes sent to a model
        are the ones agentd stored.

        Raises:
            OSError: the file is gone or was replaced by a symlink.
        """
        # Nor a FIFO (its open would wait forever), and never more than was stored.
        data = read_regular(self.path, limit=self.size)
        if len(data) != self.size:
            raise OSError(errno.EIO, f"holds {len(data)} bytes, not the {self.size} stored", self.path)
        return data

    def base64(self) -> str:
        """Its bytes as base64 (blocking)."""
        return base64.b64encode(self.read()).decode("ascii")


def folder_beside(workspaces_folder: str, thread_id: str) -> str:
    """``<data-dir>/attachments/<threadId>``: beside the data dir's ``workspaces``."""
    return os.path.join(os.path.dirname(os.path.abspath(workspaces_folder)), "attachments", thread_id)


def decoded_size(data: str) -> int:
    """The bytes a base64 text decodes to (from its length: nothing decoded)."""
    return len(data) * 3 // 4 - (2 if data.endswith("==") else 1 if data.endswith("=") else 0)


def check(attachments: Sequence[ImageAttachment]) -> None:
    """Refuse, before anything is decoded or stored, attachments whose bytes
    together exceed MAX_ATTACHMENT_BYTES.

    Raises:
        InvalidParams: naming ``attachments`` and the limit.
    """
    total = sum(decoded_size(a.data) for a in attachments)
    if total > MAX_ATTACHMENT_BYTES:
        raise InvalidParams(
            f"the message's images hold {total} bytes; at most {MAX_ATTACHMENT_BYTES} bytes "
            f"({MAX_ATTACHMENT_BYTES >> 20} MiB, decoded) may come with one message",
            field="attachments", limit=MAX_ATTACHMENT_BYTES, size=total)


def decode(attachment: ImageAttachment, index: int) -> bytes:
    """An attachment's bytes, checked to be base64 of an image of its type.

    Raises:
        InvalidParams: naming ``attachments[INDEX].data``.
    """
    field = f"attachments[{index}].data"
    try:
        data = base64.b64decode(attachment.data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidParams(f"{field} is not base64 (RFC 4648, with padding)", field=field) from None
    if not data.startswith(MAGIC[attachment.mime_type]) or (
            attachment.mime_type == "image/webp" and data[8:12] != b"WEBP"):
        raise InvalidParams(f"{field} is not a {attachment.mime_type} image (its bytes do not begin as one)",
                            field=field, mimeType=attachment.mime_type)
    return data


def _write_once(folder: Path, digest: str, data: bytes) -> None:
    """``folder/digest`` holding ``data``, durably; an existing one is the same bytes."""
    path = folder / digest
    try:
        there = path.lstat()
    except FileNotFoundError:
        there = None
    if there is not None and stat.S_ISREG(there.st_mode) and there.st_size == len(data):
        return
    # Never through a symlink: a new file, made here (the rename then swaps
    # whatever stands at ``path``, a symlink included, for it).
    replace_durably(folder, digest, data)


def save(folder: str, attachments: Sequence[ImageAttachment]) -> list[MessageAttachment]:
    """Decode and store each attachment (blocking); what the message record keeps.

    Raises:
        InvalidParams: one is not base64 of an image of its type (nothing is kept of the message then).
    """
    decoded = [decode(a, i) for i, a in enumerate(attachments)]
    where = Path(folder)
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    where.mkdir(exist_ok=True, mode=0o700)
    for each in (where.parent, where):
        if each.is_symlink():  # swapped for a symlink: the images would be written wherever it points
            raise OSError(f"{each} is a symlink; agentd keeps a message's images only in a folder of its own")
    kept = []
    for attachment, data in zip(attachments, decoded):
        digest = hashlib.sha256(data).hexdigest()
        _write_once(where, digest, data)
        kept.append(MessageAttachment(mime_type=attachment.mime_type, sha256=digest, size=len(data)))
    return kept


def inputs(folder: str, message: ConversationMessage) -> list[ImageInput]:
    """The images of ``message`` as a provider gets them."""
    return [ImageInput(mime_type=a.mime_type, path=os.path.join(folder, a.sha256), size=a.size)
            for a in message.attachments or []]
