"""The event → ACP update mapping of ``agentd acp`` (cli/acp_translate.py), as pure functions (issue 26)."""

from __future__ import annotations

from acp import embedded_text_resource, resource_block, resource_link_block, text_block

from agentd import acp_translate as tr

PATCH = """diff --git a/a.txt b/a.txt
index 3367afd..3e75765 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 keep
-old
+new
 tail
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..ce01362
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
\\ No newline at end of file
"""


def node(kind: str, status: str = "running", **fields):
    return {"id": f"nod_{kind}", "kind": kind, "status": status, "runId": "run_1", "title": fields.pop("title", kind),
            "detail": fields.pop("detail", {}), **fields}


def test_patch_hunks_give_old_and_new_text_per_file():
    hunks = tr.patch_hunks(PATCH)
    assert hunks["a.txt"] == [("keep\nold\ntail\n", "keep\nnew\ntail\n")]
    assert hunks["new.txt"] == [(None, "hello\n")]  # an added file has no old text


def test_diff_updates_name_absolute_paths_under_the_workspace():
    change = node("file_change", "completed", detail={"path": "a.txt"})
    [update] = tr.diff_updates(PATCH, {change["id"]: change}, "/ws")
    assert update.tool_call_id == change["id"]
    assert [(c.path, c.old_text, c.new_text) for c in update.content] == [("/ws/a.txt", "keep\nold\ntail\n",
                                                                         "keep\nnew\ntail\n")]


def test_a_claude_edit_carries_its_own_diff():
    edit = node("file_change", detail={"tool": "Edit", "input": {"file_path": "/ws/x.py", "old_string": "a",
                                                                  "new_string": "b"}})
    start = tr.tool_call_start(edit)
    assert start.kind == "edit" and start.content[0].old_text == "a" and start.content[0].new_text == "b"
    assert tr.diff_updates(PATCH, {edit["id"]: edit}, "/ws") == []


def test_tool_kinds_by_node_kind_and_tool_name():
    assert tr.tool_kind(node("command_execution")) == "execute"
    assert tr.tool_kind(node("file_change", title="write a")) == "edit"
    assert tr.tool_kind(node("file_change", title="delete a")) == "delete"
    assert tr.tool_kind(node("tool", detail={"tool": "Read"})) == "read"
    assert tr.tool_kind(node("tool", detail={"tool": "Bash"})) == "execute"
    assert tr.tool_kind(node("tool", detail={"name": "Grep"})) == "search"
    assert tr.tool_kind(node("subagent")) == "think"
    assert tr.tool_kind(node("mcp_tool_call", title="srv.tool")) == "other"
    assert tr.tool_status("incomplete") == "failed" and tr.tool_status("running") == "in_progress"


def test_text_is_sent_once_whether_it_comes_live_or_durable():
    t = tr.EventTranslator()
    created = {"type": "message.created", "payload": {"message": {"id": "m", "role": "assistant", "text": ""}}}
    assert t.updates(created) == []
    live = [t.updates({"type": "message.delta", "payload": {"messageId": "m", "offset": o, "text": s}})
            for o, s in ((0, "hel"), (3, "lo"))]
    durable = t.updates({"type": "message.appended", "payload": {"messageId": "m", "offset": 0, "text": "hello!"}})
    assert [u.content.text for batch in live for u in batch] == ["hel", "lo"]
    assert [u.content.text for u in durable] == ["!"]


def test_user_messages_of_other_clients_are_shown_and_the_sessions_own_are_not():
    t = tr.EventTranslator(own_runs={"run_mine"})
    mine = {"type": "message.created", "payload": {"message": {"id": "u1", "role": "user", "runId": "run_mine",
                                                                 "text": "from the editor"}}}
    theirs = {"type": "message.created", "payload": {"message": {"id": "u2", "role": "user", "runId": "run_cli",
                                                                   "text": "from the CLI"}}}
    assert t.updates(mine) == []
    [chunk] = t.updates(theirs)
    assert chunk.session_update == "user_message_chunk" and chunk.content.text == "from the CLI"


def test_nodes_open_a_tool_call_then_update_it_and_reasoning_is_a_thought():
    t = tr.EventTranslator(workspace="/ws")
    started = node("command_execution", detail={"command": "make", "cwd": "/ws"})
    [start] = t.updates({"type": "command_execution.started", "payload": {"node": started}})
    assert start.session_update == "tool_call" and start.status == "in_progress"
    done = {**started, "status": "failed", "detail": {"command": "make", "exitCode": 2, "aggregatedOutput": "err"}}
    [update] = t.updates({"type": "command_execution.failed", "payload": {"node": done}})
    assert update.session_update == "tool_call_update" and update.status == "failed"
    assert update.raw_output == {"exitCode": 2} and "err" in update.content[0].content.text
    thought = node("reasoning", "completed", detail={"summary": ["thinking hard"]})
    [chunk] = t.updates({"type": "reasoning.completed", "payload": {"node": thought}})
    assert chunk.session_update == "agent_thought_chunk" and chunk.content.text == "thinking hard"


def test_the_root_todo_list_is_the_plan():
    t = tr.EventTranslator()
    artifact = {"steps": [{"step": "a", "status": "completed"}, {"step": "b", "status": "in_progress"}]}
    [plan] = t.updates({"type": "plan.updated", "payload": {"artifact": artifact, "scope": "root"}})
    assert [(e.content, e.status) for e in plan.entries] == [("a", "completed"), ("b", "in_progress")]
    assert t.updates({"type": "plan.updated", "payload": {"artifact": artifact, "scope": "child"}}) == []


def test_stop_reasons():
    assert tr.stop_reason({"status": "completed"}) == ("end_turn", None)
    stop, why = tr.stop_reason({"status": "failed", "reason": "provider_error: boom"})
    assert stop == "end_turn" and "boom" in why
    stop, why = tr.stop_reason({"status": "interrupted", "reason": "daemon_restart"})
    assert stop == "cancelled" and "restarted" in why
    assert tr.stop_reason({"status": "interrupted", "reason": "interrupted"}) == ("cancelled", None)


def test_a_prompt_is_one_message():
    blocks = [text_block("look at this"), resource_block(embedded_text_resource("file:///ws/a.py", "print(1)")),
              resource_link_block("b.py", "file:///ws/b.py")]
    text = tr.prompt_text(blocks)
    assert text.startswith("look at this\n\nfile:///ws/a.py:\n```\nprint(1)\n```")
    assert text.endswith("[b.py](file:///ws/b.py)")


def test_history_replays_each_run_in_order():
    thread = {"messages": [
        {"id": "u", "role": "user", "runId": "r1", "text": "do it"},
        {"id": "a", "role": "assistant", "runId": "r1", "attemptId": "at1", "text": "done", "createdAt": 2.0},
    ]}
    runs = [{"run": {"id": "r1", "status": "interrupted", "reason": "daemon_restart", "selectedAttemptId": "at1",
                     "ordinal": 1},
             "nodes": [{**node("file_change", "incomplete", detail={"path": "f"}), "attemptId": "at1",
                        "createdAt": 1.0}]}]
    kinds = [u.session_update for u in tr.history_updates(thread, runs, "/ws")]
    assert kinds == ["user_message_chunk", "tool_call", "agent_message_chunk", "agent_message_chunk"]
    last = tr.history_updates(thread, runs, "/ws")[-1]
    assert "restarted" in last.content.text
