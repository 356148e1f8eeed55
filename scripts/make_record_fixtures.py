"""Write one stored-record fixture per record kind (tests/fixtures/records/).

Run only when a kind gets a new schema version: existing fixtures are what
old data dirs contain and must keep decoding, so this never overwrites a file.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentd.store.records import (
    AppThread, Checkpoint, CommandReceipt, ContextHandoff, ContextTransfer, SourcePoint, PlanArtifact, RuntimeRequest, ConversationMessage, Effect, Event, ExecutionNode, ProviderSession,
    ProviderThread, ProviderTurn, Run, RunAttempt, RECORD_KINDS, CHUNKED_MESSAGE_VERSION, encode_message_head, encode_record,
)

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "records"

SAMPLES = {
    "threads": AppThread(id="thr_fixture", title="fixture", workspace="/tmp/ws", created_at=1.0, updated_at=2.0, run_count=1),
    "messages": ConversationMessage(id="msg_fixture", thread_id="thr_fixture", run_id="run_fixture", role="user", text="hello"),
    "runs": Run(id="run_fixture", thread_id="thr_fixture", ordinal=1, status="completed", root_node_id="nod_fixture"),
    "attempts": RunAttempt(id="att_fixture", run_id="run_fixture", thread_id="thr_fixture", number=1, status="completed"),
    "nodes": ExecutionNode(id="nod_fixture", thread_id="thr_fixture", run_id="run_fixture", kind="root_turn", counts_for_run=True, status="completed"),
    "provider_sessions": ProviderSession(id="pss_fixture", provider="scripted", kind="scripted", thread_id="thr_fixture", status="stopped", pid=42),
    "provider_threads": ProviderThread(id="pth_fixture", thread_id="thr_fixture", provider="scripted", kind="scripted", native_thread_id="sth_x"),
    "provider_turns": ProviderTurn(id="ptu_fixture", provider_thread_id="pth_fixture", thread_id="thr_fixture", run_id="run_fixture", attempt_id="att_fixture", native_turn_id="stu_x"),
    "context_handoffs": ContextHandoff(id="hof_fixture", thread_id="thr_fixture", strategy="portable_context", text="User: hi"),
    "context_transfers": ContextTransfer(
        id="xfr_fixture", type="fork", source_thread_id="thr_fixture", target_thread_id="thr_fork",
        source_point=SourcePoint(type="run", thread_id="thr_fixture", run_id="run_fixture", provider="scripted",
                                 native_thread_id="sth_x", native_turn_ref="stu_x"),
        status="consumed", resolution="native", source_run_ids=["run_fixture"], created_at=1.0, consumed_at=2.0,
    ),
    "requests": RuntimeRequest(id="req_fixture", thread_id="thr_fixture", run_id="run_fixture", kind="approval", detail={"command": "ls"}),
    "artifacts": PlanArtifact(id="art_fixture", thread_id="thr_fixture", run_id="run_fixture", kind="todo_list", steps=[{"step": "a", "status": "pending"}]),
    "events": Event(seq=7, type="run.completed", thread_id="thr_fixture", run_id="run_fixture", at=3.0, payload={"k": [1, 2]}),
    "receipts": CommandReceipt(command_id="c-1", method="thread.create", result={"threadId": "thr_fixture", "seq": 7}),
    "checkpoints": Checkpoint(id="ckp_fixture", thread_id="thr_fixture", run_id="run_fixture", ordinal=1, commit="0" * 40,
                              summary={"filesChanged": 1, "insertions": 2, "deletions": 0, "skipped": [], "nestedRepos": []}),
    "effects": Effect(id="eff_fixture", kind="checkpoint.capture", thread_id="thr_fixture", replay_safe=True),
}


class OldMcpServer(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """``McpServer`` as stored before its secrets left the record (issue 26):
    the values of its environment variables and headers in it."""

    name: str
    type: str = "stdio"
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    url: str | None = None
    headers: dict[str, str] = {}


#: a thread stored then (the daemon moves the values out at its start: mcp_secrets.migrate)
OLD_MCP_THREAD = AppThread(
    id="thr_mcp_fixture", title="fixture", workspace="/tmp/ws", created_at=1.0, updated_at=2.0,
    mcp_servers=[OldMcpServer(name="files", command="/usr/bin/env", args=["files-mcp"], env={"TOKEN": "s3cret"}),  # type: ignore[list-item]
                 OldMcpServer(name="web", type="http", url="http://127.0.0.1:9/mcp",
                              headers={"Authorization": "Bearer s3cret"})])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for kind, record in SAMPLES.items():
        version = RECORD_KINDS[kind][1]
        path = OUT / f"{kind}.v{version}.msgpack"
        if path.exists():
            continue
        path.write_bytes(encode_record(kind, record))
        print("wrote", path)
    # A streamed message's head: its text lives in message_text chunks.
    path = OUT / f"messages.v{CHUNKED_MESSAGE_VERSION}.msgpack"
    if not path.exists():
        path.write_bytes(encode_message_head(ConversationMessage(
            id="msg_streamed", thread_id="thr_fixture", run_id="run_fixture", role="assistant", status="complete")))
        print("wrote", path)

    path = OUT / "threads.v1.mcp-values.msgpack"
    if not path.exists():
        path.write_bytes(encode_record("threads", OLD_MCP_THREAD))
        print("wrote", path)


if __name__ == "__main__":
    main()
