"""Checkpoint ref names: ``refs/agentd/<thread>/<scope>/<n>``."""

from __future__ import annotations

import re

from .errors import CheckpointError

PREFIX = "refs/agentd/"
_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_OID = re.compile(r"^[0-9a-f]{4,64}$")
#: git's all-zero id: ``update-ref REF NEW ZERO`` creates REF only if it does not exist
ZERO_OID = "0" * 40


def _check_component(part: str) -> None:
    if not _COMPONENT.match(part) or ".." in part or part.endswith((".lock", ".")):
        raise CheckpointError(f"{part!r} cannot be part of a checkpoint ref (letters, digits, _ . - only)",
                              reason="bad_ref")


def checkpoint_ref(thread_id: str, scope: str, n: int | str) -> str:
    """The ref of checkpoint ``n`` of ``scope`` (``root``, a node id,
    ``pre_rollback``, ...) in thread ``thread_id``.

    Raises:
        CheckpointError: (``bad_ref``) a part is not a plain ref component.
    """
    parts = [thread_id, scope, str(n)]
    for part in parts:
        _check_component(part)
    return PREFIX + "/".join(parts)


def check_ref(ref: str) -> str:
    """``ref`` if it is a valid ref under ``refs/agentd/``.

    Raises:
        CheckpointError: (``bad_ref``) it is not.
    """
    if not ref.startswith(PREFIX) or len(ref) == len(PREFIX):
        raise CheckpointError(f"{ref!r} is not a checkpoint ref (refs/agentd/...)", reason="bad_ref")
    for part in ref[len(PREFIX):].split("/"):
        _check_component(part)
    return ref


def check_commitish(value: str) -> str:
    """``value`` if it is a (possibly abbreviated) commit id or a checkpoint
    ref, so it can never be read by git as an option.

    Raises:
        CheckpointError: (``bad_ref``) it is neither.
    """
    return value if _OID.match(value) else check_ref(value)
