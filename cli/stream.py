"""``agentd send``: send a message and follow its run until it ends.

The answer streams to stdout with the run's activity (tool calls, todo
lists, proposed plans, retries); what is said about the run itself (its id
once accepted, its place in the queue, a held queue, how it ended) goes to
stderr. Approvals and questions are asked at a terminal, or printed with the
command that answers them.

Ctrl-C interrupts the run (a queued run is cancelled) and waits for it to
end; a second Ctrl-C detaches and leaves the run to the daemon. Either way
the exit code is 130.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

import trio

from agentd.protocol.client import Client, EventStream
from agentd.protocol.errors import AgentdError
from agentd.actors.regular_files import read_regular
from agentd.protocol.wire import MAX_ATTACHMENT_BYTES, MAX_TEXT

from .common import EXIT_INTERRUPTED, EXIT_USAGE, TERMINAL_RUN, CliError, describe_error, run_with_client, say
from .render import describe_node_event, describe_request, held_line, proposed_plan_lines, request_lines, todo_lines


class AnswerPrinter:
    """Prints a run's assistant text as it streams, from live deltas and the
    durable appends alike, each character once."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.printed: dict[str, int] = {}
        self.last_message: str | None = None

    def text(self, message_id: str, offset: int, text: str) -> None:
        done = self.printed.get(message_id, 0)
        if offset + len(text) <= done or offset > done:
            return  # already shown, or a gap the durable append will fill
        if self.last_message is not None and self.last_message != message_id and message_id not in self.printed:
            self.out.write("\n")
        self.out.write(text[done - offset :])
        self.out.flush()
        self.printed[message_id] = offset + len(text)
        self.last_message = message_id

    def end_line(self) -> None:
        """End the text being streamed, before another line is printed."""
        if self.last_message is not None:
            self.out.write("\n")
            self.last_message = None


async def prompt(text: str) -> str | None:
    """Print ``text`` and read a line from the terminal (None at Ctrl-D);
    cancellable (a thread blocked in ``input()`` would hold stdin past the exit)."""
    sys.stdout.write(text)
    sys.stdout.flush()
    line = b""
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as terminal:
        while not line.endswith(b"\n"):
            chunk = await terminal.receive_some(4096)
            if not chunk:
                return None
            line += chunk
    return line.decode(errors="replace").strip()


def choose(question: dict[str, Any], reply: str) -> str | None:
    """The answer ``reply`` gives to ``question``: an option by its text
    (any case) or its number (``2``: the second), free text where the
    question takes it; None when it is not an option."""
    options = [str(o) for o in question.get("options") or []]
    if not options or reply in options:
        return reply
    folded = [o for o in options if o.casefold() == reply.casefold()]
    if len(folded) == 1:
        return folded[0]
    if reply.isdigit() and 1 <= int(reply) <= len(options):
        return options[int(reply) - 1]
    if question.get("allowOther") and reply:
        return reply
    return None


def question_prompt(question: dict[str, Any]) -> str:
    """``Which color? [1 red, 2 blue] ``: the question and its numbered options."""
    options = [str(o) for o in question.get("options") or []]
    numbered = ", ".join(f"{n} {o}" for n, o in enumerate(options, 1))
    other = ", or your own" if question.get("allowOther") else ""
    return f"{question['question']}" + (f" [{numbered}{other}]" if options else "") + " "


async def ask_person(request: dict[str, Any]) -> dict[str, Any] | None:
    """Ask at the terminal; return the params of the answer (None: the
    person pressed Ctrl-D, and answers some other way)."""
    detail = request.get("detail", {})
    if request["kind"] == "approval":
        what = detail.get("command") or detail.get("kind") or "an action"
        reply = await prompt(f"approve {what}? [y/N] ")
        if reply is None:
            return None
        return {"requestId": request["id"], "decision": "accept" if reply.lower() in ("y", "yes") else "decline"}
    answers = {}
    for question in detail.get("questions", []):
        text = question_prompt(question)
        while True:
            reply = await prompt(text)
            if reply is None:
                return None
            answer = choose(question, reply)
            if answer is not None:
                break
            count = len(question["options"])
            say(f"agentd: {reply!r} is not an option; type its number (1-{count}) or its text")
        answers[question["id"]] = answer
    return {"requestId": request["id"], "answers": answers}


class RunFollower:
    """Follows one run of a thread on the event stream and prints it."""

    def __init__(self, client: Client, thread_id: str, *, out: TextIO = sys.stdout, interactive: bool = False) -> None:
        self.client = client
        self.thread_id = thread_id
        self.out = out
        self.interactive = interactive
        self.printer = AnswerPrinter(out)
        self.run_id: str | None = None
        #: Ctrl-C presses so far
        self.presses = 0
        self._waited = False
        self._prompt: trio.CancelScope | None = None

    def line(self, *lines: str) -> None:
        self.printer.end_line()
        for line in lines:
            self.out.write(line + "\n")
        self.out.flush()

    async def accepted(self, sent: dict[str, Any], *, quiet: bool = False) -> None:
        """The daemon took the message: say which run it is and where it waits."""
        self.run_id = sent["runId"]
        held = sent.get("heldRunIds") or []
        if quiet:
            return
        detail = await self.client.call("thread.get", threadId=self.thread_id)
        runs, thread = detail["runs"], detail["thread"]
        mine = next((r for r in runs if r["id"] == self.run_id), None)
        ordinal = f"run {mine['ordinal']}" if mine else "run"
        how = f" ({sent['strategy']})" if sent.get("strategy") else ""
        say(f"{ordinal} accepted{how}: {self.run_id}")
        if held:
            say(held_line(len(held), self.thread_id))
        if mine is None or mine["status"] != "queued":
            return
        ahead = [r for r in runs if r["status"] == "queued" and r["ordinal"] < mine["ordinal"] and r["id"] not in held]
        first = thread.get("activeRunId") or (ahead[0]["id"] if ahead else None)
        if first is not None:
            count = len(ahead) + (1 if thread.get("activeRunId") else 0)
            say(f"queued behind run {first} ({count} ahead)")
            self._waited = True

    async def on_event(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Print one event of the run; return the run once it has ended."""
        kind = event["type"]
        payload = event["payload"]
        if kind in ("message.delta", "message.appended"):
            self.printer.text(payload["messageId"], payload["offset"], payload["text"])
            return None
        if kind == "message.created":
            return None
        if kind in ("approval.requested", "user_input.requested"):
            await self.on_request(payload["request"])
        elif kind == "run.retrying":
            attempt = payload["attempt"]
            self.line(f"[retry] attempt {attempt['number']} ({attempt['reason']}): {payload.get('why', '')}")
        elif kind == "plan.updated":
            self.line(*todo_lines(payload["artifact"]))
        elif kind == "plan.proposed":
            self.line(*proposed_plan_lines(payload["artifact"]))
        elif kind == "run.started" and self._waited:
            self.printer.end_line()
            say(f"run {payload['run']['ordinal']} started")
        elif (text := describe_node_event(event)) is not None:
            self.line(text)
        elif kind.startswith("run.") and payload.get("run", {}).get("status") in TERMINAL_RUN:
            self.printer.end_line()
            self.out.flush()
            return payload["run"]
        else:
            self.printer.end_line()
        return None

    async def on_request(self, request: dict[str, Any]) -> None:
        if not self.interactive or self.presses:
            self.line(*request_lines(request))
            return
        self.line(f"[{describe_request(request)}] {request['id']}")
        try:
            with trio.CancelScope() as self._prompt:
                answer = await ask_person(request)
                if answer is None:  # Ctrl-D: say how to answer it from elsewhere
                    self.line("", *request_lines(request)[1:])
                    return
                method = "approval.respond" if request["kind"] == "approval" else "user-input.respond"
                try:
                    await self.client.call(method, **answer)
                except AgentdError as exc:
                    if exc.kind == "connection_lost":
                        raise
                    say(f"agentd: {describe_error(exc)}")
        finally:
            self._prompt = None

    async def follow(self, events: EventStream) -> dict[str, Any] | None:
        async for event in events:
            if event.get("runId") == self.run_id:
                run = await self.on_event(event)
                if run is not None:
                    return run
        return None

    async def until_end(self, events: EventStream) -> dict[str, Any]:
        """Follow the run to its end, resubscribing if the daemon asks to."""
        run = await self.follow(events)
        while run is None and events.lost is None and events.resync_after is not None:
            async with self.client.subscribe(thread_id=self.thread_id, after_seq=events.resync_after) as events:
                run = await self.follow(events)
        if run is None:
            self.printer.end_line()
            raise CliError(f"the daemon closed the connection before run {self.run_id} ended; "
                           f"`agentd show {self.thread_id}` tells how it ended once the daemon is back")
        return run

    async def until_end_or_detached(self, events: EventStream, presses: Any) -> dict[str, Any] | None:
        """``until_end``, with a Ctrl-C (from ``presses``, a SIGINT receiver
        opened before the message was sent) interrupting the run, and a
        second one detaching (then None)."""
        result: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            async def follow() -> None:
                result["run"] = await self.until_end(events)
                nursery.cancel_scope.cancel()

            nursery.start_soon(follow)
            async for _ in presses:
                self.presses += 1
                self.printer.end_line()
                if self.presses > 1:
                    say(f"agentd: detached; run {self.run_id} goes on in the daemon (`agentd show {self.thread_id}`)")
                    nursery.cancel_scope.cancel()
                    break
                say(f"agentd: interrupting run {self.run_id} (Ctrl-C again to leave it to the daemon)")
                if self._prompt is not None:
                    self._prompt.cancel()
                nursery.start_soon(self.interrupt)
        return result.get("run")

    async def interrupt(self) -> None:
        """Interrupt the run (cancel it, if it is still queued). Shielded: a
        second Ctrl-C right after the first detaches, and must not cancel the
        first one's request before the daemon has it (the run would go on
        uninterrupted); a daemon that does not answer in 5 s is left to it."""
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._interrupt()

    async def _interrupt(self) -> None:
        assert self.run_id is not None
        try:
            await self.client.call("run.interrupt", runId=self.run_id)
        except AgentdError as exc:
            if exc.kind == "invalid_state" and exc.data.get("status") == "queued":
                try:
                    await self.client.call("queued-run.cancel", runId=self.run_id)
                except AgentdError:
                    pass  # it started meanwhile: the next Ctrl-C can still detach
            elif exc.kind == "connection_lost":
                raise


async def stream_run(
    client: Client, thread_id: str, text: str, *, after_seq: int, out: TextIO = sys.stdout,
    dispatch_mode: dict[str, Any] | None = None, interactive: bool = False,
) -> dict[str, Any]:
    """Send ``text`` and print the answer until its run ends; return the run.
    Approvals and questions are shown inline, and answered here when
    ``interactive`` (a terminal is attached)."""
    follower = RunFollower(client, thread_id, out=out, interactive=interactive)
    async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
        params: dict[str, Any] = {"threadId": thread_id, "text": text}
        if dispatch_mode is not None:
            params["dispatchMode"] = dispatch_mode
        await follower.accepted(await client.call("thread.message.send", **params), quiet=True)
        return await follower.until_end(events)


# -- the command ---------------------------------------------------------------------------


def message_text(args: argparse.Namespace) -> str:
    """The message: the TEXT argument, stdin (``-``) or ``--file``."""
    if (args.text is None) == (args.file is None):
        raise CliError("give the message as TEXT, as - (read from stdin) or with --file PATH; "
                       "see `agentd send --help`", EXIT_USAGE)
    if args.text is not None and args.text != "-":
        text = args.text
    else:
        source = "stdin" if args.file is None else args.file
        # At most what a message may hold (UTF-8 takes up to 4 bytes a character), and one
        # byte more to tell: `--file /dev/zero` or an endless pipe is refused, not read forever.
        cap = 4 * MAX_TEXT + 1
        try:
            if args.file is None:
                data = sys.stdin.buffer.read(cap + 1)
            else:
                with open(args.file, "rb") as f:
                    data = f.read(cap + 1)
        except OSError as exc:
            raise CliError(f"cannot read {source}: {exc.strerror or exc}") from None
        if len(data) > cap:
            raise CliError(f"{source} holds more than a message may ({MAX_TEXT:,} characters); nothing was sent")
        try:
            text = data.decode("utf-8").removesuffix("\n")
        except UnicodeDecodeError as exc:
            raise CliError(f"{source} is not UTF-8 text (byte {exc.start}); agentd sends text in UTF-8") from None
    if not text:
        raise CliError("the message is empty; there is nothing to send")
    if len(text) > MAX_TEXT:
        raise CliError(f"the message is {len(text):,} characters; the limit is {MAX_TEXT:,}")
    return text


def _say_merge(sent: dict[str, Any]) -> None:
    """What a merge-back brings, and — for a fork in its own workspace — which files differ here."""
    merge = sent.get("mergeBack")
    if not merge:
        return
    say(f"merging back {merge['forkThreadId']}: {len(merge['runIds'])} run(s) (transfer {merge['transferId']})")
    files = merge.get("files")
    if files is not None:
        _say_files(files)
    elif merge.get("forkWorkspace"):
        differ = ", ".join(merge.get("filesDiffer") or []) or "none"
        say(f"the fork works in {merge['forkWorkspace']}; no files are copied. Files that differ here: {differ}")


def _say_files(files: dict[str, Any]) -> None:
    """What ``--files`` merged: the files written, every conflicting path, the way back."""
    changed = [*files["written"], *files["deleted"]]
    conflicts = ", ".join(f"{c['path']} ({c['reason']})" for c in files["conflicts"])
    if files["status"] == "conflicts":
        say(f"the fork's files conflict here, so none were written: {conflicts}; send again with --markers to "
            "write git's conflict markers")
    elif files["status"] == "conflicts_marked":
        say(f"merged {len(changed)} file(s) with conflict markers in: {conflicts}")
    else:
        say(f"merged {len(changed)} file(s) from the fork: {', '.join(changed) or 'none changed'}")
    for left in files["notMerged"]:
        say(f"not merged: {left['path']} ({left['reason']})")
    say(f"`agentd restore {files['safetyCheckpointId']}` undoes the merge")


#: file name endings → the image types a message may carry
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp"}


def image_attachments(paths: list[str]) -> list[dict[str, Any]]:
    """``send --image PATH``: each file as an ``image`` attachment (its type by
    its ending; the daemon checks its bytes are one)."""
    out = []
    left = MAX_ATTACHMENT_BYTES
    for path in paths:
        mime = IMAGE_TYPES.get(os.path.splitext(path)[1].lower())
        if mime is None:
            raise CliError(f"--image {path}: not a .png, .jpg, .jpeg, .gif or .webp file")
        try:
            # A regular file only (a FIFO's open would wait, /dev/zero would never end),
            # and no more of it than the message may carry.
            data = read_regular(path, limit=left, follow_symlinks=True)
        except OSError as exc:
            raise CliError(f"--image {path}: {exc.strerror}") from None
        if len(data) > left:
            raise CliError(f"--image {path}: the images of a message are at most {MAX_ATTACHMENT_BYTES >> 20} MiB together")
        left -= len(data)
        out.append({"type": "image", "mimeType": mime, "data": base64.b64encode(data).decode("ascii")})
    return out


def cmd_send(args: argparse.Namespace) -> int:
    text = message_text(args)
    interactive = sys.stdin.isatty() and args.text != "-"

    async def go(client: Client) -> int:
        mode = None
        if args.queue:
            mode = {"type": "queue_after_active"}
        elif args.steer or args.restart:
            thread = (await client.call("thread.get", threadId=args.thread))["thread"]
            if not thread["activeRunId"]:
                raise CliError(f"thread {args.thread} has no active run to steer; send without --steer/--restart to start one")
            mode = {"type": "steer_active" if args.steer else "restart_active", "targetRunId": thread["activeRunId"]}
        params: dict[str, Any] = {"threadId": args.thread, "text": text}
        if mode is not None:
            params["dispatchMode"] = mode
        if args.provider:
            params["provider"] = args.provider
        if args.clean_context:
            params["cleanContext"] = True
        if args.image:
            params["attachments"] = image_attachments(args.image)
        if getattr(args, "merge_back", None):
            params["mergeBack"] = {"forkThreadId": args.merge_back}
            if args.files:
                params["mergeBack"]["files"] = True
            if args.markers:
                params["mergeBack"]["onConflict"] = "markers"
        elif args.files or args.markers:
            raise CliError("--files and --markers go with --merge-back FORK")
        follower = RunFollower(client, args.thread, interactive=interactive)
        if args.detach:
            sent = await client.call("thread.message.send", **params)
            print(sent["runId"], flush=True)
            _say_merge(sent)
            if sent.get("heldRunIds"):
                say(held_line(len(sent["heldRunIds"]), args.thread))
            return 0
        after = (await client.call("daemon.status"))["lastSeq"]
        # Ctrl-C from here on interrupts the run, even before it is accepted.
        with trio.open_signal_receiver(signal.SIGINT) as presses:
            async with client.subscribe(thread_id=args.thread, after_seq=after) as events:
                sent = await client.call("thread.message.send", **params)
                _say_merge(sent)
                await follower.accepted(sent)
                run = await follower.until_end_or_detached(events, presses)
        if run is None:
            return EXIT_INTERRUPTED
        reason = f" ({run['reason']})" if run.get("reason") else ""
        say(f"run {run['ordinal']} {run['status']}{reason}")
        if follower.presses:
            return EXIT_INTERRUPTED
        return 0 if run["status"] == "completed" else 1

    return run_with_client(args, go)
