"""Stored records keep decoding across versions (msgspec schema evolution rule)."""

from pathlib import Path

import msgspec
import pytest

from agentd.store.records import RECORD_KINDS, RecordDecodeError, decode_record, encode_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records"


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_every_kind_has_a_stored_fixture_that_decodes(kind):
    cls, version = RECORD_KINDS[kind]
    files = sorted(FIXTURES.glob(f"{kind}.v*.msgpack"))
    assert files, f"no stored fixture for {kind}: run scripts/make_record_fixtures.py"
    for path in files:
        record = decode_record(kind, path.read_bytes())
        assert isinstance(record, cls)
        # Re-encoding with today's code decodes to the same record.
        assert decode_record(kind, encode_record(kind, record)) == record


def test_fixture_values_survive():
    thread = decode_record("threads", (FIXTURES / "threads.v1.msgpack").read_bytes())
    assert (thread.id, thread.title, thread.run_count) == ("thr_fixture", "fixture", 1)
    event = decode_record("events", (FIXTURES / "events.v1.msgpack").read_bytes())
    assert (event.seq, event.type, event.payload) == (7, "run.completed", {"k": [1, 2]})


def test_newer_schema_version_is_refused_clearly():
    data = bytearray((FIXTURES / "runs.v1.msgpack").read_bytes())
    data[0] = 99
    with pytest.raises(RecordDecodeError, match="newer than this agentd"):
        decode_record("runs", bytes(data))


def test_garbage_is_a_decode_error_not_a_crash():
    with pytest.raises(RecordDecodeError):
        decode_record("runs", b"\x01\xc1garbage")


def test_wire_names_are_camel_case():
    thread = decode_record("threads", (FIXTURES / "threads.v1.msgpack").read_bytes())
    wire = msgspec.to_builtins(thread)
    assert "runCount" in wire and "run_count" not in wire
