"""The method table is the one declaration of the protocol's methods (issue 8):
the contract documents exactly its methods, and every entry is well formed."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import msgspec

from agentd.protocol.methods import Method, MethodTable
from agentd.protocol.wire import Params
from agentd.supervisor.methods import METHODS

CONTRACT = Path(__file__).resolve().parents[1] / "protocol" / "README.md"


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


def test_every_entry_is_well_formed():
    for name, method in METHODS.items():
        assert method.name == name
        assert issubclass(method.params, Params), name
        assert inspect.iscoroutinefunction(method.handler), name
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


def test_a_method_declared_without_access_is_control():
    async def handler(*_args):
        return {}

    assert Method("x.y", Params, "daemon", handler).access == "control"
