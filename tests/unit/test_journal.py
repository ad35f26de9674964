"""The journal: durable, write-once entries of what each receiver got, local and on S3."""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.errors import JournalError
from spark_sqs.journal import (
    RECEIVED_AT,
    AckedEntry,
    AckReport,
    EntryReceipts,
    Journal,
    JournalState,
)
from spark_sqs.schema import messages_to_table
from tests.fakes import HookedStore
from tests.unit.factories import QUEUE_URL, make_options, sqs_message

OTHER_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/payments"


def table_of(*numbers: int, **kwargs: Any) -> pa.Table:
    return messages_to_table([sqs_message(n, **kwargs) for n in numbers], QUEUE_URL)


def pairs(receipts: list[Any]) -> list[tuple[str, str]]:
    """(message id, receipt handle) of journal receipts, in order."""
    return [pair for r in receipts for pair in zip(r.message_ids, r.receipt_handles, strict=True)]


def handles_of(table: pa.Table) -> list[tuple[str, str]]:
    return list(
        zip(
            table.column("messageId").to_pylist(),
            table.column("_receiptHandle").to_pylist(),
            strict=True,
        )
    )


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


# -- entries -----------------------------------------------------------------------------------


def test_write_and_read_entry_round_trip(journal: Journal) -> None:
    attrs = {"blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    table = table_of(0, 1, 2, attributes=attrs, fifo=True)

    assert journal.write_entry(7, 3, table) is True
    back = journal.read_entry(7, 3)

    assert back is not None
    assert back.equals(table)
    assert back.schema == table.schema


def test_entry_of_no_messages_round_trips(journal: Journal) -> None:
    empty = table_of()
    assert journal.write_entry(2, 0, empty) is True
    back = journal.read_entry(2, 0)
    assert back is not None and back.num_rows == 0
    assert back.schema == empty.schema
    assert journal.receivers(2) == [0]


def test_missing_entry_reads_as_none(journal: Journal) -> None:
    assert journal.read_entry(1, 0) is None
    journal.write_entry(1, 0, table_of(0))
    assert journal.read_entry(1, 1) is None
    assert journal.read_entry(2, 0) is None


def test_existing_entry_is_never_overwritten(journal: Journal) -> None:
    first = table_of(0, 1)
    second = table_of(5, 6, 7)

    assert journal.write_entry(4, 2, first) is True
    assert journal.write_entry(4, 2, second) is False
    # A retried task attempt sees exactly what the first attempt journaled.
    back = journal.read_entry(4, 2)
    assert back is not None and back.equals(first)


def test_write_leaves_no_temporary_files(journal: Journal, location: str) -> None:
    journal.write_entry(1, 0, table_of(0))
    journal.write_entry(1, 0, table_of(1))  # refused
    batch_dir = Path(location) / "batches" / "000000000001"
    assert sorted(p.name for p in batch_dir.iterdir()) == ["00000.arrow"]


def test_receivers_and_batches_listing(journal: Journal, location: str) -> None:
    assert journal.batches() == []
    assert journal.receivers(1) == []

    for batch, receiver in [(12, 0), (3, 2), (3, 0), (3, 11), (1, 0)]:
        journal.write_entry(batch, receiver, table_of(batch * 100 + receiver))
    # Stray files are not entries or batches.
    (Path(location) / "batches" / "README").write_text("not a batch")
    (Path(location) / "batches" / "000000000003" / "notes.txt").write_text("not an entry")
    (Path(location) / "batches" / "000000000003" / "00001.arrow.tmp-123").write_text("partial")

    assert journal.batches() == [1, 3, 12]
    assert journal.receivers(3) == [0, 2, 11]
    assert journal.receivers(12) == [0]
    assert journal.receivers(2) == []
    assert [r.receiver for r in journal.batch_receipts(3)] == [0, 2, 11]


def test_read_receipts_returns_message_ids_and_receipt_handles(journal: Journal) -> None:
    table = table_of(0, 1, 2, receive_count=2)
    journal.write_entry(5, 1, table)

    assert pairs([journal.read_receipts(5, 1)]) == [
        ("00000000-0000-4000-8000-000000000000", "AQEB-receipt-0-2"),
        ("00000000-0000-4000-8000-000000000001", "AQEB-receipt-1-2"),
        ("00000000-0000-4000-8000-000000000002", "AQEB-receipt-2-2"),
    ]
    assert journal.read_receipts(5, 9) is None


def test_batch_receipts_collects_every_receiver(journal: Journal) -> None:
    a, b = table_of(0, 1), table_of(2)
    journal.write_entry(6, 0, a)
    journal.write_entry(6, 4, b)
    journal.write_entry(7, 0, table_of(9))

    assert pairs(journal.batch_receipts(6)) == handles_of(a) + handles_of(b)
    assert pairs(journal.batch_receipts(8)) == []


def test_read_receipts_carries_the_receive_time(journal: Journal) -> None:
    table = table_of(0, 1).replace_schema_metadata({RECEIVED_AT: repr(1_700_000_000.25)})
    journal.write_entry(5, 2, table)

    receipts = journal.read_receipts(5, 2)

    assert receipts == EntryReceipts(
        batch=5,
        receiver=2,
        received_at=1_700_000_000.25,
        message_ids=(
            "00000000-0000-4000-8000-000000000000",
            "00000000-0000-4000-8000-000000000001",
        ),
        receipt_handles=("AQEB-receipt-0-1", "AQEB-receipt-1-1"),
        rows=2,
    )
    assert "AQEB-receipt" not in repr(receipts)
    assert journal.read_receipts(5, 3) is None


def test_entry_without_receive_time_reads_as_received_at_epoch(journal: Journal) -> None:
    # Treated as long expired, so the acknowledger is cautious about its handles.
    journal.write_entry(1, 0, table_of(0))
    receipts = journal.read_receipts(1, 0)
    assert receipts is not None and receipts.received_at == 0.0


def test_batch_receipts_lists_every_receiver(journal: Journal) -> None:
    journal.write_entry(4, 0, table_of(0))
    journal.write_entry(4, 2, table_of(1, 2))
    receipts = journal.batch_receipts(4)
    assert [(r.batch, r.receiver, len(r.message_ids)) for r in receipts] == [(4, 0, 1), (4, 2, 2)]
    assert journal.batch_receipts(5) == []


def test_dedupe_record_round_trip_and_expiry(journal: Journal, location: str) -> None:
    assert journal.read_dedupe(now=0.0) == {}

    journal.write_dedupe(3, ["a", "b"], expires_at=1000.0)
    journal.write_dedupe(4, ["b", "c"], expires_at=2000.0)

    # An id recorded twice keeps the later expiry.
    assert journal.read_dedupe(now=500.0) == {"a": 1000.0, "b": 2000.0, "c": 2000.0}
    assert journal.read_dedupe(now=1000.0) == {"b": 2000.0, "c": 2000.0}
    # Expired records are removed from the journal.
    assert [n[:13] for n in os.listdir(Path(location) / "dedupe")] == ["000000000004-"]
    assert journal.read_dedupe(now=2000.0) == {}
    assert not (Path(location) / "dedupe").exists()


def test_dedupe_record_survives_a_restart(journal: Journal, location: str) -> None:
    journal.write_dedupe(9, ["x"], expires_at=1_800_000_000.5)
    again = Journal(location, make_options(location))
    assert again.read_dedupe(now=1_700_000_000.0) == {"x": 1_800_000_000.5}


def test_remove_batch(journal: Journal) -> None:
    journal.write_entry(1, 0, table_of(0))
    journal.write_entry(1, 1, table_of(1))
    journal.write_entry(2, 0, table_of(2))

    journal.remove_batch(1)

    assert journal.batches() == [2]
    assert journal.receivers(1) == []
    assert journal.read_entry(1, 0) is None
    assert pairs(journal.batch_receipts(1)) == []
    assert journal.read_entry(2, 0) is not None
    # Removing again (a repeated acknowledgement) is harmless.
    journal.remove_batch(1)
    journal.remove_batch(99)
    assert journal.batches() == [2]


def test_corrupt_entry_raises_journal_error_with_a_fix(journal: Journal, location: str) -> None:
    journal.write_entry(1, 0, table_of(0))
    entry = Path(location) / "batches" / "000000000001" / "00000.arrow"
    entry.write_bytes(entry.read_bytes()[:40])

    with pytest.raises(JournalError, match="corrupt.*Fix:"):
        journal.read_entry(1, 0)
    with pytest.raises(JournalError, match="corrupt.*Fix:"):
        journal.read_receipts(1, 0)


# -- state and ownership -----------------------------------------------------------------------


def test_read_state_defaults_to_zero(journal: Journal) -> None:
    assert journal.read_state() == JournalState(planned_batch=0, acked_batch=0)


def test_state_round_trip_and_overwrite(journal: Journal, location: str) -> None:
    journal.write_state(JournalState(planned_batch=5, acked_batch=3))
    assert journal.read_state() == JournalState(5, 3)

    journal.write_state(JournalState(planned_batch=6, acked_batch=6))
    assert journal.read_state() == JournalState(6, 6)
    # A new process (another Journal object) sees the same state.
    assert Journal(location, make_options(location)).read_state() == JournalState(6, 6)


def test_check_owner_binds_the_journal_to_the_first_queue(journal: Journal, location: str) -> None:
    journal.check_owner(QUEUE_URL)
    journal.check_owner(QUEUE_URL)  # same queue: fine, also after a restart
    Journal(location, make_options(location)).check_owner(QUEUE_URL)

    meta = json.loads((Path(location) / "_meta.json").read_text())
    assert meta["queueUrl"] == QUEUE_URL

    with pytest.raises(JournalError) as info:
        Journal(location, make_options(location)).check_owner(OTHER_QUEUE_URL)
    message = str(info.value)
    assert QUEUE_URL in message
    assert OTHER_QUEUE_URL in message
    assert "Fix: give each query its own 'journalLocation'" in message
    assert info.value.retriable is False


def test_probe_writable_accepts_a_writable_location_and_cleans_up(
    journal: Journal, location: str
) -> None:
    journal.probe_writable()
    assert os.listdir(location) == []


def test_probe_writable_rejects_a_path_under_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("I am not a directory")
    location = str(blocker / "journal")
    journal = Journal(location, make_options(location))

    with pytest.raises(JournalError) as info:
        journal.probe_writable()
    message = str(info.value)
    assert "is not writable" in message
    assert location in message
    assert "Fix:" in message


def test_writing_under_a_regular_file_raises_journal_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    journal = Journal(str(blocker / "journal"))
    with pytest.raises(JournalError, match="Cannot write journal file"):
        journal.write_entry(1, 0, table_of(0))
    with pytest.raises(JournalError, match="Cannot write journal file"):
        journal.write_state(JournalState(1, 0))


def test_file_uri_and_home_relative_locations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    by_uri = Journal((tmp_path / "j").as_uri())
    by_home = Journal("~/j")
    by_uri.write_entry(1, 0, table_of(0))

    assert by_home.receivers(1) == [0]
    assert (tmp_path / "j" / "batches" / "000000000001" / "00000.arrow").is_file()


# -- permissions -------------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_local_files_are_readable_by_the_owner_only(
    umask_022: None, journal: Journal, location: str
) -> None:
    journal.check_owner(QUEUE_URL)
    journal.write_state(JournalState(1, 0))
    journal.write_entry(1, 0, table_of(0))
    root = Path(location)

    journal.write_dedupe(1, ["m"], expires_at=10.0**10)
    journal.write_metrics(1, {"batch": 1})
    files = [p for p in root.rglob("*") if p.is_file()]
    assert {p.parent.name for p in files} >= {"state", "000000000001", "dedupe", "metrics"}
    for path in files:
        assert _mode(path) == 0o600, str(path)


def test_local_directories_are_accessible_by_the_owner_only(
    umask_022: None, journal: Journal, location: str
) -> None:
    # As on a driver: the probe creates the root, the first entry creates batches/<batch>.
    journal.probe_writable()
    journal.write_entry(1, 0, table_of(0))
    root = Path(location)

    for path in (root, root / "batches", root / "batches" / "000000000001"):
        assert _mode(path) == 0o700, str(path)


def test_batch_directory_is_owner_only(umask_022: None, journal: Journal, location: str) -> None:
    journal.write_entry(1, 0, table_of(0))
    assert _mode(Path(location) / "batches" / "000000000001") == 0o700


def test_journal_root_created_by_the_probe_is_owner_only(
    umask_022: None, journal: Journal, location: str
) -> None:
    journal.probe_writable()
    assert _mode(Path(location)) == 0o700


# -- pickling ----------------------------------------------------------------------------------


def test_journal_pickles_without_its_filesystem(journal: Journal) -> None:
    journal.write_entry(3, 0, table_of(0))  # opens the filesystem
    data = pickle.dumps(journal)

    assert b"pyarrow._fs" not in data
    restored = pickle.loads(data)
    assert restored.location == journal.location
    back = restored.read_entry(3, 0)
    assert back is not None and back.equals(table_of(0))
    assert restored.write_entry(3, 0, table_of(1)) is False


def test_unopened_journal_pickles(location: str) -> None:
    restored = pickle.loads(pickle.dumps(Journal(location, make_options(location))))
    assert restored.write_entry(1, 0, table_of(0)) is True
    assert restored.receivers(1) == [0]


# -- S3 ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        boto3.client(
            "s3",
            region_name="us-east-1",
            endpoint_url=f"http://{host}:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="journal-bucket")
        yield f"{host}:{port}"
    finally:
        server.stop()


def test_s3_journal(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    prefix = f"queries/{uuid.uuid4().hex}/journal"
    location = f"s3://journal-bucket/{prefix}?endpoint_override={s3_endpoint}&scheme=http"
    options = make_options(location, region="us-east-1")
    journal = Journal(location, options)

    journal.probe_writable()
    journal.check_owner(QUEUE_URL)
    assert journal.read_state() == JournalState()
    journal.write_state(JournalState(planned_batch=2, acked_batch=1))
    assert journal.read_state() == JournalState(2, 1)

    assert journal.read_entry(2, 0) is None
    assert journal.batches() == []
    first, second = table_of(0, 1), table_of(2)
    assert journal.write_entry(2, 0, first) is True
    assert journal.write_entry(2, 0, table_of(9)) is False
    assert journal.write_entry(2, 3, second) is True

    # Another process (pickled journal, fresh filesystem) reads the same entries.
    other = pickle.loads(pickle.dumps(journal))
    back = other.read_entry(2, 0)
    assert back is not None and back.equals(first)
    assert other.batches() == [2]
    assert other.receivers(2) == [0, 3]
    assert pairs(other.batch_receipts(2)) == handles_of(first) + handles_of(second)
    with pytest.raises(JournalError, match="belongs to queue"):
        other.check_owner(OTHER_QUEUE_URL)

    other.write_dedupe(2, ["old"], expires_at=100.0)
    other.write_dedupe(3, ["new"], expires_at=200.0)
    assert journal.read_dedupe(now=150.0) == {"new": 200.0}
    assert journal.read_dedupe(now=0.0) == {"new": 200.0}, "expired record not removed"

    other.remove_batch(2)
    assert journal.batches() == []
    assert journal.read_entry(2, 0) is None
    assert journal.read_state() == JournalState(2, 1)


def test_s3_journal_client_leaves_timestamps_unparsed(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A LIST page's LastModified values cost most of its parsing; the journal never reads them.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    location = f"s3://journal-bucket/{uuid.uuid4().hex}?endpoint_override={s3_endpoint}&scheme=http"
    journal = Journal(location, make_options(location, region="us-east-1"))
    journal.write_entry(1, 0, table_of(0))
    assert journal.receivers(1) == [0]
    store = journal.store
    page = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix + "/")
    stamp = page["Contents"][0]["LastModified"]
    assert isinstance(stamp, str) and stamp[:2] == "20", stamp
    # Other clients (SQS's, the user's) keep botocore's parsing.
    import boto3

    other = boto3.client(
        "s3", region_name="us-east-1", endpoint_url=f"http://{s3_endpoint}"
    ).list_objects_v2(Bucket=store.bucket, Prefix=store.prefix + "/")
    assert not isinstance(other["Contents"][0]["LastModified"], str)


def test_s3_journal_rejects_unknown_location_parameters(s3_endpoint: str) -> None:
    location = f"s3://journal-bucket/j?endpoint_override={s3_endpoint}&colour=blue"
    journal = Journal(location, make_options(location, region="us-east-1"))
    with pytest.raises(JournalError, match=r"Cannot open journalLocation.*colour"):
        journal.read_state()


def test_unfinished_parts_are_those_of_receivers_without_an_entry(journal: Journal) -> None:
    # Receiver 0 finished (parts and entry); receiver 1 died after two parts; 2 never started.
    journal.write_part(4, 0, 0, table_of(0, 1))
    journal.write_entry(4, 0, table_of(0, 1))
    journal.write_part(4, 1, 0, table_of(2, 3))
    journal.write_part(4, 1, 1, table_of(4))
    ids = {n: sqs_message(n)["MessageId"] for n in range(5)}

    assert journal.unfinished_parts(4) == {1: {ids[2], ids[3], ids[4]}}
    assert journal.unfinished_parts(5) == {}


def test_s3_journal_objects_are_written_with_the_given_kms_key() -> None:
    import boto3
    from botocore.stub import Stubber

    from spark_sqs.journal import S3Store

    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    store = S3Store("bucket", "j", client_factory=lambda: client, kms_key_id="alias/journal")
    with Stubber(client) as stub:
        for conditional in (True, False):
            expected = {
                "Bucket": "bucket",
                "Key": "j/state/acked-000000000001",
                "Body": b"",
                "ServerSideEncryption": "aws:kms",
                "SSEKMSKeyId": "alias/journal",
            }
            if conditional:
                expected["IfNoneMatch"] = "*"
            stub.add_response("put_object", {}, expected)
        assert store.create("state/acked-000000000001", b"") is True
        store.put("state/acked-000000000001", b"")
        stub.assert_no_pending_responses()


def test_journal_sse_kms_key_reaches_the_s3_store() -> None:
    from spark_sqs.journal import open_store

    location = "s3://bucket/j"
    options = make_options(location, journalSseKmsKeyId="alias/journal", region="us-east-1")
    store = open_store(location, options)
    assert store._kms == "alias/journal"


# -- bounded size ------------------------------------------------------------------------------


def test_drop_sets_of_batches_before_the_oldest_pending_one_are_collected(
    journal: Journal,
) -> None:
    from spark_sqs.driver.planning import new_plan
    from spark_sqs.journal import entries

    done = journal.write_drops(frozenset({"a", "b"}), 1)
    replayed = journal.write_drops(frozenset({"c"}), 2)  # a replay's, named by no plan
    pending = journal.write_drops(frozenset({"a", "b"}), 3)  # same ids, its own object
    # Drop sets an earlier version wrote (no batch in the name): one a pending plan names.
    legacy_named = journal.write_drops(frozenset({"d"}))
    legacy_unnamed = journal.write_drops(frozenset({"e"}))
    journal.write_plan(new_plan(4, 10, 1, drops=legacy_named))
    assert pending != done and done is not None and done.startswith("000000000001-")

    assert journal.collect_drops(oldest_pending=3) == 3

    assert journal.store.list("drops") == sorted(
        [f"drops/{pending}.arrow", f"drops/{legacy_named}.arrow"]
    )
    entries._DROPS_CACHE.clear()
    assert journal.read_drops(pending) == {"a", "b"}
    assert journal.read_drops(legacy_named) == {"d"}
    for gone in (done, replayed, legacy_unnamed):
        with pytest.raises(JournalError, match="missing"):
            journal.read_drops(gone)
    assert journal.collect_drops(oldest_pending=3) == 0


def test_probe_writable_removes_probes_a_dead_driver_left(journal: Journal, location: str) -> None:
    journal.store.create("_probe/0123456789abcdef", b"ok")  # the driver died before its delete
    journal.probe_writable()
    assert journal.store.list("_probe") == []
    assert os.listdir(location) == []


def test_ack_reports_no_pending_batch_reads_are_collected(journal: Journal) -> None:
    for by in (2, 3, 5):
        journal.write_ack_report(by, 0, [_ack_entry(by - 1, 0)])
    # Batch 3's receivers acknowledge batch 4 (pending, oldest): their reports must stay.
    assert journal.collect_ack_reports(oldest_pending=4, keep={3}) == 1
    assert journal.read_ack_reports(2) == []
    assert [e.batch for r in journal.read_ack_reports(3) for e in r.entries] == [2]
    assert [e.batch for r in journal.read_ack_reports(5) for e in r.entries] == [4]


_LAG = json.dumps({"messages": 10, "oldestAgeMs": 500, "medianAgeMs": 200})


def _ack_entry(
    batch: int, receiver: int, uncertain: tuple[str, ...] = (), **extra: Any
) -> AckedEntry:
    fields = {"rows": 10, "dropped": 1, "deleted": 9, "delete_failures": 0, "lag": _LAG} | extra
    return AckedEntry(batch=batch, receiver=receiver, uncertain=uncertain, **fields)


def _counted(journal: Journal) -> HookedStore:
    store = HookedStore(journal.store)
    journal._store = store  # noqa: SLF001 - count the requests of this journal's reads
    return store


def test_an_ack_report_without_uncertain_ids_is_read_from_its_name_alone(
    journal: Journal,
) -> None:
    entries = [
        _ack_entry(4, 0, window_dropped=1),
        _ack_entry(4, 1, lag=json.dumps({"messages": 2, "oldestAgeMs": 900, "medianAgeMs": 5})),
        _ack_entry(3, 2, lag=None),
    ]
    journal.write_ack_report(5, 7, entries)
    store = _counted(journal)
    [read] = journal.read_ack_reports(5)
    assert [m for m, _ in store.calls] == ["list"], "no GET"
    assert read.receiver == 7
    by_batch = {e.batch: e for e in read.entries}
    assert replace(by_batch[4], lag=None) == AckedEntry(
        batch=4,
        entries=2,
        rows=20,
        dropped=2,
        deleted=18,
        delete_failures=0,
        window_dropped=1,
    )
    assert by_batch[3].window_dropped == 0
    assert json.loads(by_batch[4].lag) == {"messages": 12, "oldestAgeMs": 900, "medianAgeMs": 200}
    assert by_batch[3].entries == 1 and by_batch[3].lag is None


def test_an_ack_report_with_uncertain_ids_is_read_from_its_body(journal: Journal) -> None:
    entries = (_ack_entry(4, 0, uncertain=("m1", "m2")), _ack_entry(4, 1))
    journal.write_ack_report(5, 2, entries)
    assert journal.store.list("acks/000000000005") == ["acks/000000000005/00002.json"]
    store = _counted(journal)
    assert journal.read_ack_reports(5) == [AckReport(2, entries)]
    assert [m for m, _ in store.calls] == ["list", "read"]


def test_a_summary_too_long_for_a_key_goes_in_the_body(journal: Journal) -> None:
    entries = tuple(_ack_entry(b, 0) for b in range(1000, 1040))
    journal.write_ack_report(2000, 0, entries)
    assert journal.store.list("acks/000000002000") == ["acks/000000002000/00000.json"]
    assert journal.read_ack_reports(2000) == [AckReport(0, entries)]


def test_an_ack_report_of_an_earlier_version_is_read_from_its_body(journal: Journal) -> None:
    """A restart after an upgrade: the previous version named every report <receiver>.json
    (and wrote no windowDropped)."""
    body = {
        "entries": [
            {
                "batch": 4,
                "receiver": 0,
                "rows": 10,
                "dropped": 1,
                "deleted": 9,
                "deleteFailures": 0,
                "uncertain": [],
                "lag": _LAG,
            }
        ]
    }
    journal.store.create("acks/000000000005/00003.json", json.dumps(body).encode())
    assert journal.read_ack_reports(5) == [AckReport(3, (_ack_entry(4, 0),))]


def test_two_attempts_reports_count_once_and_keep_every_uncertain_id(journal: Journal) -> None:
    """A retried task repeats its deletes, and its report may be named differently from the
    first attempt's (an id found uncertain this time): one report per receiver counts, with
    every uncertain id. (Each attempt's report alone would do: it is written only once all of
    its deletes were made.)"""
    journal.write_ack_report(5, 1, [_ack_entry(4, 0)])
    journal.write_ack_report(5, 1, [_ack_entry(4, 0, uncertain=("m9",), deleted=8)])
    journal.write_ack_report(5, 2, [_ack_entry(4, 1)])
    assert len(journal.store.list("acks/000000000005")) == 3
    reads = journal.read_ack_reports(5)
    assert [r.receiver for r in reads] == [1, 2]
    assert sum(e.rows for r in reads for e in r.entries) == 20
    assert [e.uncertain for r in reads for e in r.entries] == [("m9",), ()]


def _stubbed_s3_store(rounds: int = 3) -> tuple[Any, Any, list[float]]:
    import boto3

    from spark_sqs.journal import S3Store

    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    slept: list[float] = []
    store = S3Store("bucket", "j", client_factory=lambda: client, rounds=rounds, sleep=slept.append)
    return store, client, slept


def test_s3_journal_reads_and_listings_are_tried_again_after_transient_failures() -> None:
    """A GET or LIST that still fails after botocore's own retries (a stubbed error skips
    them) is repeated by the store: a read while planning must not fail the query."""
    import io

    from botocore.response import StreamingBody
    from botocore.stub import Stubber

    store, client, slept = _stubbed_s3_store()
    with Stubber(client) as stub:
        for _ in range(2):
            stub.add_client_error("get_object", "InternalError", http_status_code=500)
        stub.add_response(
            "get_object",
            {"Body": StreamingBody(io.BytesIO(b"plan"), 4)},
            {"Bucket": "bucket", "Key": "j/batches/1/_plan.json"},
        )
        assert store.read("batches/1/_plan.json") == b"plan"
        stub.add_client_error("list_objects_v2", "SlowDown", http_status_code=503)
        stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": "j/batches/1/00000.arrow"}], "IsTruncated": False},
            {"Bucket": "bucket", "Prefix": "j/batches/1/"},
        )
        assert store.list("batches/1") == ["batches/1/00000.arrow"]
        stub.assert_no_pending_responses()
    assert slept == [1.0, 2.0, 1.0]


def test_s3_journal_gives_up_after_its_rounds_and_at_once_on_access_denied() -> None:
    from botocore.stub import Stubber

    from spark_sqs.errors import JournalError

    store, client, slept = _stubbed_s3_store(rounds=2)
    with Stubber(client) as stub:
        for _ in range(2):
            stub.add_client_error("get_object", "InternalError", http_status_code=500)
        with pytest.raises(JournalError) as failed:
            store.read("batches/1/_plan.json")
        assert failed.value.retriable and "InternalError" in str(failed.value)
        assert slept == [1.0]
        stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
        with pytest.raises(JournalError) as denied:
            store.read("batches/1/_plan.json")
        assert not denied.value.retriable and "Fix:" in str(denied.value)
        assert slept == [1.0], "a permanent error is not tried again"
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404)
        assert store.read("batches/1/_plan.json") is None
        stub.assert_no_pending_responses()
