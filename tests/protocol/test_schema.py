"""Issue 22: typed results and one exported JSON Schema of the protocol.

- ``agentd schema`` prints one JSON Schema document — every method's params
  and result, every event's payload — without a daemon, from modules that
  import no trio; every schema in it is a valid 2020-12 schema whose
  references resolve.
- The wire shapes of the records (``protocol/wire_records.py``) are the
  store's records field for field, so the schema says what ``to_wire`` sends.
- With ``AGENTD_CHECK_RESULTS`` (as the suite's daemons run), the server holds
  every answer to its method's result Struct, on each of its paths (answered
  where it was read, in a task, when a queued batch is durable), and answers
  ``internal`` instead of something the schema does not allow.

That real answers and events match the document is checked by the suite's
client on everything it receives (``tests/schema_check.py``), and once for
the contract's whole event log (``tests/protocol/test_contract.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from typing import Any

import jsonschema
import msgspec
import pytest
import trio

from agentd import __version__
from agentd.actors.checkpoints import results as engine_results
from agentd.actors.providers.base import Capabilities
from agentd.protocol import events, results, server, wire_records
from agentd.protocol.limits import ServerLimits
from agentd.protocol.methods import Later, Method, MethodTable, ResultMismatch, run_now
from agentd.protocol.schema import document
from agentd.protocol.server import serve_unix
from agentd.protocol.signatures import SIGNATURES
from agentd.protocol.wire import NoParams
from agentd.store import records
from agentd.store.reconcile import ReconcileReport

from tests import schema_check
from tests.protocol.test_hostile_clients import read_line

# -- the document ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def printed() -> dict[str, Any]:
    """What ``agentd schema`` prints (no daemon, no data dir: none is given)."""
    done = subprocess.run([sys.executable, "-m", "agentd", "schema"], capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def test_agentd_schema_prints_the_whole_protocol_in_one_document(printed):
    assert list(printed) == ["$schema", "version", "methods", "events", "$defs"]
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert printed["version"] == __version__
    assert list(printed["methods"]) == list(SIGNATURES)
    assert set(printed["events"]) == set(events.EVENTS)
    assert printed == json.loads(json.dumps(document(__version__)))
    for name, entry in printed["methods"].items():
        assert set(entry) == {"params", "result"}, name
    # run.resume never answers with a result: nothing matches its schema.
    assert printed["methods"]["run.resume"]["result"] is False
    assert printed["methods"]["thread.create"]["result"] == {"$ref": "#/$defs/ThreadCreateResult"}


def references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(references(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(references(v) for v in node))
    return set()


def test_every_schema_in_it_is_valid_and_every_reference_resolves(printed):
    defs = printed["$defs"]
    assert {ref.removeprefix("#/$defs/") for ref in references(printed)} <= set(defs)
    validator = jsonschema.validators.validator_for({"$schema": printed["$schema"]})
    validator.check_schema({"$defs": defs})  # every definition, once (each check walks what it is given)
    for entry in printed["methods"].values():
        for node in entry.values():
            validator.check_schema(node)
    for node in printed["events"].values():
        validator.check_schema(node)
    # Params refuse unknown fields, and so does the schema.
    assert defs["MessageSendParams"]["additionalProperties"] is False
    assert defs["MessageSendParams"]["required"] == ["threadId", "text"]


def test_a_thread_list_entry_is_a_thread_or_a_corrupt_stand_in(printed):
    """msgspec cannot tell two untagged objects apart; the schema does."""
    entry = printed["$defs"]["ThreadListResult"]["properties"]["threads"]["items"]
    assert entry["anyOf"] == [{"$ref": "#/$defs/AppThread"}, {"$ref": "#/$defs/CorruptThread"}]
    root = {"$schema": printed["$schema"], "$defs": printed["$defs"], **printed["methods"]["thread.list"]["result"]}
    valid = jsonschema.Draft202012Validator(root).is_valid
    assert valid({"threads": [{"id": "thr_1", "title": "t"}, {"id": "thr_2", "corrupt": True, "reason": "torn"}]})
    assert not valid({"threads": [{"id": "thr_2", "corrupt": True}]})


def test_the_schema_is_made_without_trio_or_the_daemon():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, agentd.schema_cmd, agentd.protocol.schema\n"
         "agentd.protocol.schema.document('x')\n"
         "print(' '.join(m for m in sys.modules if m == 'trio' or m.startswith(('agentd.actors', 'agentd.supervisor',"
         " 'agentd.store'))))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()
    assert loaded == []


# -- the wire shapes are the records' ----------------------------------------------------------------

#: wire fields whose shape the contract spells out where the store keeps a loose mapping
REFINED = {("Checkpoint", "summary")}


def shape(struct: type) -> dict[str, tuple[str, Any, Any]]:
    """``field -> (wire name, type, default)`` of a Struct."""
    hints = typing.get_type_hints(struct, include_extras=True)
    return {f.name: (f.encode_name, hints[f.name], f.default if f.default is not msgspec.NODEFAULT else f.default_factory)
            for f in msgspec.structs.fields(struct)}


def same_type(wire: Any, stored: Any) -> bool:
    """The same annotation, a record named in it being the same-named shape on either side."""
    def plain(annotation: Any) -> str:
        return str(annotation).replace("agentd.protocol.wire_records.", "").replace("agentd.store.records.", "")
    return plain(wire) == plain(stored)


@pytest.mark.parametrize("name", sorted(wire_records.RECORDS))
def test_each_records_wire_shape_is_the_stored_record(name):
    stored, wire = shape(getattr(records, name)), shape(wire_records.RECORDS[name])
    assert list(stored) == list(wire), f"{name}: the wire shape lists other fields than the store"
    for field, (encode_name, annotation, default) in stored.items():
        wire_name, wire_annotation, wire_default = wire[field]
        assert wire_name == encode_name, (name, field)
        if (name, field) in REFINED:
            continue
        assert same_type(wire_annotation, annotation), (name, field)
        assert wire_default == default, (name, field)


@pytest.mark.parametrize(("wire", "source"), [
    (results.Capabilities, Capabilities),
    (results.FileChange, engine_results.FileChange),
    (results.NotRestored, engine_results.NotRestored),
    (wire_records.SkippedFile, engine_results.SkippedFile),
], ids=lambda c: c.__module__.rsplit(".", 1)[-1] + "." + c.__name__)
def test_the_shapes_the_engine_and_the_providers_send_are_theirs(wire, source):
    assert shape(wire) == shape(source)


def test_a_checkpoint_summary_holds_what_the_engine_summarises():
    engine = set(shape(engine_results.CheckpointSummary))
    assert set(shape(wire_records.CheckpointSummary)) == engine | {"children"}


def test_reconciliation_counts_are_the_reports():
    report = set(ReconcileReport().as_dict())
    assert {f.encode_name for f in msgspec.structs.fields(events.ReconcileCounts)} == report
    fields = {f.encode_name for f in msgspec.structs.fields(events.ThreadFailed)}
    assert fields == report | {"incidentId", "reason", "quarantined"}


def test_every_status_vocabulary_is_the_stores():
    for name in ("ThreadStatus", "MessageStatus", "RunStatus", "AttemptStatus", "NodeStatus", "SessionStatus",
                 "ProviderThreadStatus", "RequestStatus", "ArtifactStatus", "CheckpointStatus", "CheckpointKind",
                 "TransferType", "TransferStatus", "TransferResolution", "HandoffStrategy", "SourcePointType",
                 "CreatedBy"):
        assert typing.get_args(getattr(wire_records, name)) == typing.get_args(getattr(records, name)), name


def test_a_record_as_to_wire_sends_it_is_its_wire_shape():
    thread = records.AppThread(id="thr_1", title="t", held_run_ids=["run_1"])
    assert msgspec.convert(records.to_wire(thread), wire_records.AppThread).held_run_ids == ["run_1"]
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({**records.to_wire(thread), "extra": 1}, wire_records.AppThread)


# -- the suite's client holds what it receives to the document ------------------------------------------


def test_the_clients_check_refuses_every_answer_off_the_schema_even_after_an_equal_looking_one_matched():
    """``tests/schema_check.py`` remembers answers that matched (the suite's
    clients receive the same ones again and again); an answer that differs
    from them in any way, down to a type, is validated and refused, each time."""
    good = {"threadId": "thr_1", "seq": 3, "transferId": None}
    for _ in range(2):  # the second time from what the check remembers
        schema_check.check_result("thread.create", dict(good))
    for bad in ({**good, "seq": "3"}, {**good, "seq": 3.5}, {**good, "seq": True}, {**good, "transferId": 7},
                {"threadId": "thr_1"}, {**good, "runId": "run_1"}, {**good, "seq": float("nan")}):
        for _ in range(2):
            with pytest.raises(schema_check.SchemaMismatch, match="ThreadCreateResult|thread.create"):
                schema_check.check_result("thread.create", bad)
    event = {"seq": 1, "type": "thread.created", "threadId": "thr_1", "payload": {}}
    with pytest.raises(schema_check.SchemaMismatch):
        schema_check.check_event(event)
    with pytest.raises(schema_check.SchemaMismatch, match="no such method"):
        schema_check.check_result("no.such.method", good)


# -- the server holds answers to their Structs -------------------------------------------------------


def test_check_result_takes_the_struct_or_its_mapping_and_nothing_else():
    method = Method("thread.create", NoParams, "daemon", _never, result=results.ThreadCreateResult)
    method.check_result({"threadId": "thr_1", "seq": 3})
    method.check_result(results.ThreadCreateResult(thread_id="thr_1", seq=3))
    with pytest.raises(ResultMismatch, match=r"thread.create .*ThreadCreateResult.*seq"):
        method.check_result({"threadId": "thr_1"})
    with pytest.raises(ResultMismatch, match="unknown field"):
        method.check_result({"threadId": "thr_1", "seq": 3, "runId": "run_1"})
    never = Method("run.resume", NoParams, "daemon", _never, result=results.Never)
    with pytest.raises(ResultMismatch, match="never answers"):
        never.check_result({})
    # A test's ad-hoc method declares none: nothing is checked.
    Method("echo", NoParams, "daemon", _never).check_result({"anything": True})


async def _never(*_args):  # pragma: no cover - never dispatched
    raise AssertionError


class AnsweringRouter:
    """``good``/``bad`` answer with and off ``ThreadCreateResult``: where the
    request is read (``quick``), in a task (``task``) and once a ``Later``
    resolves (``later``)."""

    def __init__(self) -> None:
        def method(name: str, answer: dict[str, Any], path: str) -> Method:
            async def handler(_router, _params, _conn):
                await trio.lowlevel.checkpoint()
                return answer

            async def plain(_router, _params, _conn):
                return answer

            def later(_router, _params, _conn):
                pending = Later()
                pending.resolve(answer)
                return pending

            quick = {"quick": run_now(plain), "later": later, "task": None}[path]
            return Method(name, NoParams, "daemon", handler, quick=quick, access="open",
                          result=results.ThreadCreateResult)

        good, bad = {"threadId": "thr_1", "seq": 1}, {"threadId": "thr_1", "seq": "one"}
        self.methods = MethodTable(
            [method(f"good.{path}", good, path) for path in ("quick", "task", "later")]
            + [method(f"bad.{path}", bad, path) for path in ("quick", "task", "later")]
        )

    async def dispatch(self, method, params, connection):
        return await method.handler(self, params, connection)


async def test_with_checks_on_an_answer_off_its_schema_is_an_internal_error_on_every_path(short_dir, nursery):
    assert server.CHECK_RESULTS, "the suite's conftest sets AGENTD_CHECK_RESULTS before agentd is imported"
    path = short_dir / "c.sock"
    await nursery.start(lambda task_status: serve_unix(path, AnsweringRouter(), limits=ServerLimits(),
                                                       task_status=task_status))
    stream = await trio.open_unix_socket(str(path))
    buffer = bytearray()
    for request_id, path_name in enumerate(("quick", "task", "later")):
        for verdict in ("good", "bad"):
            line = {"jsonrpc": "2.0", "id": request_id, "method": f"{verdict}.{path_name}"}
            await stream.send_all(json.dumps(line).encode() + b"\n")
            reply = await read_line(stream, buffer)
            if verdict == "good":
                assert reply["result"] == {"threadId": "thr_1", "seq": 1}, path_name
            else:
                error = reply["error"]
                assert error["data"]["kind"] == "internal", path_name
                assert "does not match its schema (ThreadCreateResult)" in error["message"], path_name
    await stream.aclose()
