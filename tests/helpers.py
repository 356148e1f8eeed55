"""Helpers for tests that drive the daemon over its socket."""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, Awaitable, Callable, Iterator

import trio

from agentd.protocol.client import Client

TERMINAL = ("completed", "failed", "interrupted", "cancelled", "rolled_back")


def script(*steps: dict[str, Any]) -> str:
    """A scripted-agent message performing ``steps``."""
    return "@script\n" + json.dumps(list(steps))


async def wait_run_terminal(client: Client, thread_id: str, run_id: str, *, after_seq: int = 0, timeout: float = 30) -> dict[str, Any]:
    """Follow the thread's events until ``run_id`` is terminal; return the run.

    A subscription the daemon cut off (``events.resync``: this client fell a
    buffer behind a fast stream, as the protocol allows) is taken up again
    from the last event seen, as a client is told to."""
    with trio.fail_after(timeout):
        for _ in range(20):
            async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
                async for event in events:
                    run = event["payload"].get("run")
                    if event.get("runId") == run_id and run and run["status"] in TERMINAL:
                        return run
            if events.lost is not None or events.resync_after is None:
                break
            after_seq = events.resync_after
    raise AssertionError(f"event stream ended before run {run_id} was terminal")


async def wait_event(client: Client, predicate, *, thread_id: str | None = None, after_seq: int = 0, timeout: float = 30) -> dict[str, Any]:
    """The first event (replayed or live) that satisfies ``predicate``."""
    with trio.fail_after(timeout):
        async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
            async for event in events:
                if predicate(event):
                    return event
    raise AssertionError("event stream ended before the expected event")


async def answer_begun(client: Client, thread_id: str, run_id: str | None = None, *, timeout: float = 30) -> dict[str, Any]:
    """The ``message.created`` of an assistant message (of ``run_id``): the
    agent has begun to answer. Its first ``message.delta`` would say the
    same, but deltas are ephemeral and never replayed — a subscription
    opened after an agent's only delta (a fake that says "working" and
    waits) would wait for it forever — while the message's start is durable
    before its first delta is sent."""
    return await wait_event(
        client,
        lambda e: e["type"] == "message.created" and e["payload"]["message"]["role"] == "assistant"
        and (run_id is None or e.get("runId") == run_id),
        thread_id=thread_id, timeout=timeout,
    )


async def send_and_wait(client: Client, thread_id: str, text: str, **params: Any) -> dict[str, Any]:
    """Send a message and wait for its run to end; return the final run."""
    sent = await client.call("thread.message.send", threadId=thread_id, text=text, **params)
    return await wait_run_terminal(client, thread_id, sent["runId"])


async def stored_events(client: Client, thread_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored event so far (of one thread, if given), oldest first.

    Replays the whole log up to the current last seq, which may belong to
    another thread, and filters afterwards.
    """
    target = (await client.call("daemon.status"))["lastSeq"]
    out: list[dict[str, Any]] = []
    if target == 0:
        return out
    async with client.subscribe() as events:
        async for event in events:
            if event.get("ephemeral"):
                continue
            if thread_id is None or event.get("threadId") == thread_id:
                out.append(event)
            if event["seq"] >= target:
                break
    return out


async def wait_process_gone(pid: int, timeout: float = 30) -> None:
    """Wait until process ``pid`` has exited (a pidfd becomes readable then)."""
    import os

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with trio.fail_after(timeout):
            await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def daemon_for_module(start: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Iterator[Any]:
    """One daemon for the tests of a module that each need only threads of
    their own, from a sync module-scoped fixture (issue 28 item 13: starting
    and stopping a daemon costs about 2 s of a loaded 2-core machine, paid
    once instead of per test). ``start(*args, **kwargs)`` starts it (e.g.
    ``agentd.launch.start_daemon``) and returns the ``DaemonProcess``, or a
    wrapper holding it as ``.process``.

    pytest-trio runs async fixtures inside each test's own ``trio.run``, so
    only function-scoped ones; the daemon is a child process, and its handle
    (a pidfd) works from any later run, so it is started and stopped in
    ``trio.run``s of its own, between tests. Its exit status is checked: a
    daemon that did not shut down in order fails the module's last test."""
    from agentd.launch import DaemonProcess

    started = trio.run(functools.partial(start, *args, **kwargs))
    process = started if isinstance(started, DaemonProcess) else started.process
    try:
        yield started
    finally:
        code = trio.run(process.terminate)
        assert code == 0, f"the module's daemon exited {code}:\n{process.log_text()[-4000:]}"


@contextlib.contextmanager
def configured_module_daemon(module_paths: tuple[Any, Any], config_text: str) -> Iterator[Any]:
    """``daemon_for_module`` of agentd's own daemon started with
    ``config_text`` as its config file (written beside the module's data dir)."""
    from agentd.launch import start_daemon

    data_dir, socket = module_paths
    config = data_dir.parent / "config.toml"
    config.write_text(config_text)
    with daemon_for_module(start_daemon, data_dir, socket, config=config) as daemon:
        yield daemon


async def run_accepting(client: Client, thread_id: str, text: str, *, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Send ``text``, accept every approval its run asks for; the ended run
    and the requests accepted (in the order asked)."""
    accepted: list[dict[str, Any]] = []
    with trio.fail_after(timeout):
        async with client.subscribe(thread_id=thread_id) as events:
            sent = await client.call("thread.message.send", threadId=thread_id, text=text)
            async for e in events:
                if e["type"] == "approval.requested" and e.get("runId") == sent["runId"]:
                    request = e["payload"]["request"]
                    accepted.append(request)
                    await client.call("approval.respond", requestId=request["id"], decision="accept")
                run = e["payload"].get("run")
                if e.get("runId") == sent["runId"] and run and run["status"] in TERMINAL:
                    return run, accepted
    raise AssertionError("the event stream ended first")
