"""Probes of checkpoint restores against a hostile workspace (the hostile-round
issue, items 2, 3, 4, 7 and 12), each against a real daemon on a temp data
dir, local only, bounded in time and count. Each prints its figures; the
exit code is 1 if a probe saw what must never happen.

    python scripts/probe_restore.py [symlink|modes|names|sigkill|nested|all] [--seed N] [--files N]

- ``symlink`` (item 3): a rollback of ``--files`` files (half written, half
  deleted, in 10 folders) while another thread keeps swapping those folders
  for symlinks to a folder outside the workspace that holds the same names:
  outside files overwritten, deleted, added; folders reported.
- ``modes`` (item 4): files and folders with random private modes, deleted,
  then restored: modes that differ, files more readable than they were.
- ``names`` (item 2): files whose names are not UTF-8 (plain, over the size
  cap, a nested repository): runs, diff, rollback and undo; the daemon stays up.
- ``sigkill`` (item 7): a ``checkpoint.restore`` and a ``rollback.toRun`` of
  ``--files`` files, the daemon SIGKILLed after a seeded number of deletes;
  after the restart: the safety checkpoint listed, the cut-off event, and
  restoring it gives back the files byte for byte.
- ``nested`` (item 12): a folder the agent made a nested repository: what
  restore_incomplete says, and ``include``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError

TERMINAL = ("completed", "failed", "interrupted", "cancelled", "rolled_back")
#: every probe ends within this many seconds (a daemon that hangs is a finding too)
PROBE_TIMEOUT = 600


def script(*steps: dict[str, Any]) -> str:
    return "@script\n" + json.dumps(list(steps))


async def send_and_wait(client: Client, thread_id: str, text: str) -> dict[str, Any]:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text)
    with trio.fail_after(120):
        async with client.subscribe(thread_id=thread_id) as events:
            async for event in events:
                run = event["payload"].get("run")
                if event.get("runId") == sent["runId"] and run and run["status"] in TERMINAL:
                    return run
    raise RuntimeError("event stream ended")


def tree(root: Path) -> dict[bytes, bytes]:
    out = {}
    base = os.fsencode(root)
    for folder, _dirs, files in os.walk(base):
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                with open(full, "rb") as f:
                    out[os.path.relpath(full, base)] = f.read()
    return out


class Probe:
    """One probe's temp dir and daemon."""

    def __init__(self, root: Path, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.ws = self.dir / "ws"
        self.ws.mkdir()
        self.data = self.dir / "data"
        self.sock = root / f"{name}.sock"
        self.failures: list[str] = []

    async def start(self, **kwargs: Any):
        return await start_daemon(self.data, self.sock, **kwargs)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)


# -- item 3 -------------------------------------------------------------------------------------


class Swapper(threading.Thread):
    """Once the restore has begun (its first delete, ``first`` gone), keeps
    swapping ``ws/dK`` for a symlink to ``outside/dK`` and back (mostly a
    symlink) until stopped; counts the swaps."""

    def __init__(self, ws: Path, outside: Path, folders: list[str], seed: int, first: Path) -> None:
        super().__init__(daemon=True)
        self.first = first
        self.ws, self.outside, self.folders = ws, outside, folders
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.swaps = 0

    def run(self) -> None:
        while os.path.lexists(self.first) and not self.stop.is_set():
            time.sleep(0.0005)  # another process's progress: polled
        while not self.stop.is_set():
            name = self.rng.choice(self.folders)
            real, moved = self.ws / name, self.ws / f"{name}.real"
            try:
                os.rename(real, moved)
                os.symlink(self.outside / name, real)
                self.swaps += 1
                time.sleep(self.rng.uniform(0, 0.002))
                os.unlink(real)
                os.rename(moved, real)
            except OSError:
                pass

    def finish(self) -> None:
        self.stop.set()
        self.join()
        for name in self.folders:  # leave every folder real again
            real, moved = self.ws / name, self.ws / f"{name}.real"
            if moved.exists():
                if real.is_symlink():
                    real.unlink()
                if real.exists():  # a folder the restore made while the real one was away: keep both
                    os.rename(moved, self.ws / f"{name}.kept")
                else:
                    os.rename(moved, real)


async def probe_symlink(root: Path, args: argparse.Namespace) -> list[str]:
    probe = Probe(root, "symlink")
    ws, outside = probe.ws, probe.dir / "outside"
    folders = [f"d{k}" for k in range(10)]
    per = max(1, args.files // len(folders))
    for name in folders:
        (ws / name).mkdir()
        (outside / name).mkdir(parents=True)
        for i in range(per):
            (ws / name / f"w{i}.txt").write_text(f"checkpoint {name} {i}\n")
            (outside / name / f"w{i}.txt").write_text(f"OUTSIDE {name} w{i}\n")
            (outside / name / f"x{i}.txt").write_text(f"OUTSIDE {name} x{i}\n")
    outside_before = tree(outside)
    daemon = await probe.start()
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            await send_and_wait(client, thread_id, script({"say": "run 1"}))
            for name in folders:  # what the rollback must undo: every w written, every x deleted
                for i in range(per):
                    (ws / name / f"w{i}.txt").write_text(f"changed {name} {i}\n")
                    (ws / name / f"x{i}.txt").write_text(f"added later {name} {i}\n")
            await send_and_wait(client, thread_id, script({"say": "run 2"}))
            swapper = Swapper(ws, outside, folders, args.seed, ws / "d0" / "x0.txt")
            swapper.start()
            outcome, reported = "complete", 0
            try:
                answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
                restored = len(answer["restoredFiles"])
            except AgentdError as exc:
                outcome = exc.kind
                restored = len(exc.data.get("restored", []))
                reported = sum(1 for n in exc.data.get("notRestored", []) if n["reason"] == "parent_not_directory")
            finally:
                swapper.finish()
            alive = (await client.call("daemon.status"))["pid"] == daemon.pid
    finally:
        await daemon.terminate()
    after = tree(outside)
    writes = [k for k in outside_before if os.path.basename(k).startswith(b"w")]
    deletes = [k for k in outside_before if os.path.basename(k).startswith(b"x")]
    overwritten = sum(1 for k in writes if after.get(k) not in (None, outside_before[k]))
    deleted = sum(1 for k in outside_before if k not in after)
    deleted_x = sum(1 for k in deletes if k not in after)
    changed = sum(1 for k, v in outside_before.items() if after.get(k) not in (None, v))
    added = sum(1 for k in after if k not in outside_before)
    leftovers = sum(1 for k in (*tree(ws), *after) if b".agentd-tmp-" in k)
    print(f"item 3 (symlink swap, {swapper.swaps} folder swaps during the rollback): {len(writes)} outside files "
          f"named as files it writes: {overwritten} overwritten; {len(deletes)} named as files it deletes: "
          f"{deleted_x} deleted ({deleted} outside files deleted in all, {changed} changed, {added} added); "
          f"rollback {outcome}: {restored} paths restored, symlinked folders reported: {reported} paths "
          f"parent_not_directory; {leftovers} temp files left; daemon alive: {alive}")
    probe.check(changed == deleted == added == 0, "files outside the workspace were changed")
    probe.check(alive, "the daemon died")
    return probe.failures


# -- item 4 -------------------------------------------------------------------------------------


FILE_MODES = (0o600, 0o640, 0o644, 0o400, 0o700, 0o750, 0o755)
FOLDER_MODES = (0o700, 0o750, 0o755)


async def probe_modes(root: Path, args: argparse.Namespace) -> list[str]:
    probe = Probe(root, "modes")
    rng = random.Random(args.seed)
    ws = probe.ws
    wanted: dict[str, int] = {}
    folder_modes: dict[str, int] = {}
    for k in range(10):
        folder = f"p{k}"
        (ws / folder).mkdir()
        folder_modes[folder] = rng.choice(FOLDER_MODES)
        for i in range(20):
            rel = f"{folder}/f{i}"
            (ws / rel).write_text(f"{rel}\n")
            wanted[rel] = rng.choice(FILE_MODES)
            os.chmod(ws / rel, wanted[rel])
        os.chmod(ws / folder, folder_modes[folder])
    narrow = sorted(rng.sample(sorted(r for r, m in wanted.items() if m & 0o044), 10))
    daemon = await probe.start()
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script({"say": "run 1"}))
            for folder in folder_modes:  # the person deletes most, and narrows and edits a few
                for rel in [r for r in wanted if r.startswith(folder + "/")]:
                    if rel in narrow:
                        (ws / rel).write_text("edited\n")
                        os.chmod(ws / rel, 0o600)
                    else:
                        os.chmod(ws / folder, 0o700)
                        (ws / rel).unlink()
                if not any((ws / folder).iterdir()):
                    (ws / folder).rmdir()
            answer = await client.call("checkpoint.restore", checkpointId=run1["checkpointId"])
    finally:
        await daemon.terminate()
    wrong = sum(1 for r, m in wanted.items() if r not in narrow and stat.S_IMODE(os.lstat(ws / r).st_mode) != m)
    wider = sum(1 for r in narrow if stat.S_IMODE(os.lstat(ws / r).st_mode) & ~0o700)
    private = [r for r, m in wanted.items() if not m & 0o044 and r not in narrow]
    exposed = sum(1 for r in private if stat.S_IMODE(os.lstat(ws / r).st_mode) & 0o044)
    # a folder the person kept (narrowed to 0700) stays at most that; a removed one comes back as recorded
    kept = {r.split("/")[0] for r in narrow}
    wrong_folders = sum(1 for f, m in folder_modes.items()
                        if stat.S_IMODE(os.lstat(ws / f).st_mode) != (m & 0o700 if f in kept else m))
    print(f"item 4 (modes): {len(wanted) - len(narrow)} deleted files restored (complete: {answer['complete']}): "
          f"{wrong} with another mode than recorded, {exposed} of {len(private)} private ones readable by others; "
          f"{wrong_folders} of {len(folder_modes)} folders with another mode; {wider} of {len(narrow)} narrowed "
          f"files widened")
    probe.check(wrong == exposed == wider == wrong_folders == 0, "a mode was not restored or was widened")
    return probe.failures


# -- item 2 -------------------------------------------------------------------------------------


def _utf8(name: bytes) -> bool:
    try:
        name.decode()
    except UnicodeDecodeError:
        return False
    return True


async def probe_names(root: Path, args: argparse.Namespace) -> list[str]:
    probe = Probe(root, "names")
    rng = random.Random(args.seed)
    config = probe.dir / "config.toml"
    config.write_text("[checkpoints]\nmax_file_bytes = 1000\n")
    raw_ws = os.fsencode(probe.ws)
    candidates = {b"n" + bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 4))) + b".txt"
                  for _ in range(60)}
    names = sorted(n for n in candidates if not _utf8(n))[:40]
    daemon = await probe.start(config=config)
    runs_ok = diff_ok = rollback_ok = undo_ok = 0
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(probe.ws)))["threadId"]
            await send_and_wait(client, thread_id, script({"say": "run 1"}))
            for name in names:
                with open(os.path.join(raw_ws, name), "wb") as f:
                    f.write(b"content of " + name)
            with open(os.path.join(raw_ws, b"big\xfe.bin"), "wb") as f:
                f.write(b"x" * 5000)
            subprocess.run([b"git", b"init", b"-q", os.path.join(raw_ws, b"nest\xfd")], check=True,
                           capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(probe.dir)})
            before = tree(probe.ws)
            for n in range(5):
                run = await send_and_wait(client, thread_id, script({"say": f"run {n + 2}"}))
                runs_ok += run["status"] == "completed"
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            run2 = next(c for c in listed if c["kind"] == "run" and c["ordinal"] == 2)
            diff = await client.call("checkpoint.diff", checkpointId=run2["id"])
            got = {base64.b64decode(f["pathBytes"]) for f in diff["files"] if f["pathBytes"]}
            diff_ok = len(got & set(names))
            answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
            rollback_ok = sum(1 for name in names if not os.path.lexists(os.path.join(raw_ws, name)))
            undo = await client.call("checkpoint.restore", checkpointId=answer["safetyCheckpointId"])
            after = tree(probe.ws)
            undo_ok = sum(1 for name in names if after.get(name) == before.get(name))
            alive = (await client.call("daemon.status"))["pid"] == daemon.pid and undo["complete"]
    finally:
        code = await daemon.terminate()
    print(f"item 2 (names): {len(names)} files with names that are not UTF-8, an over-cap one and a nested "
          f"repository: {runs_ok} of 5 runs completed, {diff_ok} of {len(names)} in the diff with their bytes, "
          f"{rollback_ok} removed by the rollback, {undo_ok} back byte for byte under their own names after the "
          f"undo; daemon up and exited {code}")
    probe.check(runs_ok == 5 and diff_ok == rollback_ok == undo_ok == len(names) and alive and code == 0,
                "names that are not UTF-8 broke something")
    return probe.failures


# -- item 7 -------------------------------------------------------------------------------------


def stalling_git(probe: Probe) -> tuple[dict[str, str], Path, Path]:
    """A git wrapper whose ``cat-file --batch`` (a restore's writes) waits while a flag exists."""
    flag, wrapper = probe.dir / "stall.flag", probe.dir / "git-wrapper"
    mark = probe.dir / "stall.pid"
    real = shutil.which("git")
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{flag}" ]; then case " $* " in *" cat-file --batch "*) echo $$ > "{mark}.tmp"; '
        f'mv "{mark}.tmp" "{mark}"; exec sleep 60;; esac; fi\n'
        f'exec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "AGENTD_CHECKPOINT_GIT": str(wrapper)}, flag, mark


async def probe_sigkill(root: Path, args: argparse.Namespace) -> list[str]:
    failures: list[str] = []
    rng = random.Random(args.seed)
    for method in ("checkpoint.restore", "rollback.toRun"):
        probe = Probe(root, f"sigkill-{method}")
        env, flag, mark = stalling_git(probe)
        ws = probe.ws
        count = args.files
        for i in range(count):
            (ws / f"m{i % 50}").mkdir(exist_ok=True)
            (ws / f"m{i % 50}" / f"f{i}.txt").write_text(f"one {i}\n")
        daemon = await probe.start(env=env)
        killed_at = rng.choice(("while deleting", "before writing"))
        try:
            async with Client.connect(daemon.socket) as client:
                thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
                run1 = await send_and_wait(client, thread_id, script({"say": "run 1"}))
                for i in range(count):
                    (ws / f"m{i % 50}" / f"f{i}.txt").write_text(f"two {i}\n")
                    (ws / f"m{i % 50}" / f"g{i}.txt").write_text(f"added {i}\n")
                await send_and_wait(client, thread_id, script({"say": "run 2"}))
                before = tree(ws)
                started = time.monotonic()
                flag.touch()
                async with trio.open_nursery() as nursery:
                    async def restore() -> None:
                        try:
                            if method == "checkpoint.restore":
                                await client.call(method, checkpointId=run1["checkpointId"])
                            else:
                                await client.call(method, threadId=thread_id, targetOrdinal=1)
                        except Exception:  # noqa: BLE001 - killed under it
                            pass
                    nursery.start_soon(restore)
                    with trio.fail_after(120):
                        # "while deleting": once a seeded one of the files it deletes is gone
                        pick = rng.randrange(count)
                        sample = ws / f"m{pick % 50}" / f"g{pick}.txt"
                        while not mark.exists() and (killed_at != "while deleting" or sample.exists()):
                            await trio.sleep(0.001)  # an external process's progress: polled
                    killed = time.monotonic() - started
                    await daemon.kill()
                    nursery.cancel_scope.cancel()
        finally:
            flag.unlink(missing_ok=True)
            if mark.exists():
                pid = int(mark.read_text())
                try:
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                        os.kill(pid, 9)
                except (FileNotFoundError, ProcessLookupError):
                    pass
            await daemon.terminate()
        after_kill = tree(ws)  # once: per path it would read the whole tree again (quadratic)
        gone = sum(1 for k in before if k not in after_kill)
        restarted = time.monotonic()
        daemon = await probe.start(timeout=120)
        try:
            async with Client.connect(daemon.socket) as client:
                listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
                safety = [c for c in listed if c["kind"] == "pre_rollback"]
                kind = "checkpoint.restore_interrupted" if method == "checkpoint.restore" else "thread.rollback_interrupted"
                last = (await client.call("daemon.status"))["lastSeq"]
                event = None
                async with client.subscribe() as events:  # every thread's: the last seq may be another's
                    async for e in events:
                        if e["type"] == kind and e.get("threadId") == thread_id:
                            event = e
                        if e["seq"] >= last:
                            break
                undo = None
                if safety:
                    undo = await client.call("checkpoint.restore", checkpointId=safety[0]["id"])
                back = tree(ws) == before
        finally:
            await daemon.terminate()
        named = bool(event and safety and event["payload"].get("safetyCheckpointId") == safety[0]["id"])
        print(f"item 7 (SIGKILL, {method}, {count} files changed, killed {killed_at}): {gone} of {len(before)} "
              f"paths already deleted when killed; after the restart: safety checkpoint listed: {bool(safety)}, "
              f"{kind} naming it: {named}, restoring it: complete {bool(undo and undo['complete'])}, "
              f"workspace byte for byte as before: {back} (killed {killed:.1f} s into the restore; restart and "
              f"undo {time.monotonic() - restarted:.1f} s)")
        # Killed before the safety checkpoint was recorded, no file may have been touched yet.
        untouched = bool(event) and not safety and gone == 0 and event["payload"].get("safetyCheckpointId") is None
        probe.check(back and ((bool(safety) and named) or untouched), f"{method}: the way back was lost")
        failures += probe.failures
    return failures


# -- item 12 ------------------------------------------------------------------------------------


async def probe_nested(root: Path, args: argparse.Namespace) -> list[str]:
    probe = Probe(root, "nested")
    daemon = await probe.start()
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(probe.ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script(
                *({"write": {"path": f"sub/f{i}.txt", "content": f"{i}\n"}} for i in range(10)),
                {"write": {"path": "top.txt", "content": "1\n"}}))
            await send_and_wait(client, thread_id, script(
                {"write": {"path": "sub/.git", "content": "gitdir: nowhere\n"}},
                *({"delete": {"path": f"sub/f{i}.txt"}} for i in range(5)), {"write": {"path": "top.txt", "content": "2\n"}}))
            try:
                await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
                message, data = "(no error)", {}
            except AgentdError as exc:
                message, data = str(exc), exc.data
            included = await client.call("checkpoint.restore", checkpointId=run1["checkpointId"], include=["sub"])
    finally:
        await daemon.terminate()
    truthful = "None" not in message and "nothing else was changed" not in message and \
        f"put {len(data.get('restored', []))} of" in message and str(data.get("safetyCheckpointId")) in message
    print(f"item 12 (nested repository): rollback: {len(data.get('restored', []))} restored, "
          f"{len(data.get('notRestored', []))} not ({', '.join(sorted({n['reason'] for n in data.get('notRestored', [])}))}); "
          f"message truthful: {truthful}: {message!r}; with include=[sub]: {len(included['restored'])} restored, "
          f"complete {included['complete']}; sub/.git kept: {(probe.ws / 'sub' / '.git').exists()}")
    probe.check(truthful and included["complete"] and (probe.ws / "sub" / ".git").exists(), "item 12")
    return probe.failures


PROBES = {"symlink": probe_symlink, "modes": probe_modes, "names": probe_names, "sigkill": probe_sigkill,
          "nested": probe_nested}


async def main_async(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="probe-restore-"))
    failures: list[str] = []
    try:
        for name in (PROBES if args.probe == "all" else [args.probe]):
            with trio.fail_after(PROBE_TIMEOUT):
                failures += await PROBES[name](root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probe", nargs="?", default="all", choices=[*PROBES, "all"])
    parser.add_argument("--seed", type=int, default=7, help="seeds the swaps, modes, names and kill points (default 7)")
    parser.add_argument("--files", type=int, default=3000, help="files a symlink or SIGKILL probe restores (default 3000)")
    args = parser.parse_args()
    print(f"seed {args.seed}")
    sys.exit(trio.run(main_async, args))


if __name__ == "__main__":
    main()
