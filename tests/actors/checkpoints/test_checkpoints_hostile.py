"""Checkpoint restores against a hostile workspace (the hostile-round issue,
items 2, 3, 4, 7 and 12; SPEC F13, F14, F12).

- item 3: a folder swapped for a symlink between a restore's check and its
  write or delete (forced at a hook point, against the engine) is refused and
  reported; nothing outside the workspace is written or removed;
- item 4: a rollback brings private files and folders back with their own
  modes, never wider;
- item 2: file names that are not UTF-8 (skipped, nested, or plain) go
  through capture, diff, rollback and undo on a real daemon, escaped with
  their bytes beside them; the daemon stays up;
- item 7: a daemon SIGKILLed while a ``checkpoint.restore`` or a
  ``rollback.toRun`` puts files back lists the safety checkpoint after the
  restart, says the restore was cut and how to go back, and ``agentd restore``
  of it brings the files back;
- item 12: a folder an agent made a nested repository is reported, the
  ``restore_incomplete`` message says truthfully what was and was not put
  back, and ``checkpoint.restore {include}`` restores it explicitly.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref
from agentd.actors.checkpoints import paths as paths_module
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import RestoreIncomplete
from tests.cli_helpers import run as run_cli
from tests.helpers import script, send_and_wait, stored_events
from tests.actors.checkpoints.test_checkpoints_daemon import StalledGit

# -- helpers --------------------------------------------------------------------------------------


def tree(root: Path) -> dict[bytes, bytes]:
    """Every file under ``root`` (bytes names) and its content."""
    out = {}
    base = os.fsencode(root)
    for folder, _dirs, files in os.walk(base):
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                with open(full, "rb") as f:
                    out[os.path.relpath(full, base)] = f.read()
    return out


def mode(path: Path | bytes) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def CatFileStall(tmp_path: Path) -> StalledGit:
    """A git wrapper that, once ``stall()`` was called, stops a restore
    between its deletes and its writes (at its ``cat-file --batch``)."""
    return StalledGit(tmp_path, at="cat-file --batch")


# -- item 3: a folder swapped for a symlink between check and write ------------------------------


def swap_at_check(monkeypatch, ws: Path, folder: str, outside: Path) -> list[str]:
    """When the restore first checks a path under ``folder`` (``PathGuard.of``
    called by its delete or write step),
    replace ``folder`` by a symlink to ``outside`` — after the check, before
    the write or delete that follows it. Returns a list that names the folder
    once swapped."""
    real = paths_module.PathGuard.of
    swapped: list[str] = []

    def of(self, path: bytes):
        status = real(self, path)
        checking = sys._getframe(1).f_code.co_name in ("plan_writes", "delete_paths")  # the restore's, not a capture's
        if checking and not swapped and path.startswith(folder.encode() + b"/"):
            os.rename(ws / folder, ws / f"{folder}.moved")
            os.symlink(outside, ws / folder)
            swapped.append(folder)
        return status

    monkeypatch.setattr(paths_module.PathGuard, "of", of)
    return swapped


@pytest.mark.parametrize("step", ["write", "delete"])
async def test_a_folder_swapped_for_a_symlink_mid_restore_is_refused_and_nothing_outside_changes(
        tmp_path, monkeypatch, step):
    """Item 3 (F14): the restore checked ``d/`` and then ``d`` became a symlink
    to a folder outside the workspace: every path under it is reported
    ``parent_not_directory`` and the outside folder is exactly as it was (not
    one file overwritten, deleted or added)."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    names = [f"f{i}.txt" for i in range(20)]
    for name in names:
        (outside / name).write_text(f"outside {name}\n")
    engine = CheckpointEngine(tmp_path / "checkpoints", refused=())
    if step == "write":  # the target has d/*, the workspace has other bytes there
        for name in names:
            (ws / "d" / name).write_text(f"checkpoint {name}\n")
        target = await engine.capture(ws, checkpoint_ref("t", "root", 0))
        for name in names:
            (ws / "d" / name).write_text(f"changed {name}\n")
    else:  # the target lacks d/*: the restore deletes them
        (ws / "keep.txt").write_text("keep\n")
        target = await engine.capture(ws, checkpoint_ref("t", "root", 0))
        for name in names:
            (ws / "d" / name).write_text(f"added later {name}\n")
    before = tree(outside)
    swapped = swap_at_check(monkeypatch, ws, "d", outside)

    result = await engine.restore(ws, target.commit, safety_ref=checkpoint_ref("t", "pre_rollback", 1))

    assert swapped == ["d"]
    assert tree(outside) == before, "files outside the workspace were changed"
    assert not result.complete
    assert {(n.path, n.reason) for n in result.not_restored} == {(f"d/{n}", "parent_not_directory") for n in names}
    assert all("symlink" in n.detail for n in result.not_restored)
    assert not any(p.startswith("d/") for p in result.written + result.deleted)
    # the folder that was moved away is untouched too, and the safety checkpoint has it all
    assert sorted(p.name for p in (ws / "d.moved").iterdir()) == sorted(names)


# -- item 4: modes ----------------------------------------------------------------------------------


async def test_a_rollback_brings_private_files_and_folders_back_with_their_modes(client, tmp_path):
    """Item 4 (F14): a 0600 secret.env and a 0700 folder with a 0600 key that
    the agent deleted come back 0600/0700/0600 (not 0644/0755); a file that
    exists keeps its narrower mode; nothing is ever wider than recorded."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "secret.env").write_text("TOKEN=1\n")
    (ws / "secret.env").chmod(0o600)
    (ws / "private").mkdir(mode=0o700)
    (ws / "private").chmod(0o700)
    (ws / "private" / "key").write_text("key\n")
    (ws / "private" / "key").chmod(0o600)
    (ws / "tool.sh").write_text("#!/bin/sh\n")
    (ws / "tool.sh").chmod(0o750)
    (ws / "shared.txt").write_text("v1\n")
    (ws / "shared.txt").chmod(0o644)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run1 = await send_and_wait(client, thread_id, script({"write": {"path": "one.txt", "content": "1\n"}}))
    run2 = await send_and_wait(client, thread_id, script(
        {"delete": {"path": "secret.env"}}, {"delete": {"path": "private/key"}}, {"delete": {"path": "tool.sh"}},
        {"write": {"path": "shared.txt", "content": "v2\n"}}))
    assert (run1["status"], run2["status"]) == ("completed", "completed")
    os.rmdir(ws / "private")
    (ws / "shared.txt").chmod(0o600)  # narrowed by the person since: stays so

    answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)

    assert {"secret.env", "private/key", "tool.sh", "shared.txt"} <= set(answer["restoredFiles"])
    assert (ws / "secret.env").read_text() == "TOKEN=1\n"
    assert mode(ws / "secret.env") == 0o600
    assert mode(ws / "private") == 0o700
    assert mode(ws / "private" / "key") == 0o600
    assert mode(ws / "tool.sh") == 0o750
    assert (ws / "shared.txt").read_text() == "v1\n" and mode(ws / "shared.txt") == 0o600


# -- item 2: names that are not UTF-8 -------------------------------------------------------------


CONFIG_SMALL_CAP = """
[checkpoints]
max_file_bytes = 1000
"""


async def test_names_that_are_not_utf8_go_through_capture_diff_rollback_and_undo(tmp_path, short_dir):
    """Item 2 (F13/F14): a plain file, an over-cap file and a nested
    repository whose names are not UTF-8: runs start and end, checkpoints are
    captured with the names escaped (``pathBytes`` beside them), the diff
    answers, rollback.toRun removes the file and records it, its safety
    checkpoint brings it back, and the daemon is still up."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG_SMALL_CAP)
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    ws = tmp_path / "ws"
    ws.mkdir()
    raw_ws = os.fsencode(ws)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script({"write": {"path": "one.txt", "content": "1\n"}}))
            with open(os.path.join(raw_ws, b"bad\xff.txt"), "wb") as f:
                f.write(b"not utf-8 name\n")
            with open(os.path.join(raw_ws, b"big\xfe.bin"), "wb") as f:
                f.write(b"x" * 5000)
            subprocess.run([b"git", b"init", b"-q", os.path.join(raw_ws, b"nest\xfd")], check=True,
                           env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)})
            with open(os.path.join(raw_ws, b"nest\xfd", b"inner.txt"), "wb") as f:
                f.write(b"the nested repository's own file\n")
            runs = [await send_and_wait(client, thread_id, script({"say": f"run {n}"})) for n in (2, 3, 4, 5)]
            assert [r["status"] for r in runs] == ["completed"] * 4
            run2 = runs[0]
            listed = {c["id"]: c for c in (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]}
            summary = listed[run2["checkpointId"]]["summary"]
            assert summary["skipped"] == [{"path": "big\\xfe.bin", "reason": "too_large", "size": 5000,
                                           "pathBytes": base64.b64encode(b"big\xfe.bin").decode()}]
            assert summary["nestedRepos"] == ["nest\\xfd/"]
            assert summary["pathBytes"] == {"nest\\xfd/": base64.b64encode(b"nest\xfd/").decode()}

            diff = await client.call("checkpoint.diff", checkpointId=run2["checkpointId"])
            assert [(f["path"], f["change"], f["pathBytes"]) for f in diff["files"]] == [
                ("bad\\xff.txt", "added", base64.b64encode(b"bad\xff.txt").decode())]

            answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
            assert answer["restoredFiles"] == ["bad\\xff.txt"]
            assert answer["pathBytes"] == {"bad\\xff.txt": base64.b64encode(b"bad\xff.txt").decode()}
            assert not os.path.lexists(os.path.join(raw_ws, b"bad\xff.txt"))
            assert os.path.getsize(os.path.join(raw_ws, b"big\xfe.bin")) == 5000  # over the cap: never touched
            got = await client.call("thread.get", threadId=thread_id)
            assert [r["status"] for r in got["runs"]] == ["completed"] + ["rolled_back"] * 4
            assert run1["checkpointId"] == answer["checkpointId"]

            undo = await client.call("checkpoint.restore", checkpointId=answer["safetyCheckpointId"])
            assert undo["complete"] and undo["restored"] == ["bad\\xff.txt"]
            with open(os.path.join(raw_ws, b"bad\xff.txt"), "rb") as f:
                assert f.read() == b"not utf-8 name\n"
            assert (await client.call("daemon.status"))["pid"] == daemon.pid
            after = await send_and_wait(client, thread_id, script({"say": "still here"}))
            assert after["status"] == "completed"
    finally:
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


# -- item 7: SIGKILL during a restore ------------------------------------------------------------


def files_of(ws: Path) -> dict[str, bytes]:
    return {os.fsdecode(k): v for k, v in tree(ws).items()}


@pytest.mark.parametrize("method", ["checkpoint.restore", "rollback.toRun"])
async def test_sigkill_during_a_restore_keeps_the_way_back_listed_and_restorable(tmp_path, short_dir, method):
    """Item 7 (F12/F14): the daemon is SIGKILLed after the restore deleted
    files and before it wrote any. After the restart the safety checkpoint is
    in checkpoint.list, an event says the restore was cut off and names it,
    and ``agentd restore`` of it brings back the files as they were."""
    git = CatFileStall(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    data, sock = tmp_path / "data", short_dir / "s.sock"
    daemon = await start_daemon(data, sock, env=git.env)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script(
                *({"write": {"path": f"src/m{i}.py", "content": f"one {i}\n"}} for i in range(10))))
            run2 = await send_and_wait(client, thread_id, script(
                *({"write": {"path": f"src/m{i}.py", "content": f"two {i}\n"}} for i in range(10)),
                *({"write": {"path": f"new/n{i}.py", "content": f"new {i}\n"}} for i in range(10))))
            assert (run1["status"], run2["status"]) == ("completed", "completed")
            before = files_of(ws)
            if method == "checkpoint.restore":
                await git.kill_during(daemon, partial(client.call, method, checkpointId=run1["checkpointId"]))
            else:
                await git.kill_during(daemon, partial(client.call, method, threadId=thread_id, targetOrdinal=1))
    finally:
        git.release()
        await daemon.terminate()
    assert files_of(ws) != before  # cut part-way: the deletes were done
    assert not (ws / "new").exists()

    daemon = await start_daemon(data, sock)
    try:
        async with Client.connect(daemon.socket) as client:
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            safety = [c for c in listed if c["kind"] == "pre_rollback"]
            assert len(safety) == 1 and safety[0]["status"] == "captured"
            events = await stored_events(client, thread_id)
            kind = "checkpoint.restore_interrupted" if method == "checkpoint.restore" else "thread.rollback_interrupted"
            cut = [e for e in events if e["type"] == kind]
            assert len(cut) == 1
            payload = cut[0]["payload"]
            assert payload["safetyCheckpointId"] == safety[0]["id"]
            assert payload["checkpointId"] == run1["checkpointId"]
            assert f"agentd restore {safety[0]['id']}" in payload["message"]
            result = await run_cli(daemon, "restore", safety[0]["id"])
            assert safety[0]["id"] in result.stdout.decode() + result.stderr.decode()
            assert files_of(ws) == before
    finally:
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


# -- item 12: a folder the agent made a nested repository -------------------------------------------


async def test_a_nested_repository_the_agent_made_is_reported_truthfully_and_restorable_on_request(daemon, client,
                                                                                                  tmp_path):
    """Item 12 (F14): run 2 writes ``sub/.git``, deletes ``sub/b.txt`` and
    changes ``top.txt``. rollback.toRun 1 puts ``top.txt`` back and fails with
    a restore_incomplete that says so — 1 of 3 paths put back, which were
    not and why, the safety checkpoint that undoes it — and never says
    "None" or "nothing else was changed". checkpoint.restore with ``include:
    ["sub"]`` (``agentd restore --include sub``) then brings ``sub/b.txt``
    back; ``sub/.git`` is left alone."""
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run1 = await send_and_wait(client, thread_id, script(
        {"write": {"path": "sub/a.txt", "content": "a\n"}}, {"write": {"path": "sub/b.txt", "content": "b\n"}},
        {"write": {"path": "top.txt", "content": "top 1\n"}}))
    run2 = await send_and_wait(client, thread_id, script(
        {"write": {"path": "sub/.git", "content": "gitdir: elsewhere\n"}}, {"delete": {"path": "sub/b.txt"}},
        {"write": {"path": "top.txt", "content": "top 2\n"}}))
    assert (run1["status"], run2["status"]) == ("completed", "completed")
    listed = {c["id"]: c for c in (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]}
    assert listed[run2["checkpointId"]]["summary"]["nestedRepos"] == ["sub/"]  # reported, not silent

    with pytest.raises(RestoreIncomplete) as caught:
        await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    error = caught.value
    message = str(error)
    data = error.data
    assert data["restored"] == ["top.txt"]
    assert {(n["path"], n["reason"]) for n in data["notRestored"]} == {
        ("sub/a.txt", "nested_repository"), ("sub/b.txt", "nested_repository")}
    assert "None" not in message and "nothing else was changed" not in message
    assert "put 1 of 3 paths back" in message and "sub/b.txt (nested_repository)" in message
    assert data["safetyCheckpointId"] in message and "include" in message
    assert "no run and no agent memory was changed" in message
    assert (ws / "top.txt").read_text() == "top 1\n"
    got = await client.call("thread.get", threadId=thread_id)
    assert [r["status"] for r in got["runs"]] == ["completed", "completed"]

    cli = await run_cli(daemon, "restore", run1["checkpointId"], "--include", "sub", "--json")
    restored = json.loads(cli.stdout)
    assert restored["complete"], restored
    assert set(restored["restored"]) == {"sub/a.txt", "sub/b.txt"}
    assert (ws / "sub" / "b.txt").read_text() == "b\n"
    assert (ws / "sub" / ".git").read_text() == "gitdir: elsewhere\n"


async def test_a_chmod_alone_is_recorded_and_restored_and_a_restore_never_widens(tmp_path):
    """Item 4 (F13/F14), against the engine: a ``chmod 600`` with no content
    change is in the next checkpoint (git's own status does not show it); a
    deleted file comes back with the recorded mode, a folder too; a file that
    exists with a narrower mode keeps it; a content-unchanged file whose
    recorded mode is narrower than now is narrowed."""
    ws = tmp_path / "ws"
    (ws / "conf").mkdir(parents=True)
    for name in ("a.env", "b.env", "c.env", "d.env"):
        (ws / "conf" / name).write_text(f"{name}\n")
        (ws / "conf" / name).chmod(0o644)
    engine = CheckpointEngine(tmp_path / "checkpoints", refused=())
    first = await engine.capture(ws, checkpoint_ref("t", "root", 0))
    for name in ("a.env", "b.env", "d.env"):
        (ws / "conf" / name).chmod(0o600)
    (ws / "conf").chmod(0o700)
    private = await engine.capture(ws, checkpoint_ref("t", "root", 1), base=first.commit)
    assert not private.changed  # the same tree: only modes differ
    assert private.commit != first.commit  # …so a commit of its own records them

    (ws / "conf" / "a.env").unlink()
    (ws / "conf" / "b.env").write_text("edited\n")  # exists, 0600 now and then
    (ws / "conf" / "c.env").chmod(0o640)  # exists, narrower than the 0644 of `first`
    shutil_rmtree_keep = ws / "conf" / "d.env"
    shutil_rmtree_keep.chmod(0o644)  # content unchanged, recorded narrower: narrowed back
    result = await engine.restore(ws, private.commit, safety_ref=checkpoint_ref("t", "pre_rollback", 1))
    assert result.complete, result.not_restored
    assert mode(ws / "conf" / "a.env") == 0o600 and (ws / "conf" / "a.env").read_text() == "a.env\n"
    assert mode(ws / "conf" / "b.env") == 0o600 and (ws / "conf" / "b.env").read_text() == "b.env\n"
    assert mode(ws / "conf" / "c.env") == 0o640  # never widened to the recorded 0644
    assert mode(ws / "conf" / "d.env") == 0o600
    assert mode(ws / "conf") == 0o700

    # A fresh engine (a restarted daemon) reads the modes from the checkpoint itself.
    (ws / "conf" / "a.env").unlink()
    (ws / "conf").rmdir() if not any((ws / "conf").iterdir()) else None
    again = await CheckpointEngine(tmp_path / "checkpoints", refused=()).restore(
        ws, private.commit, safety_ref=checkpoint_ref("t", "pre_rollback", 2))
    assert again.complete and mode(ws / "conf" / "a.env") == 0o600
