"""The values of a thread's MCP servers' environment variables and headers
(issue 26), kept out of the store.

An editor's MCP server may carry an API token in an environment variable or
an ``Authorization`` header. Every client of the socket reads records and
events (an agent's process too, with the read role), so the thread's record
keeps only their names (``McpServer.envNames`` / ``headerNames``) and the
values are kept in a file of the daemon's own::

    <data-dir>/mcp-secrets/<threadId>.json   (0600, in a 0700 folder)
    {"servers": {"NAME": {"env": {"KEY": "VALUE"}, "headers": {"KEY": "VALUE"}}}}

It is written before the record that names the values is committed, with
the values kept already beside the new ones, and pruned to the new ones
after the commit (``keep(beside_old=True)``, then ``prune``): a commit that
fails leaves the record as it was, which still finds its values. Atomically
(a new temporary file made with ``O_EXCL | O_NOFOLLOW`` in the folder,
fsynced, renamed over the old one, the folder fsynced), and never through a
symlink nor from a FIFO put in the file's place (``regular_files``: such an
open would wait forever): a folder that is a symlink, or that is not the user's, is refused
(an agent's command could otherwise have the tokens written where it
reads). ``thread.delete`` removes it; a fork gets a copy.

Everything here but ``migrate`` blocks: call it off the event loop.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any
import msgspec
import trio

from agentd.protocol.errors import AgentdError, InvalidState
from agentd.store.batch import WriteBatch
from agentd.store.db import Store, struct_copy
from agentd.store.records import RecordDecodeError, decode_record, encode_record

from ..regular_files import read_regular, replace_durably
from .extra_mcp import Secrets

log = logging.getLogger(__name__)

FOLDER = "mcp-secrets"
#: the most a secrets file may hold (32 servers of 256 values of 16 KiB each, and room for their names)
MAX_FILE = 32 * 256 * (16384 + 512)


class _File(msgspec.Struct, kw_only=True):
    servers: dict[str, dict[str, dict[str, str]]] = {}


_decoder = msgspec.json.Decoder(_File)


def folder_beside(workspaces_folder: str) -> str:
    """``<data-dir>/mcp-secrets``: beside the data dir's ``workspaces``."""
    return os.path.join(os.path.dirname(os.path.abspath(workspaces_folder)), FOLDER)


def path_of(folder: str, thread_id: str) -> str:
    """The secrets file of thread ``thread_id`` in ``folder``."""
    if not thread_id or "/" in thread_id or thread_id.startswith("."):  # pragma: no cover - ids are agentd's
        raise ValueError(f"not a thread id: {thread_id!r}")
    return os.path.join(folder, f"{thread_id}.json")


def _checked(folder: str, *, create: bool) -> bool:
    """Whether ``folder`` is there (made 0700 when ``create``), refusing one
    that is a symlink, not a folder, or not the user's.

    Raises:
        OSError: the folder cannot be used, saying why.
    """
    if create:
        os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
    try:
        there = os.lstat(folder)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(there.st_mode):
        raise OSError(f"{folder} is a symlink; agentd keeps the secrets of MCP servers only in a folder of its own")
    if not stat.S_ISDIR(there.st_mode):
        raise OSError(f"{folder} is not a folder; agentd keeps the secrets of MCP servers in a folder of its own")
    if there.st_uid != os.getuid():
        raise OSError(f"{folder} belongs to user {there.st_uid}, not to agentd's user; "
                      "agentd keeps the secrets of MCP servers only in a folder of its own")
    if stat.S_IMODE(there.st_mode) != 0o700:
        os.chmod(folder, 0o700)  # ours, but open to others: closed before anything is written there
    return True


def read(folder: str, thread_id: str) -> Secrets:
    """The thread's kept values (``{}``: none kept, or no file).

    Raises:
        OSError: the folder or the file cannot be used (a symlink is refused,
            not followed), or the file is not one agentd wrote.
    """
    if not _checked(folder, create=False):
        return {}
    try:
        # Not through a symlink, nor a FIFO put in its place (that open would wait forever).
        data = read_regular(path_of(folder, thread_id), limit=MAX_FILE)
    except FileNotFoundError:
        return {}
    if len(data) > MAX_FILE:
        raise OSError(f"{path_of(folder, thread_id)} holds more than {MAX_FILE} bytes: not a file agentd wrote")
    try:
        return _decoder.decode(data).servers
    except msgspec.DecodeError as exc:
        raise OSError(f"{path_of(folder, thread_id)} is not a file of MCP server secrets agentd wrote: {exc}") from None


def _beside(old: Secrets, new: Secrets) -> Secrets:
    """``new`` with the values of ``old`` it does not replace kept beside them."""
    out: Secrets = {name: {key: dict(values) for key, values in entry.items()} for name, entry in old.items()}
    for name, entry in new.items():
        for key, values in entry.items():
            out.setdefault(name, {}).setdefault(key, {}).update(values)
    return out


def write(folder: str, thread_id: str, secrets: Secrets, *, beside_old: bool = False) -> bool:
    """Keep ``secrets`` as the thread's, durably; whether they differ from
    what was kept. No values at all: the file is removed. ``beside_old``:
    the values kept already that ``secrets`` do not replace stay too (before
    the commit of the record naming ``secrets``: if that commit fails, the
    record as it was still finds its values); ``write`` again without it,
    after the commit, to drop them.

    Raises:
        OSError: the folder cannot be used (nothing is written then).
    """
    try:
        old: Secrets | None = read(folder, thread_id)
    except OSError:
        old = None  # a damaged file (or a symlink in its place) is replaced; a folder that is one is refused below
    if beside_old and old:
        target = _beside(old, secrets)
        if target == old:
            return old != secrets
        _replace(folder, thread_id, target)
        return True
    if old == secrets:
        return False
    _replace(folder, thread_id, secrets)
    return True


def _replace(folder: str, thread_id: str, secrets: Secrets) -> None:
    """The thread's file holding ``secrets`` (none: no file), atomically."""
    if not secrets:
        remove(folder, thread_id)
        return
    _checked(folder, create=True)
    # Never through a symlink: a new file, made here, that only the user reads.
    replace_durably(folder, os.path.basename(path_of(folder, thread_id)), msgspec.json.encode(_File(servers=secrets)))


def keep(folder: str, thread_id: str, secrets: Secrets, *, beside_old: bool = False) -> bool:
    """``write``, for a command: a folder or file agentd will not use
    refuses the command (``invalid_state``, saying why), as a client's
    mistake would, rather than failing the thread."""
    try:
        return write(folder, thread_id, secrets, beside_old=beside_old)
    except OSError as exc:
        raise _refusal(exc) from None


def prune(folder: str, thread_id: str, secrets: Secrets) -> None:
    """After the commit of the record naming ``secrets``: the file holds
    them only (what ``keep(beside_old=True)`` kept beside them goes). One that
    cannot be written now keeps the old values too, said in the log: the
    record finds its own either way."""
    try:
        write(folder, thread_id, secrets)
    except OSError as exc:
        log.warning("thread %s: its MCP servers' secrets file keeps values it no longer needs: %s", thread_id, exc)


def keep_copy(folder: str, source_id: str, target_id: str) -> None:
    """``copy``, for a command (a fork): refused as ``keep`` is."""
    try:
        copy(folder, source_id, target_id)
    except OSError as exc:
        raise _refusal(exc) from None


def _refusal(exc: OSError) -> InvalidState:
    return InvalidState(f"the secrets of the thread's MCP servers cannot be kept: {exc.strerror or exc}"
                        + (f" ({exc.filename})" if exc.filename else ""), field="mcpServers")


def remove(folder: str, thread_id: str) -> None:
    """Remove the thread's file (there or not)."""
    try:
        if not _checked(folder, create=False):
            return
        os.unlink(path_of(folder, thread_id))
    except FileNotFoundError:
        return
    _sync_folder(folder)


def copy(folder: str, source_id: str, target_id: str) -> None:
    """Give thread ``target_id`` the values thread ``source_id`` keeps (a fork's)."""
    write(folder, target_id, read(folder, source_id))


def _sync_folder(folder: str) -> None:
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# -- records stored before the values left them ------------------------------------------------


class _OldServer(msgspec.Struct, kw_only=True, rename="camel"):
    name: str
    env: dict[str, str] = {}
    headers: dict[str, str] = {}


class _OldThread(msgspec.Struct, kw_only=True, rename="camel"):
    id: str
    mcp_servers: list[_OldServer] | None = None


_old = msgspec.msgpack.Decoder(_OldThread)


def old_values(raw_threads: list[bytes]) -> dict[str, Secrets]:
    """The values that stored threads (``version byte + msgpack`` as the
    store keeps them) still hold in their records, by thread id: records
    written before this module kept them as ``env`` / ``headers`` maps."""
    found: dict[str, Secrets] = {}
    for raw in raw_threads:
        try:
            thread = _old.decode(raw[1:])
        except msgspec.DecodeError:
            continue  # a corrupt record is reported where it is read
        kept: Secrets = {}
        for server in thread.mcp_servers or []:
            entry = {key: values for key, values in (("env", server.env), ("headers", server.headers)) if values}
            if entry:
                kept[server.name] = entry
        if kept:
            found[thread.id] = kept
    return found


def stored_threads(store: Store) -> list[bytes]:
    """Every thread record as stored (its version byte and msgpack)."""
    with store.env.begin(db=store.dbs["threads"]) as txn:
        return [bytes(value) for _key, value in txn.cursor()]


#: the store's ``meta`` key set once no record, event or receipt holds a value of an MCP server
#: (this agentd never writes one: the store is not read for them again)
MIGRATED = b"mcp_secrets.migrated"


def migrated(store: Store) -> bool:
    """Whether ``migrate`` finished in this store once."""
    with store.env.begin(db=store.dbs["meta"]) as txn:
        return txn.get(MIGRATED) is not None


def _redact(thread: Any) -> bool:
    """Turn an old thread mapping's servers into names only; whether it held any."""
    changed = False
    for server in (thread.get("mcpServers") or []) if isinstance(thread, dict) else []:
        if isinstance(server, dict) and ("env" in server or "headers" in server):
            server["envNames"] = list(server.pop("env", None) or {})
            server["headerNames"] = list(server.pop("headers", None) or {})
            changed = True
    return changed


def redact_log(store: Store) -> int:
    """Once per store: the events (``thread.created`` / ``thread.updated``)
    and ``thread.update`` receipts logged before this module, with their
    threads' servers as names only (they carried the values); how many were
    rewritten; then the store is marked ``MIGRATED``."""
    rewritten = 0
    with store.env.begin(write=True) as txn:
        for kind, part in (("events", "payload"), ("receipts", "result")):
            found = []
            for key, value in txn.cursor(db=store.dbs[kind]):
                if b"mcpServers" not in value:  # cheap: most never named one
                    continue
                try:
                    record = decode_record(kind, value)
                except RecordDecodeError:
                    continue  # reported where it is read
                body = dict(getattr(record, part))
                thread = body.get("thread")
                thread = msgspec.to_builtins(thread) if isinstance(thread, dict) else thread
                if _redact(thread):
                    body["thread"] = thread
                    found.append((bytes(key), encode_record(kind, msgspec.structs.replace(record, **{part: body}))))
            for key, value in found:
                txn.put(key, value, db=store.dbs[kind])
            rewritten += len(found)
        txn.put(MIGRATED, b"1", db=store.dbs["meta"])
    return rewritten


async def migrate(store: Store, folder: str) -> list[str]:
    """Move the values records stored before this module still hold into
    their threads' secrets files, then store each such record with names
    only (run at the daemon's start, before any client can read a record),
    and the events and receipts that carried them (``redact_log``). Done
    once per store: it is marked when nothing is left. A thread whose file
    cannot be written keeps its old record (and its values, unread:
    decoding ignores them), is said in the log and tried again at the next
    start. The ids of the threads moved."""
    if await trio.to_thread.run_sync(migrated, store):
        return []
    found = old_values(await trio.to_thread.run_sync(stored_threads, store))
    moved = []
    for thread_id, kept in found.items():
        try:
            thread = store.thread(thread_id)
        except AgentdError as exc:  # unreadable as a record today: reported where it is read
            log.warning("thread %s: the values of its MCP servers stay in its record: %s", thread_id, exc)
            continue
        if thread is None:  # pragma: no cover - read just now
            continue
        try:
            await trio.to_thread.run_sync(
                lambda: write(folder, thread_id, {**read(folder, thread_id), **kept}))  # noqa: B023 - awaited here
        except OSError as exc:
            log.warning("thread %s: the values of its MCP servers stay in its record: %s", thread_id, exc)
            continue
        servers = [struct_copy(s, env_names=list((kept.get(s.name) or {}).get("env") or s.env_names),
                               header_names=list((kept.get(s.name) or {}).get("headers") or s.header_names))
                   for s in thread.mcp_servers or []]
        batch = WriteBatch()
        batch.put(struct_copy(thread, mcp_servers=servers or None))
        await store.commit(batch)
        moved.append(thread_id)
    if moved:
        log.info("moved the MCP server secrets of %d thread(s) out of their records: %s", len(moved), ", ".join(moved))
    if len(moved) < len(found):
        return moved  # not marked: the rest is tried again at the next start
    redacted = await trio.to_thread.run_sync(redact_log, store)
    if redacted:
        log.info("took the MCP server secrets out of %d logged event(s) and receipt(s)", redacted)
    return moved
