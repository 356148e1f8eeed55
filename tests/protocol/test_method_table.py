"""The method table is the one declaration of the protocol's methods (issue 8):
the contract documents exactly its methods, and every entry is well formed.
Each method's signature (its params and result Structs, ``protocol/signatures.py``)
is what the contract's heading says it takes and answers, and what
``agentd schema`` exports (issue 22)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import msgspec

from agentd import __version__
from agentd.protocol import results
from agentd.protocol.methods import Method, MethodTable
from agentd.protocol.schema import document
from agentd.protocol.signatures import SIGNATURES
from agentd.protocol.wire import Params
from agentd.supervisor.methods import METHODS

CONTRACT = Path(__file__).resolve().parents[2] / "protocol" / "README.md"


def documented_methods() -> list[str]:
    """Method names from the contract's ``### `name {params}` → …`` headings."""
    text = CONTRACT.read_text(encoding="utf-8")
    section = text.split("\n## Methods", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^### `([a-z][a-zA-Z.-]*[a-zA-Z])\b", section, flags=re.MULTILINE)


def test_contract_documents_exactly_the_table():
    documented = documented_methods()
    assert len(documented) == len(set(documented)), "a method is documented twice"
    assert sorted(documented) == sorted(METHODS), (
        f"undocumented: {sorted(set(METHODS) - set(documented))}; "
        f"documented but not in the table: {sorted(set(documented) - set(METHODS))}"
    )


def test_the_table_the_signatures_and_the_schema_name_the_same_methods():
    assert list(SIGNATURES) == list(METHODS)
    assert list(document(__version__)["methods"]) == list(METHODS)


def headings() -> dict[str, tuple[str, str]]:
    """``name -> (params, answer)`` from the contract's ``### `name {params}` → answer`` headings."""
    text = CONTRACT.read_text(encoding="utf-8")
    section = text.split("\n## Methods", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^### `([a-z][a-zA-Z.-]*[a-zA-Z]) (\{.*?\})` → (.*)$", section, flags=re.MULTILINE)
    return {name: (params, answer) for name, params, answer in found}


def top_level_fields(braced: str) -> dict[str, bool]:
    """``{a, b?, c: [{x}]}`` -> ``{"a": True, "b": False, "c": True}`` (name -> required)."""
    inner, depth, fields, field = braced.strip()[1:-1], 0, {}, ""
    for char in inner + ",":
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        if char == "," and depth == 0:
            name = field.split(":", 1)[0].strip()
            if name:
                fields[name.rstrip("?")] = not name.endswith("?")
            field = ""
        else:
            field += char
    return fields


def struct_fields(struct: type) -> dict[str, bool]:
    """The wire names of a Struct's fields -> whether they are required."""
    return {f.encode_name: f.required for f in msgspec.structs.fields(struct)}


def test_the_contract_headings_name_each_signatures_fields():
    """Issue 22: the params a heading lists are the params Struct's (``?``
    exactly where a param may be left out), and the answer it lists names
    the result Struct's fields (an answer that is not an object is said in
    words: ``like steer_active``, ``always unsupported``)."""
    documented = headings()
    assert sorted(documented) == sorted(SIGNATURES)
    for name, (params, answer) in documented.items():
        signature = SIGNATURES[name]
        assert top_level_fields(params) == struct_fields(signature.params), name
        if signature.result is results.Never:
            assert answer == "always `unsupported`", name
        elif answer.startswith("`{"):
            listed = top_level_fields(answer.strip("`"))
            assert set(listed) == set(struct_fields(signature.result)), (
                f"{name}: the contract lists {sorted(listed)}, its result Struct has "
                f"{sorted(struct_fields(signature.result))}")
        else:
            assert answer == "like `steer_active`" and signature.result is SIGNATURES["thread.message.send"].result, name


def test_every_entry_is_well_formed():
    for name, method in METHODS.items():
        assert method.name == name
        assert issubclass(method.params, Params), name
        assert (method.params, method.result) == SIGNATURES[name], name
        if method.owner == "daemon":
            assert inspect.iscoroutinefunction(method.handler), name
        else:
            # a thread's handler is a transition of its context (a Decision, or a
            # generator of effects that ends in one: actors/thread_actor.py)
            assert callable(method.handler), name
        if method.owner == "thread":
            assert method.route is not None, name
        # Params Structs refuse unknown fields, so a typo is invalid_params.
        assert method.params.__struct_config__.forbid_unknown_fields, name


def test_params_reach_handlers_typed():
    method = METHODS["run.interrupt"]
    params = method.decode({"runId": "run_1", "holdQueue": True})
    assert type(params) is method.params
    assert params.run_id == "run_1" and params.hold_queue is True


def test_a_name_is_declared_once():
    async def handler(*_args):
        return {}

    entry = Method("x.y", Params, "daemon", handler)
    try:
        MethodTable([entry, entry])
    except ValueError as exc:
        assert "declared twice" in str(exc)
    else:  # pragma: no cover - the assertion is the point
        raise AssertionError("a duplicate method name was accepted")


def test_thread_methods_need_a_route():
    async def handler(*_args):
        return {}

    try:
        Method("x.y", Params, "thread", handler)
    except ValueError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a thread-owned method without a route was accepted")
    assert msgspec.structs.fields(METHODS["thread.get"].params)


def documented_access() -> dict[str, set[str]]:
    """Method names per access, from the contract's "Who may call what" table."""
    text = CONTRACT.read_text(encoding="utf-8")
    section = text.split("\n## Who may call what", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for access, methods in re.findall(r"^\| `(open|tool|control)` \|[^|]*\| (.*) \|$", section, flags=re.MULTILINE):
        rows[access] = set(re.findall(r"`([a-z][a-zA-Z.-]*[a-zA-Z])`", methods))
    return rows


def test_contract_says_who_may_call_each_method():
    """Hostile-round item 11 (SPEC F20): every method's access — open to an
    agent's processes, agentd's tool, or the person's control — is the one
    the contract lists; ``thread.create`` is open only as an agent's."""
    documented = documented_access()
    assert set(documented) == {"open", "tool", "control"}
    for name, method in METHODS.items():
        rows = {access for access, names in documented.items() if name in names}
        if callable(method.access):
            assert rows == {"open", "control"}, name
            continue
        assert rows == {method.access}, f"{name} is {method.access} but documented as {rows}"
    create = METHODS["thread.create"]
    assert create.access_for(create.decode({})) == "control"
    assert create.access_for(create.decode({"createdBy": "system"})) == "control"
    assert create.access_for(create.decode({"createdBy": "agent"})) == "open"
    # MCP servers are processes its runtimes start: the person's to give (issue 26), as thread.update's.
    servers = [{"type": "stdio", "name": "files", "command": "/usr/bin/env"}]
    assert create.access_for(create.decode({"createdBy": "agent", "mcpServers": servers})) == "control"


def test_a_method_declared_without_access_is_control():
    async def handler(*_args):
        return {}

    assert Method("x.y", Params, "daemon", handler).access == "control"
