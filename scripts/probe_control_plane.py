"""Probe: can an agent's commands drive agentd's control plane? (hostile-round item 11)

Starts a real daemon on a temporary data dir (local only, the built-in
scripted agent) and attacks it from inside agents, as their real commands
(the scripted agent's ``command`` step):

1. ``python -m agentd approve REQ`` run by an agent against a pending
   approval, ``--rounds`` times (one command step each);
2. a raw socket client (``scripts/agent_peer.py``) run by an agent against
   that approval: approve, stop, interrupt, rollback, send, a read, and
   ``task.delegate`` without a credential — and the same over the daemon's
   WebSocket, with the token read from its file;
3. the same client daemonised by a double fork (fork, setsid, fork), against
   its own agent's pending approval;
4. a command that reads another session's credential file and delegates
   with it;
5. the ``delegate`` step through ``agentd mcp`` (which must still work);
6. the person (this probe, no agent's process) approving.

It prints one line per figure and a JSON summary; bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402

PEER = str(ROOT / "scripts" / "agent_peer.py")
TERMINAL = ("completed", "failed", "interrupted", "cancelled")
APPROVAL = {"approval": {"kind": "command", "command": "rm -rf build"}}
CONTROL = ("approve", "stop", "interrupt", "rollback", "send")


def script(*steps: dict[str, Any]) -> str:
    return "@script\n" + json.dumps(list(steps))


async def wait_for(client: Client, thread_id: str, predicate) -> dict[str, Any]:
    async with client.subscribe(thread_id=thread_id) as events:
        async for event in events:
            if predicate(event):
                return event
    raise RuntimeError("the event stream ended")


async def run_to_end(client: Client, thread_id: str, text: str) -> dict[str, Any]:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text)
    event = await wait_for(client, thread_id, lambda e: e.get("runId") == sent["runId"]
                           and (e["payload"].get("run") or {}).get("status") in TERMINAL)
    return event["payload"]["run"]


async def commands_of(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [n for n in (await client.call("run.get", runId=run_id))["nodes"] if n["kind"] == "command_execution"]


async def pending(client: Client, thread_id: str, request_id: str) -> bool:
    return any(r["id"] == request_id for r in (await client.call("thread.requests", threadId=thread_id))["requests"])


async def probe(client: Client, work: Path, rounds: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    victim = (await client.call("thread.create", title="victim"))["threadId"]
    victim_run = await client.call("thread.message.send", threadId=victim, text=script(APPROVAL, {"say": "went on"}))
    asked = await wait_for(client, victim, lambda e: e["type"] == "approval.requested")
    request = asked["payload"]["request"]

    # 1. the agentd CLI, run by another agent, rounds times
    attacker = (await client.call("thread.create", title="attacker"))["threadId"]
    run = await run_to_end(client, attacker, script(*[
        {"command": {"argv": [sys.executable, "-m", "agentd", "approve", request["id"]]}} for _ in range(rounds)]))
    nodes = await commands_of(client, run["id"])
    refused = sum(1 for n in nodes if n["detail"].get("exitCode") == 1 and "refused" in n["detail"].get("aggregatedOutput", ""))
    figures["cliApprove"] = {"refused": refused, "of": rounds, "stillPending": await pending(client, victim, request["id"])}

    # 2. a raw client run by another agent
    run = await run_to_end(client, attacker, script(
        {"command": {"argv": [sys.executable, PEER, "--thread", victim, "--calls", ",".join((*CONTROL, "read", "delegate"))]}}))
    [node] = await commands_of(client, run["id"])
    figures["rawClient"] = json.loads(node["detail"]["aggregatedOutput"])["results"]

    # 2b. the same over the WebSocket, with the token read from its file
    url = (await client.call("daemon.status"))["websocket"]
    run = await run_to_end(client, attacker, script(
        {"command": {"argv": [sys.executable, PEER, "--thread", victim, "--websocket", url.rsplit(":", 1)[1].strip("/"),
                              str(work / "data" / "websocket.token"), "--calls", ",".join((*CONTROL, "read"))]}}))
    [node] = await commands_of(client, run["id"])
    figures["webSocketClient"] = json.loads(node["detail"]["aggregatedOutput"])["results"]

    # 4. another session's credential, read from its file
    run = await run_to_end(client, attacker, script(
        {"command": {"argv": [sys.executable, PEER, "--thread", victim, "--calls", "steal",
                              "--steal", request["sessionId"], str(work / "data" / "run" / "tool-credentials")]}}))
    [node] = await commands_of(client, run["id"])
    figures["stolenCredential"] = json.loads(node["detail"]["aggregatedOutput"])["results"]["steal"]

    # 3. double fork, against its own agent's approval
    own = (await client.call("thread.create", title="own"))["threadId"]
    report_path = work / "report.sock"
    with trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM) as listener:
        await listener.bind(str(report_path))
        listener.listen(1)
        own_run = await client.call("thread.message.send", threadId=own, text=script(
            {"command": {"argv": [sys.executable, PEER, "--detach", "--thread", own, "--report", str(report_path),
                                  "--calls", ",".join((*CONTROL, "read"))]}}, APPROVAL))
        conn, _ = await listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = await conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    report = json.loads(data)
    sessions = {s["threadId"]: s["pid"] for s in (await client.call("daemon.status"))["sessions"]}
    figures["doubleFork"] = {"results": report.get("results"), "reparentedToRuntime": report.get("ppid") == sessions.get(own),
                             "stillPending": report.get("stillPending")}

    # 5. the delegate step through agentd mcp
    lead = (await client.call("thread.create", title="lead"))["threadId"]
    run = await run_to_end(client, lead, script({"delegate": {"instructions": "hello", "wait": True}}))
    messages = (await client.call("thread.get", threadId=lead))["messages"]
    said = " ".join(m["text"] for m in messages if m["role"] == "assistant" and m["runId"] == run["id"])
    figures["delegate"] = "ok" if run["status"] == "completed" and "delegated task completed" in said else f"failed: {said}"

    # 6. the person approves both
    approvals = []
    for thread_id, run_id, request_id in ((victim, victim_run["runId"], request["id"]),
                                          (own, own_run["runId"], report.get("requestId"))):
        if not await pending(client, thread_id, request_id):
            approvals.append("already answered (by an agent's process)")
            continue
        answered = await client.call("approval.respond", requestId=request_id, decision="accept")
        ended = await wait_for(client, thread_id, lambda e, r=run_id: e.get("runId") == r
                               and (e["payload"].get("run") or {}).get("status") in TERMINAL)
        ok = answered["status"] == "resolved" and ended["payload"]["run"]["status"] == "completed"
        approvals.append("ok" if ok else f"failed: {ended['payload']['run']}")
    figures["personApproves"] = "ok" if approvals == ["ok", "ok"] else "; ".join(approvals)
    return figures


async def main(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="pcp-"))
    daemon = await start_daemon(work / "data", work / "agentd.sock", timeout=60, extra_args=["--websocket-port", "0"])
    try:
        with trio.fail_after(args.timeout):
            async with Client.connect(daemon.socket) as client:
                return await probe(client, work, args.rounds)
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)


def table(f: dict[str, Any]) -> str:
    cli, raw, fork = f["cliApprove"], f["rawClient"], f["doubleFork"]

    def count(results: dict[str, str]) -> str:
        control = [results.get(name) for name in CONTROL]
        return f"forbidden {control.count('forbidden')}/{len(control)} control calls"

    return "\n".join([
        f"approve from an agent's command (agentd CLI): refused {cli['refused']}/{cli['of']}; "
        f"approval still pending: {cli['stillPending']}",
        f"raw client in an agent's command: {count(raw)} ({', '.join(f'{k}={v}' for k, v in raw.items())})",
        f"WebSocket client in an agent's command (token read from its file): {count(f['webSocketClient'])} "
        f"(read={f['webSocketClient'].get('read')})",
        f"double fork (daemonised grandchild, own agent's approval): {count(fork['results'] or {})}; "
        f"reparented to the runtime: {fork['reparentedToRuntime']}; still pending: {fork['stillPending']}",
        f"another session's credential from an agent's command: {f['stolenCredential']}",
        f"delegate through agentd mcp: {f['delegate']}",
        f"the person approves: {f['personApproves']}",
    ])


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="agentd approve attempts (default 10)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the whole probe may take")
    args = parser.parse_args()
    figures = trio.run(main, args)
    print(table(figures))
    print(json.dumps(figures))


if __name__ == "__main__":
    cli()
