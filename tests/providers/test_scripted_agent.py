"""Tests for the built-in scripted agent, driven as a real subprocess.

Every test talks JSON lines to ``python -m agentd.actors.providers.scripted_agent``
over pipes.  Nothing sleeps to wait for state: tests read messages until the
one they expect arrives, under a ``trio.fail_after`` guard.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
import trio

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10


def script(*steps: dict) -> str:
    return "@script\n" + json.dumps(list(steps))


class AgentProcess:
    """A scripted agent subprocess plus a small JSON-lines client for it.

    Every message read is kept in ``inbox`` until a test takes it, so tests
    can wait for one message without losing the ones that arrived before.
    """

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.inbox: list[dict] = []
        self._buffer = bytearray()
        self._ids = itertools.count(1)

    async def send(self, message: dict) -> None:
        await self.process.stdin.send_all(msgspec.json.encode(message) + b"\n")

    async def _read(self) -> dict:
        while (end := self._buffer.find(b"\n")) < 0:
            data = await self.process.stdout.receive_some()
            if not data:
                raise EOFError("the agent closed its stdout")
            self._buffer += data
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return json.loads(line)

    async def take(self, matches) -> dict:
        """Remove and return the first message, old or new, that matches."""
        with trio.fail_after(TIMEOUT):
            index = 0
            while True:
                while index < len(self.inbox):
                    if matches(self.inbox[index]):
                        return self.inbox.pop(index)
                    index += 1
                self.inbox.append(await self._read())

    async def call(self, method: str, **params) -> dict:
        """Send a request and return the whole reply (result or error)."""
        request_id = next(self._ids)
        await self.send({"id": request_id, "method": method, "params": params})
        return await self.take(lambda m: m.get("id") == request_id and "method" not in m)

    async def result(self, method: str, **params) -> dict:
        reply = await self.call(method, **params)
        assert "result" in reply, reply
        return reply["result"]

    async def error(self, method: str, **params) -> dict:
        reply = await self.call(method, **params)
        assert "error" in reply, reply
        return reply["error"]

    async def server_request(self, method: str) -> dict:
        return await self.take(lambda m: m.get("method") == method and "id" in m)

    async def notification(self, method: str) -> dict:
        return await self.take(lambda m: m.get("method") == method and "id" not in m)

    async def start_turn(self, thread_id: str, text: str) -> str:
        return (await self.result("turn/start", threadId=thread_id, input=text))["turnId"]

    async def finish_turn(self, turn_id: str) -> list[dict]:
        """The turn's notifications, in order, up to and including turn/completed."""
        events = []
        while True:
            event = await self.take(
                lambda m: "id" not in m and m.get("params", {}).get("turnId") == turn_id
            )
            events.append(event)
            if event["method"] == "turn/completed":
                return events

    async def run_turn(self, thread_id: str, text: str) -> list[dict]:
        return await self.finish_turn(await self.start_turn(thread_id, text))

    async def wait(self) -> int:
        with trio.fail_after(TIMEOUT):
            return await self.process.wait()


@asynccontextmanager
async def spawn(home: Path):
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentd.actors.providers.scripted_agent", "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    try:
        yield AgentProcess(process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.stdin.aclose()
            await process.stdout.aclose()


@pytest.fixture
async def agent(tmp_path):
    async with spawn(tmp_path / "home") as agent:
        yield agent


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


async def new_thread(agent: AgentProcess, cwd: Path) -> str:
    return (await agent.result("thread/start", cwd=str(cwd)))["threadId"]


def completion(events: list[dict]) -> dict:
    assert events[-1]["method"] == "turn/completed"
    return events[-1]["params"]


def messages(events: list[dict]) -> list[str]:
    """Texts of the completed agentMessage items."""
    return [
        e["params"]["item"]["text"]
        for e in events
        if e["method"] == "item/completed" and e["params"]["item"]["type"] == "agentMessage"
    ]


def deltas(events: list[dict]) -> list[str]:
    return [e["params"]["delta"] for e in events if e["method"] == "item/agentMessage/delta"]


def items(events: list[dict], method: str, kind: str) -> list[dict]:
    return [
        e["params"]["item"]
        for e in events
        if e["method"] == method and e["params"]["item"]["type"] == kind
    ]


# -- Protocol basics ---------------------------------------------------------


async def test_initialize_reports_effective_capabilities(agent):
    result = await agent.result("initialize", clientInfo={"name": "tests"}, capabilities={"steer": False})
    assert result["agent"] == "scripted"
    assert result["version"] == "1"
    assert result["capabilities"] == {
        "steer": False,
        "nativeFork": True,
        "interrupt": True,
        "rollback": True,
        "structuredQuestions": True,
        "emptyThreads": True,
    }


async def test_unknown_method_and_garbage_line(agent):
    assert (await agent.error("no/such/method"))["code"] == -32601
    await agent.process.stdin.send_all(b"this is not json\n")
    warning = await agent.notification("warning")
    assert "not valid JSON" in warning["params"]["message"]
    # The agent keeps serving after a bad line.
    assert (await agent.result("initialize"))["agent"] == "scripted"


async def test_switched_off_capabilities_refuse_their_methods(agent, workdir):
    off = {name: False for name in ("steer", "nativeFork", "interrupt", "rollback", "emptyThreads")}
    await agent.result("initialize", capabilities=off)
    for method, params in [
        ("turn/steer", {"threadId": "t", "expectedTurnId": "u", "input": "x"}),
        ("thread/fork", {"threadId": "t"}),
        ("turn/interrupt", {"threadId": "t", "turnId": "u"}),
        ("thread/rollback", {"threadId": "t", "beforeTurnId": "u"}),
        ("thread/start", {"cwd": str(workdir)}),
    ]:
        error = await agent.error(method, **params)
        assert error["code"] == -32004
        assert "is not supported by this agent instance" in error["message"]


async def test_without_empty_threads_first_turn_creates_the_thread(agent, workdir):
    await agent.result("initialize", capabilities={"emptyThreads": False})
    started = await agent.result("turn/start", cwd=str(workdir), input="hi")
    assert started["threadId"].startswith("sth_")
    assert messages(await agent.finish_turn(started["turnId"])) == ["You said: hi"]


async def test_shutdown_and_eof_exit_cleanly(tmp_path):
    async with spawn(tmp_path / "home") as agent:
        assert await agent.result("shutdown") == {}
        assert await agent.wait() == 0
    async with spawn(tmp_path / "home") as agent:
        await agent.process.stdin.aclose()
        assert await agent.wait() == 0


# -- Turns (SPEC F2) ---------------------------------------------------------


async def test_default_echo_streams_three_deltas(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, "hello there")
    assert turn.startswith("stu_")
    events = await agent.finish_turn(turn)
    assert events[0]["method"] == "turn/started"
    assert all(e["params"]["threadId"] == thread for e in events)
    assert completion(events) == {"threadId": thread, "turnId": turn, "status": "completed"}
    assert len(deltas(events)) == 3
    assert "".join(deltas(events)) == "You said: hello there"
    assert messages(events) == ["You said: hello there"]
    [item] = items(events, "item/completed", "agentMessage")
    assert item["id"].startswith("sit_")
    assert {e["params"]["itemId"] for e in events if "delta" in e["params"]} == {item["id"]}


async def test_say_chunks_join_to_text(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"say": "hello world", "chunks": 4}, {"say": "hi", "chunks": 5}))
    assert completion(events)["status"] == "completed"
    assert messages(events) == ["hello world", "hi"]
    sent = deltas(events)
    assert "".join(sent[:4]) == "hello world"
    # More chunks than characters: one delta per character, none empty.
    assert sent[4:] == ["h", "i"]
    assert all(sent)


async def test_write_creates_file_under_cwd(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"write": {"path": "src/a.txt", "content": "data\n"}}))
    assert completion(events)["status"] == "completed"
    assert (workdir / "src" / "a.txt").read_text() == "data\n"
    [started] = items(events, "item/started", "fileChange")
    [done] = items(events, "item/completed", "fileChange")
    assert started["path"] == done["path"] == "src/a.txt"
    assert done["status"] == "completed"


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/tmp/absolute.txt"])
async def test_write_outside_cwd_fails_the_turn(agent, workdir, path):  # SPEC F2
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"write": {"path": path, "content": "x"}}))
    ending = completion(events)
    assert ending["status"] == "failed"
    assert path in ending["error"]
    assert not (workdir.parent / "outside.txt").exists()


async def test_fail_step_fails_the_turn(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"say": "before"}, {"fail": "boom"}, {"say": "after"}))
    assert completion(events) == {"threadId": thread, "turnId": events[0]["params"]["turnId"], "status": "failed", "error": "boom"}
    assert messages(events) == ["before"]


async def test_unknown_step_and_malformed_script_fail_the_turn(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    ending = completion(await agent.run_turn(thread, script({"dance": 3})))
    assert ending["status"] == "failed"
    assert "unknown script step" in ending["error"] and "dance" in ending["error"]
    ending = completion(await agent.run_turn(thread, "@script\n[{\"say\": "))
    assert ending["status"] == "failed"
    assert "not valid JSON" in ending["error"]
    # Nested past the recursion limit: the turn fails, the agent does not crash.
    ending = completion(await agent.run_turn(thread, "@script\n" + "[" * 100_000))
    assert ending["status"] == "failed" and "nested too deeply" in ending["error"]
    await agent.process.stdin.send_all(b"[" * 100_000 + b"\n")
    assert "not valid JSON" in (await agent.notification("warning"))["params"]["message"]
    assert (await agent.result("initialize"))["agent"] == "scripted"


async def test_crash_step_kills_the_process_with_its_code(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    await agent.start_turn(thread, script({"say": "going down"}, {"crash": 3}))
    assert await agent.wait() == 3


async def test_second_turn_while_one_runs_is_refused(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"hang": True}))
    assert (await agent.error("turn/start", threadId=thread, input="again"))["code"] == -32005
    await agent.result("turn/interrupt", threadId=thread, turnId=turn)
    assert completion(await agent.finish_turn(turn))["status"] == "interrupted"


async def test_turn_on_unloaded_thread_is_refused(agent):  # SPEC F2
    error = await agent.error("turn/start", threadId="sth_" + "0" * 32, input="hi")
    assert error["code"] == -32001


# -- Interrupt (SPEC F10) ----------------------------------------------------


async def test_interrupt_hang(agent, workdir):  # SPEC F10
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"say": "waiting"}, {"hang": True}, {"say": "never"}))
    await agent.take(lambda m: m.get("method") == "item/completed")  # "waiting" is out
    assert await agent.result("turn/interrupt", threadId=thread, turnId=turn) == {}
    events = await agent.finish_turn(turn)
    assert completion(events) == {"threadId": thread, "turnId": turn, "status": "interrupted"}
    assert "never" not in messages(events)
    listed = await agent.result("thread/turns/list", threadId=thread)
    assert listed["turns"][0]["status"] == "interrupted"


async def test_interrupt_hanging_tool_completes_it_as_interrupted(agent, workdir):  # SPEC F10
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"tool": {"name": "build", "hang": True}}))
    started = await agent.take(lambda m: m.get("method") == "item/started")
    assert started["params"]["item"]["type"] == "tool"
    assert started["params"]["item"]["name"] == "build"
    await agent.result("turn/interrupt", threadId=thread, turnId=turn)
    events = await agent.finish_turn(turn)
    [tool] = items(events, "item/completed", "tool")
    assert tool["id"] == started["params"]["item"]["id"]
    assert tool["status"] == "interrupted"
    assert completion(events)["status"] == "interrupted"


async def test_tool_with_seconds_completes(agent, workdir):  # SPEC F2
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"tool": {"name": "lint", "seconds": 0.01}}))
    [tool] = items(events, "item/completed", "tool")
    assert (tool["name"], tool["status"]) == ("lint", "completed")


async def test_interrupt_of_idle_thread_is_refused(agent, workdir):  # SPEC F10
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, "hi")
    await agent.finish_turn(turn)
    assert (await agent.error("turn/interrupt", threadId=thread, turnId=turn))["code"] == -32005


# -- Native state and resume (SPEC F11) --------------------------------------


async def test_resume_in_new_process_sees_prior_turns(tmp_path, workdir):  # SPEC F11
    home = tmp_path / "home"
    async with spawn(home) as agent:
        thread = await new_thread(agent, workdir)
        await agent.run_turn(thread, "one")
        events = await agent.run_turn(thread, script({"reportHistory": True}))
        assert messages(events) == ["history: 1 turn"]
        await agent.result("shutdown")
        assert await agent.wait() == 0
    stored = json.loads((home / "threads" / f"{thread}.json").read_text())
    assert stored["threadId"] == thread
    assert [t["input"] for t in stored["turns"]] == ["one", script({"reportHistory": True})]
    assert stored["turns"][1]["output"] == "history: 1 turn"
    async with spawn(home) as agent:
        assert await agent.result("thread/resume", threadId=thread) == {"threadId": thread, "turnCount": 2, "historyMode": "paginated"}
        events = await agent.run_turn(thread, script({"reportHistory": True}))
        assert messages(events) == ["history: 2 turns"]


async def test_resume_after_crash_keeps_finished_turns(tmp_path, workdir):  # SPEC F11
    home = tmp_path / "home"
    async with spawn(home) as agent:
        thread = await new_thread(agent, workdir)
        await agent.run_turn(thread, "kept")
        await agent.start_turn(thread, script({"crash": 9}))
        assert await agent.wait() == 9
    async with spawn(home) as agent:
        assert (await agent.result("thread/resume", threadId=thread))["turnCount"] == 1


async def test_resume_missing_thread(agent):  # SPEC F11
    error = await agent.error("thread/resume", threadId="sth_" + "0" * 32)
    assert error["code"] == -32001
    assert "not found" in error["message"]


async def test_resume_corrupt_thread(tmp_path, workdir):  # SPEC F11
    home = tmp_path / "home"
    async with spawn(home) as agent:
        thread = await new_thread(agent, workdir)
    (home / "threads" / f"{thread}.json").write_text("{not json")
    async with spawn(home) as agent:
        error = await agent.error("thread/resume", threadId=thread)
        assert error["code"] == -32002
        assert "corrupt" in error["message"]


async def test_fork_copies_turns(agent, workdir):  # SPEC F11
    thread = await new_thread(agent, workdir)
    first = await agent.start_turn(thread, "first")
    await agent.finish_turn(first)
    await agent.run_turn(thread, "second")
    whole = (await agent.result("thread/fork", threadId=thread))["threadId"]
    part = (await agent.result("thread/fork", threadId=thread, lastTurnId=first))["threadId"]
    assert len({thread, whole, part}) == 3
    whole_turns = (await agent.result("thread/turns/list", threadId=whole))["turns"]
    part_turns = (await agent.result("thread/turns/list", threadId=part))["turns"]
    assert [t["input"] for t in whole_turns] == ["first", "second"]
    assert part_turns == [{"turnId": first, "input": "first", "status": "completed"}]
    # A fork is loaded and has its own history.
    assert messages(await agent.run_turn(part, script({"reportHistory": True}))) == ["history: 1 turn"]
    error = await agent.error("thread/fork", threadId=thread, lastTurnId="stu_nope")
    assert error["code"] == -32003


async def test_recall_says_where_the_agent_sees_each_word(agent, workdir):  # SPEC F5, F6
    """The oracle lineage tests use: native history (earlier inputs and
    outputs), injected context only (this turn's or an earlier one's), or absent."""
    thread = await new_thread(agent, workdir)
    await agent.run_turn(thread, "alpha said here")
    second = (await agent.result("turn/start", threadId=thread, input=script({"say": "bravo"}), context="[handoff] charlie"))["turnId"]
    await agent.finish_turn(second)
    turn = (await agent.result("turn/start", threadId=thread, input=script({"recall": ["alpha", "bravo", "charlie", "delta", "alph"]}),
                                context="delta arrives now"))["turnId"]
    assert messages(await agent.finish_turn(turn)) == [
        "recall: alpha=native bravo=native charlie=context delta=context alph=absent"
    ]
    # A native fork keeps what was context as context; a recall's own input is not "seen".
    fork = (await agent.result("thread/fork", threadId=thread, lastTurnId=second))["threadId"]
    assert messages(await agent.run_turn(fork, script({"recall": ["alpha", "charlie", "delta", "echo"]}))) == [
        "recall: alpha=native charlie=context delta=absent echo=absent"
    ]
    error_events = await agent.run_turn(thread, script({"recall": "alpha"}))
    assert completion(error_events)["status"] == "failed"


async def test_rollback_drops_turns(agent, workdir):  # SPEC F11
    thread = await new_thread(agent, workdir)
    turns = []
    for text in ("a", "b", "c"):
        turns.append(await agent.start_turn(thread, text))
        await agent.finish_turn(turns[-1])
    assert await agent.result("thread/rollback", threadId=thread, beforeTurnId=turns[1]) == {"turnCount": 1}
    listed = (await agent.result("thread/turns/list", threadId=thread))["turns"]
    assert [t["turnId"] for t in listed] == turns[:1]
    assert messages(await agent.run_turn(thread, script({"reportHistory": True}))) == ["history: 1 turn"]
    error = await agent.error("thread/rollback", threadId=thread, beforeTurnId=turns[2])
    assert error["code"] == -32003


# -- Approvals and questions (SPEC F15) --------------------------------------


@pytest.mark.parametrize("decision", ["accept", "decline"])
async def test_approval_round_trip(agent, workdir, decision):  # SPEC F15
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"approval": {"kind": "command", "command": "rm -rf build"}}))
    request = await agent.server_request("item/approval/request")
    params = request["params"]
    assert (params["threadId"], params["turnId"]) == (thread, turn)
    assert (params["kind"], params["command"]) == ("command", "rm -rf build")
    assert params["itemId"].startswith("sit_")
    await agent.send({"id": request["id"], "result": {"decision": decision}})
    events = await agent.finish_turn(turn)
    assert messages(events) == [f"approval: {decision}"]
    [approval] = items(events, "item/completed", "approval")
    assert approval["id"] == params["itemId"]
    assert approval["decision"] == decision


async def test_interrupt_while_waiting_for_approval(agent, workdir):  # SPEC F10, F15
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"approval": {"kind": "command", "command": "ls"}}))
    request = await agent.server_request("item/approval/request")
    await agent.result("turn/interrupt", threadId=thread, turnId=turn)
    events = await agent.finish_turn(turn)
    assert items(events, "item/completed", "approval")[0]["status"] == "interrupted"
    assert completion(events)["status"] == "interrupted"
    # A late answer is harmless: the agent warns and carries on.
    await agent.send({"id": request["id"], "result": {"decision": "accept"}})
    assert "srv-" in (await agent.notification("warning"))["params"]["message"]


QUESTIONS = [
    {"id": "db", "question": "Which database?", "options": ["sqlite", "postgres"]},
    {"id": "tests", "question": "Write tests?", "options": ["yes", "no"]},
]


async def test_ask_with_structured_questions(agent, workdir):  # SPEC F15
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(thread, script({"ask": {"questions": QUESTIONS}}, {"say": "done"}))
    request = await agent.server_request("item/userInput/request")
    assert request["params"]["questions"] == QUESTIONS
    assert request["params"]["turnId"] == turn
    await agent.send({"id": request["id"], "result": {"answers": {"tests": "yes", "db": "sqlite"}}})
    events = await agent.finish_turn(turn)
    assert messages(events) == ["answers: db=sqlite, tests=yes", "done"]


async def test_ask_without_structured_questions_says_them(agent, workdir):  # SPEC F15
    await agent.result("initialize", capabilities={"structuredQuestions": False})
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(thread, script({"ask": {"questions": QUESTIONS}}, {"say": "done"}))
    assert messages(events) == ["? Which database?\n? Write tests?", "done"]
    assert completion(events)["status"] == "completed"
    assert not [m for m in agent.inbox if m.get("method") == "item/userInput/request"]


# -- Plans and subagents (SPEC F16) ------------------------------------------


async def test_plan_notification_and_proposed_plan(agent, workdir):  # SPEC F16
    thread = await new_thread(agent, workdir)
    plan = [{"step": "read", "status": "completed"}, {"step": "write", "status": "in_progress"}]
    events = await agent.run_turn(thread, script({"plan": plan}, {"proposePlan": "# Plan\n- do it"}))
    [update] = [e for e in events if e["method"] == "turn/plan/updated"]
    assert update["params"]["plan"] == plan
    assert "itemId" not in update["params"]
    [proposed] = items(events, "item/completed", "plan")
    assert proposed["text"] == "# Plan\n- do it"


async def test_subagent_items_carry_parent_item_id(agent, workdir):  # SPEC F16
    thread = await new_thread(agent, workdir)
    events = await agent.run_turn(
        thread,
        script(
            {"say": "outer"},
            {"subagent": {"steps": [
                {"say": "inner"},
                {"plan": [{"step": "x", "status": "pending"}]},
                {"write": {"path": "sub.txt", "content": "s"}},
            ]}},
        ),
    )
    [sub_started] = items(events, "item/started", "subagent")
    [sub_done] = items(events, "item/completed", "subagent")
    assert sub_done["id"] == sub_started["id"] and sub_done["status"] == "completed"
    outer, inner = items(events, "item/completed", "agentMessage")
    assert "parentItemId" not in outer
    assert inner["parentItemId"] == sub_done["id"]
    assert items(events, "item/completed", "fileChange")[0]["parentItemId"] == sub_done["id"]
    [update] = [e for e in events if e["method"] == "turn/plan/updated"]
    assert update["params"]["itemId"] == sub_done["id"]
    # The subagent completes only after its nested items.
    methods = [(e["method"], e["params"].get("item", {}).get("type")) for e in events]
    assert methods.index(("item/completed", "subagent")) > methods.index(("item/completed", "fileChange"))


# -- Steering ----------------------------------------------------------------


async def test_steer_is_said_before_the_next_step(agent, workdir):
    thread = await new_thread(agent, workdir)
    turn = await agent.start_turn(
        thread, script({"approval": {"kind": "command", "command": "ls"}}, {"say": "after"})
    )
    # The approval holds the turn still, so the steer lands mid-turn.
    request = await agent.server_request("item/approval/request")
    steered = await agent.result("turn/steer", threadId=thread, expectedTurnId=turn, input="use tabs")
    assert steered == {"turnId": turn}
    await agent.send({"id": request["id"], "result": {"decision": "accept"}})
    events = await agent.finish_turn(turn)
    assert messages(events) == ["approval: accept", "steered: use tabs", "after"]
    wrong = await agent.error("turn/steer", threadId=thread, expectedTurnId=turn, input="late")
    assert wrong["code"] == -32005


def test_the_readme_documents_every_step_with_its_arguments():
    """Issue 13: the README's table has a row per step, showing its JSON shape."""
    from pathlib import Path

    from agentd.actors.providers.scripted_agent import Turn

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## The scripted agent", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `{")]
    documented = [row.split('"', 2)[1] for row in rows]
    assert sorted(documented) == sorted(Turn._STEPS)
    assert all(":" in row.split("|")[1] for row in rows), "every row shows the step's arguments"
