"""The journal: durable, write-once entries of what each receiver got, local and on S3."""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.errors import JournalError, UnsafeStoreError
from spark_sqs.journal import (
    LIVE,
    RECEIVED_AT,
    REMOVED,
    RETIRED_STATUS,
    BatchPlan,
    EntryReceipts,
    Journal,
    JournalState,
    LocalStore,
    ReceiverPlan,
    open_store,
    receipts_of,
)
from spark_sqs.journal.entries import FORMAT_VERSION
from spark_sqs.schema import messages_to_table
from tests.fakes import CreateIgnoresExistenceStore, HookedStore, ListHidingStore
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
    # An empty entry still says the receiver ran: it counts as journaled, with no messages.
    assert journal.has_journaled(2, 0)
    [receipts] = journal.batch_receipts(2, [0])
    assert receipts.message_ids == () and receipts.rows == 0


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


def test_batches_listing_and_entries_read_by_the_receivers_named(
    journal: Journal, location: str
) -> None:
    assert journal.list_batches() == []
    assert journal.batch_receipts(1, [0, 1]) == []

    for batch, receiver in [(12, 0), (3, 2), (3, 0), (3, 11), (1, 0)]:
        journal.write_entry(batch, receiver, table_of(batch * 100 + receiver))
    # Stray files are not entries or batches.
    (Path(location) / "batches" / "README").write_text("not a batch")
    (Path(location) / "batches" / "000000000003" / "notes.txt").write_text("not an entry")
    (Path(location) / "batches" / "000000000003" / "00001.arrow.tmp-123").write_text("partial")

    # The LIST of batches/ finds garbage to collect; it decides nothing about entries.
    assert journal.list_batches() == [1, 3, 12]
    # Entries are read by key for the receivers a plan names: an absent one is skipped, a
    # file that is no entry of a named receiver is never read.
    assert [r.receiver for r in journal.batch_receipts(3, [11, 0, 1, 2, 0])] == [0, 2, 11]
    assert [r.receiver for r in journal.batch_receipts(3, [2])] == [2]
    assert [r.receiver for r in journal.batch_receipts(12, range(4))] == [0]
    assert journal.batch_receipts(2, range(4)) == []
    assert [journal.has_journaled(3, r) for r in (0, 1, 2, 11)] == [True, False, True, True]


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

    assert pairs(journal.batch_receipts(6, [0, 4])) == handles_of(a) + handles_of(b)
    assert pairs(journal.batch_receipts(8, [0, 4])) == []


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


def test_batch_receipts_reads_every_named_receiver(journal: Journal) -> None:
    journal.write_entry(4, 0, table_of(0))
    journal.write_entry(4, 2, table_of(1, 2))
    receipts = journal.batch_receipts(4, [0, 1, 2])
    assert [(r.batch, r.receiver, len(r.message_ids)) for r in receipts] == [(4, 0, 1), (4, 2, 2)]
    assert journal.batch_receipts(5, [0, 1, 2]) == []


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

    assert journal.list_batches() == [2]
    assert not journal.has_journaled(1, 0) and not journal.has_journaled(1, 1)
    assert journal.read_entry(1, 0) is None
    assert pairs(journal.batch_receipts(1, [0, 1])) == []
    assert journal.read_entry(2, 0) is not None
    # Removing again (a repeated acknowledgement) is harmless.
    journal.remove_batch(1)
    journal.remove_batch(99)
    assert journal.list_batches() == [2]


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

    assert by_home.has_journaled(1, 0)
    assert by_home.list_batches() == [1]
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
    assert restored.has_journaled(1, 0)


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
    assert journal.list_batches() == []
    first, second = table_of(0, 1), table_of(2)
    assert journal.write_entry(2, 0, first) is True
    assert journal.write_entry(2, 0, table_of(9)) is False
    assert journal.write_entry(2, 3, second) is True

    # Another process (pickled journal, fresh filesystem) reads the same entries.
    other = pickle.loads(pickle.dumps(journal))
    back = other.read_entry(2, 0)
    assert back is not None and back.equals(first)
    assert other.list_batches() == [2]
    assert [r.receiver for r in other.batch_receipts(2, [0, 1, 2, 3])] == [0, 3]
    assert pairs(other.batch_receipts(2, [0, 3])) == handles_of(first) + handles_of(second)
    with pytest.raises(JournalError, match="belongs to queue"):
        other.check_owner(OTHER_QUEUE_URL)

    other.write_dedupe(2, ["old"], expires_at=100.0)
    other.write_dedupe(3, ["new"], expires_at=200.0)
    assert journal.read_dedupe(now=150.0) == {"new": 200.0}
    assert journal.read_dedupe(now=0.0) == {"new": 200.0}, "expired record not removed"

    other.remove_batch(2)
    assert journal.list_batches() == []
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
    assert journal.list_batches() == [1]
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


def test_a_receiver_s_ids_are_its_entry_s_else_its_parts(journal: Journal) -> None:
    # Receiver 0 finished (parts and entry); receiver 1 died after two parts; 2 never started.
    journal.write_part(4, 0, 0, table_of(0, 1))
    journal.write_entry(4, 0, table_of(0, 1))
    journal.write_part(4, 1, 0, table_of(2, 3))
    journal.write_part(4, 1, 1, table_of(4))
    ids = {n: sqs_message(n)["MessageId"] for n in range(5)}

    assert journal.receiver_ids(4, 0) == [ids[0], ids[1]]
    assert journal.receiver_ids(4, 1) == [ids[2], ids[3], ids[4]]
    assert journal.receiver_ids(4, 2) == []
    assert [journal.has_journaled(4, r) for r in (0, 1, 2)] == [True, True, False]
    assert journal.batch_message_ids(4, [0, 1, 2]) == {ids[n] for n in range(5)}
    assert journal.batch_message_ids(4, [0, 1, 2], but=1) == {ids[0], ids[1]}
    assert journal.batch_message_ids(4, [2]) == frozenset()
    assert journal.batch_message_ids(5, [0, 1]) == frozenset()
    # The dead receiver's parts, adopted as one entry whose messages all await deletion.
    assert journal.adopt_entry(4, 1, 9, 10000)
    combined = journal.read_entry(9, 10000)
    assert combined is not None
    assert [r.message_ids for r in [receipts_of(9, 10000, combined)]] == [(ids[2], ids[3], ids[4])]
    assert journal.read_receipts(9, 10000).message_ids == (ids[2], ids[3], ids[4])  # type: ignore[union-attr]
    # Receiver 2 journaled nothing: its adoption delivers nothing.
    assert journal.adopt_entry(4, 2, 9, 10001)
    assert journal.read_entry(9, 10001).num_rows == 0  # type: ignore[union-attr]


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
    location = "s3://bucket/j"
    options = make_options(location, journalSseKmsKeyId="alias/journal", region="us-east-1")
    store = Journal(location, options).store
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


# -- read by key, never found by a LIST ---------------------------------------------------------


def _hiding(location: str, hidden: Any) -> tuple[Journal, ListHidingStore]:
    store = ListHidingStore(LocalStore(location), hidden)
    return Journal(location, make_options(location), store=store), store


def test_read_parts_reads_by_key_what_the_list_does_not_show_yet(location: str) -> None:
    """deleteAfterJournal: part k is created only once part k-1 exists, so the parts are read
    0, 1, 2, ... by key up to the first absent number. A LIST that lags the newest part must
    not lose its messages (the driver would neither deliver nor delete them)."""
    journal, store = _hiding(location, lambda key: ".part-" in key)
    tables = [table_of(0, 1), table_of(2), table_of(3, 4, 5)]
    for k, table in enumerate(tables):
        assert journal.write_part(7, 2, k, table) is True
    # Part 4 exists, but part 3 does not: it is no part of a dense run (never read).
    journal.write_part(7, 2, 4, table_of(9))
    assert journal.store.list("batches") == []
    store.calls.clear()

    parts = journal.read_parts(7, 2)

    assert [k for k, _ in parts] == [0, 1, 2]
    assert all(got.equals(want) for (_, got), want in zip(parts, tables, strict=True))
    ids = {n: sqs_message(n)["MessageId"] for n in range(10)}
    assert journal.receiver_ids(7, 2) == [ids[n] for n in range(6)]
    assert journal.has_journaled(7, 2)
    assert journal.batch_message_ids(7, [2]) == {ids[n] for n in range(6)}
    assert not [c for c in store.calls if c[0] == "list"], "no LIST to find parts"
    assert journal.read_parts(7, 3) == []


def test_entries_of_the_named_receivers_are_read_although_the_list_hides_them(
    location: str,
) -> None:
    journal, store = _hiding(location, lambda key: key.startswith("batches/"))
    journal.write_entry(2, 0, table_of(0))
    journal.write_entry(2, 5, table_of(1, 2))
    assert journal.list_batches() == []
    store.calls.clear()

    assert [r.receiver for r in journal.batch_receipts(2, [0, 1, 5])] == [0, 5]
    assert len(journal.batch_message_ids(2, [0, 5])) == 3
    assert not [c for c in store.calls if c[0] == "list"]


def test_extension_markers_have_a_fixed_key_and_are_read_by_key(location: str) -> None:
    """executor/extension.py: a receiver that extended its own messages says so at
    ``<receiver>.extended``; the driver bounds the reach by its own clock, the body keeps the
    executor's deadline for people only."""
    journal, store = _hiding(location, lambda key: key.endswith(".extended"))
    journal.write_extension(3, 1, 1_700_000_900)
    journal.write_extension(3, 1, 1_700_009_999)  # a retried attempt: the first stands
    journal.write_extension(3, 4, 1_700_000_950)

    key = "batches/000000000003/00001.extended"
    assert json.loads(journal.store.read(key) or b"") == {"until": 1_700_000_900}
    assert journal.extended_receivers(3, [0, 1, 2, 4]) == {1, 4}
    assert journal.extended_receivers(3, [0, 2]) == set()
    assert journal.extended_receivers(4, [1]) == set()
    assert not [c for c in store.calls if c[0] == "list"]


# -- identity, format, probe -------------------------------------------------------------------


def test_identity_is_fixed_when_the_journal_is_bound_and_stable_across_journal_objects(
    tmp_path: Path,
) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    assert journal.identity() is None, "no journal there yet"

    journal.check_owner(QUEUE_URL)
    identity = journal.identity()
    assert isinstance(identity, str) and len(identity) >= 8
    meta = json.loads((Path(location) / "_meta.json").read_text())
    assert meta["journalId"] == identity and meta["format"] == FORMAT_VERSION

    # Another process, a restart, a pickled copy: the same identity; binding again keeps it.
    again = Journal(location, make_options(location))
    assert again.identity() == identity
    again.check_owner(QUEUE_URL)
    assert again.identity() == identity
    assert pickle.loads(pickle.dumps(Journal(location))).identity() == identity
    # Another journal of the same queue is another journal.
    other_location = str(tmp_path / "other")
    other = Journal(other_location, make_options(other_location))
    other.check_owner(QUEUE_URL)
    assert other.identity() not in (None, identity)


def test_a_journal_of_an_earlier_format_gets_a_stable_derived_identity(tmp_path: Path) -> None:
    """A journal created before journals had an identity (no journalId in ``_meta.json``): its
    identity is derived from ``_meta.json``, which is written once and never changed."""

    def legacy(name: str, queue: str) -> str:
        location = str(tmp_path / name)
        Journal(location).store.create(
            "_meta.json", json.dumps({"format": 2, "queueUrl": queue}).encode()
        )
        return location

    location = legacy("old", QUEUE_URL)
    identity = Journal(location).identity()
    assert isinstance(identity, str) and identity
    assert Journal(location, make_options(location)).identity() == identity
    # Binding the journal to its queue again does not rewrite its _meta.json.
    bound = Journal(location, make_options(location))
    bound.check_owner(QUEUE_URL)
    assert bound.identity() == identity
    assert "journalId" not in json.loads((Path(location) / "_meta.json").read_text())
    # Another legacy journal has another identity.
    assert Journal(legacy("older", OTHER_QUEUE_URL)).identity() not in (None, identity)


def test_a_journal_of_a_newer_format_is_refused(journal: Journal, location: str) -> None:
    newer = FORMAT_VERSION + 1
    doc = {"format": newer, "queueUrl": QUEUE_URL, "journalId": "0123456789abcdef"}
    journal.store.create("_meta.json", json.dumps(doc).encode())

    for call in (
        lambda j: j.meta(),
        lambda j: j.identity(),
        lambda j: j.check_owner(QUEUE_URL),
    ):
        with pytest.raises(JournalError) as info:
            call(Journal(location, make_options(location)))
        message = str(info.value)
        assert f"journal format {newer}" in message and location in message
        assert "Fix:" in message
        assert info.value.retriable is False
    # The journal is left as the newer version wrote it.
    assert json.loads((Path(location) / "_meta.json").read_text()) == doc


def test_a_journal_this_version_wrote_is_refused_once_its_format_number_is_raised(
    journal_location: str,
) -> None:
    """A journal this version created, with the format number in its ``_meta.json`` raised
    above ``FORMAT_VERSION`` (what a journal a newer version created looks like): refused, on
    both stores. The number this version writes itself is accepted (``>``, not ``>=``)."""
    options = make_options(journal_location, region="us-east-1")
    Journal(journal_location, options).check_owner(QUEUE_URL)
    store = Journal(journal_location, options).store
    written = json.loads(store.read("_meta.json") or b"")
    assert written["format"] == FORMAT_VERSION
    assert Journal(journal_location, options).identity() == written["journalId"]

    raised = {**written, "format": FORMAT_VERSION + 1}
    store.delete("_meta.json")
    assert store.create("_meta.json", json.dumps(raised).encode())
    for call in (lambda j: j.identity(), lambda j: j.check_owner(QUEUE_URL)):
        with pytest.raises(JournalError) as info:
            call(Journal(journal_location, options))
        message = str(info.value)
        assert f"journal format {FORMAT_VERSION + 1}" in message, message
        assert f"reads formats up to {FORMAT_VERSION}" in message and "Fix:" in message
    assert json.loads(store.read("_meta.json") or b"") == raised


def test_probe_writable_refuses_a_store_whose_second_create_of_one_key_succeeds(
    journal_location: str,
) -> None:
    """Two attempts of one task must never both believe they journaled a receiver's messages:
    a store that answers a second create of one key with success (an S3-compatible store that
    accepts ``If-None-Match: *`` and ignores it) is refused at query start."""
    options = make_options(journal_location, region="us-east-1")
    Journal(journal_location, options).probe_writable()  # the store itself honours it

    unsafe = CreateIgnoresExistenceStore(open_store(journal_location, options.connection))
    journal = Journal(journal_location, options, store=unsafe)
    with pytest.raises(UnsafeStoreError) as info:
        journal.probe_writable()

    message = str(info.value)
    assert journal_location in message
    assert "create-if-absent" in message and "Fix:" in message
    probes = [k for m, k in unsafe.calls if m == "create"]
    assert len(probes) == 2 and probes[0] == probes[1], "two creates of one key"
    assert unsafe.inner.list("_probe") == [], "the probe object is removed"


# -- a batch's life -----------------------------------------------------------------------------


def test_batch_status_live_retired_removed(journal: Journal) -> None:
    from spark_sqs.driver.planning import new_plan

    assert journal.batch_status(4) == REMOVED, "never planned"
    # Files without a plan (a removal a crash cut short) make no batch live.
    journal.write_entry(4, 0, table_of(0))
    assert journal.batch_status(4) == REMOVED and journal.is_finished(4)
    assert journal.live_receivers(4) is None

    journal.write_plan(new_plan(4, 10, 2))
    assert journal.batch_status(4) == LIVE and not journal.is_finished(4)
    assert journal.live_receivers(4) == (0, 1)

    journal.retire(4)
    journal.retire(4)  # a retried adoption: harmless
    assert journal.batch_status(4) == RETIRED_STATUS and journal.is_finished(4)
    # Retired, it stays live until the batch that adopts it has its copies.
    assert journal.live_receivers(4) == (0, 1)

    journal.remove_batch(4)
    assert journal.batch_status(4) == REMOVED and journal.is_finished(4)
    assert journal.live_receivers(4) is None


def test_a_batch_of_carried_messages_is_live_by_its_carry_record(journal: Journal) -> None:
    from spark_sqs.journal.poison import CARRY

    doc = {"from": 3, "step": 1, "receivers": [0, 2]}
    journal.store.create(f"batches/000000000009/{CARRY}", json.dumps(doc).encode())
    assert journal.live_receivers(9) == (0, 2)
    journal.remove_batch(9)
    assert journal.live_receivers(9) is None


def test_remove_batch_deletes_the_plan_before_anything_else(location: str) -> None:
    """A batch is live while its plan (or carry or release record) exists: removal deletes
    those first, so a removal cut short leaves garbage, never a batch that looks live with
    part of its entries gone."""
    from spark_sqs.driver.planning import new_plan
    from spark_sqs.journal.poison import CARRY, RELEASED

    store = HookedStore(LocalStore(location))
    journal = Journal(location, make_options(location), store=store)
    journal.write_plan(new_plan(3, 10, 2))
    journal.write_entry(3, 0, table_of(0))
    journal.write_part(3, 1, 0, table_of(1))
    journal.write_extension(3, 0, 1_700_000_900)
    journal.retire(3)
    for name in (CARRY, RELEASED):
        journal.store.create(f"batches/000000000003/{name}", b"{}")
    files = journal.store.list("batches/000000000003")
    store.calls.clear()

    journal.remove_batch(3)

    deleted = [k for m, k in store.calls if m == "delete"]
    liveness = {f"batches/000000000003/{n}" for n in ("_plan.json", CARRY, RELEASED)}
    assert deleted[0] == "batches/000000000003/_plan.json"
    assert set(deleted[:3]) == liveness
    assert set(deleted[3:]) == set(files) - liveness
    assert journal.store.list("batches") == []


def test_a_removal_cut_short_after_the_plan_leaves_a_batch_that_is_not_live(
    location: str,
) -> None:
    from spark_sqs.driver.planning import new_plan

    def die_at_entries(method: str, key: str) -> None:
        if method == "delete" and key.endswith(".arrow"):
            raise OSError("the driver died (injected)")

    journal = Journal(location, make_options(location))
    journal.write_plan(new_plan(5, 10, 2))
    journal.write_entry(5, 0, table_of(0))
    journal.write_entry(5, 1, table_of(1))
    dying = Journal(location, store=HookedStore(LocalStore(location), before=die_at_entries))
    with pytest.raises(OSError, match="injected"):
        dying.remove_batch(5)

    assert journal.batch_status(5) == REMOVED
    assert journal.live_receivers(5) is None
    assert journal.list_batches() == [5], "garbage, for the next start to remove"
    journal.remove_batch(5)
    assert journal.list_batches() == []


def test_adopting_an_entry_that_vanished_writes_an_empty_entry(journal: Journal) -> None:
    """A straggler of a retired orphan removed the entry it wrote (its messages stay in flight
    and come back): the adopting batch's replays must deliver nothing for it, not fail."""
    journal.write_entry(6, 0, table_of(0, 1))
    journal.retire(6)

    assert journal.adopt_entry(6, 1, 8, 0) is True  # receiver 1 of batch 6: no entry, no parts
    assert journal.adopt_entry(6, 0, 8, 1) is True
    assert journal.adopt_entry(6, 1, 8, 0) is False, "idempotent: the copy is kept"

    empty = journal.read_entry(8, 0)
    assert empty is not None and empty.num_rows == 0
    assert empty.schema.names == table_of().schema.names
    assert journal.has_journaled(8, 0)
    assert journal.receiver_ids(8, 1) == [sqs_message(n)["MessageId"] for n in (0, 1)]


def test_a_journal_taken_over_in_place_records_its_format_apart_from_its_meta(
    journal_location: str,
) -> None:
    """``_meta.json`` is never rewritten (a legacy journal's identity is derived from its
    bytes): a version that takes over a journal of an earlier format creates ``format/<F>``
    markers, and a version that reads up to an older format refuses the journal once it sees
    them."""
    options = make_options(journal_location, region="us-east-1")
    store = Journal(journal_location, options).store
    legacy = {"format": FORMAT_VERSION - 1, "queueUrl": QUEUE_URL}
    store.create("_meta.json", json.dumps(legacy).encode())
    identity = Journal(journal_location, options).identity()

    Journal(journal_location, options).check_owner(QUEUE_URL)

    assert store.read(f"format/{FORMAT_VERSION}") is not None
    assert json.loads(store.read("_meta.json") or b"") == legacy
    assert Journal(journal_location, options).identity() == identity
    # A later version took it over in place the same way: this one refuses it.
    store.create(f"format/{FORMAT_VERSION + 1}", b"")
    with pytest.raises(JournalError, match=f"journal format {FORMAT_VERSION + 1}"):
        Journal(journal_location, options).check_owner(QUEUE_URL)


def test_the_drop_set_cache_keeps_the_newest_sets_only(journal: Journal) -> None:
    from spark_sqs.journal import entries

    entries._DROPS_CACHE.clear()
    digests = [
        journal.write_drops(frozenset({f"m{batch}-{i}" for i in range(50)}), batch)
        for batch in range(1, 201)
    ]
    # A driver writes one per batch: 200 batches, the newest 8 kept.
    assert len(entries._DROPS_CACHE) == entries._DROPS_CACHE.max_sets
    assert journal.read_drops(digests[-1]) == {f"m200-{i}" for i in range(50)}
    # An older one is read from the journal again (and cached in place of the oldest).
    assert journal.read_drops(digests[0]) == {f"m1-{i}" for i in range(50)}
    assert len(entries._DROPS_CACHE) == entries._DROPS_CACHE.max_sets

    bounded = entries._DropsCache(sets=8, ids=120)
    for n in range(10):
        bounded.put(f"d{n}", frozenset(f"{n}-{i}" for i in range(50)))
    assert (len(bounded), bounded.ids) == (2, 100)
    bounded.put("huge", frozenset(str(i) for i in range(500)))
    assert (len(bounded), bounded.ids) == (1, 500)  # the newest set is always kept
    assert bounded.get("huge") is not None and bounded.get("d9") is None


class _GhostListingStore(HookedStore):
    """A real store whose LIST still shows keys deleted within the lag (``ghosts``), as a
    listing that lags a delete."""

    def __init__(self, inner: Any, ghosts: list[str]) -> None:
        super().__init__(inner)
        self.ghosts = ghosts

    def list(self, prefix: str) -> list[str]:
        return sorted({*super().list(prefix), *(g for g in self.ghosts if g.startswith(prefix))})


def test_state_markers_a_lagging_listing_still_shows_count_only_once_read(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 1134 --unkind all): the journal was deleted and a run
    started anew while the listing still showed the old journal's markers; the new journal
    took planned=6 from them, and Spark's replay of the checkpoint's batch 0..6 was answered
    with an empty batch instead of being refused."""
    options = make_options(journal_location, region="us-east-1")
    old = Journal(journal_location, options)
    old.write_state(JournalState(planned_batch=6, acked_batch=5))
    ghosts = old.store.list("state")
    old.store.delete_many(ghosts)

    deleted = Journal(journal_location, options, store=_GhostListingStore(old.store, ghosts))
    assert deleted.read_state().planned_batch == 0
    assert deleted.read_state().acked_batch == 0

    # A newer marker that exists beside a listed one that is gone: the newest that exists.
    again = Journal(journal_location, options, store=_GhostListingStore(old.store, ghosts))
    again.write_state(JournalState(planned_batch=2, acked_batch=1))
    state = again.read_state()
    assert (state.planned_batch, state.acked_batch) == (2, 1)


def test_dedupe_records_are_found_by_key_through_the_acknowledged_marker(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 374 --unkind all): a journal put back while the listing
    still hid what it held; the next start found no dedupe record by its LIST, so redeliveries
    of messages whose deletes may not have taken effect were journaled and delivered again.
    The newest acknowledged marker names the live records, which a start reads by key."""
    options = make_options(journal_location, region="us-east-1")
    driver = Journal(journal_location, options)
    driver.read_state()
    driver.write_dedupe(3, ["m1", "m2"], expires_at=2000.0, now=1000.0)
    driver.write_state(JournalState(planned_batch=3, acked_batch=3))

    hidden = ListHidingStore(driver.store, lambda key: key.startswith("dedupe/"))
    restarted = Journal(journal_location, options, store=hidden)
    restarted.read_state()
    assert restarted.read_dedupe(now=1500.0) == {"m1": 2000.0, "m2": 2000.0}

    # Expired records are no longer named by later markers, and are removed when read.
    restarted.write_dedupe(4, ["m3"], expires_at=3000.0, now=2500.0)
    restarted.write_state(JournalState(planned_batch=4, acked_batch=4))
    again = Journal(journal_location, options, store=hidden)
    again.read_state()
    assert again.read_dedupe(now=2600.0) == {"m3": 3000.0}


def test_a_batch_retired_and_removed_between_the_status_reads_is_never_live(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 2214 --unkind all): a deleteAfterJournal receiver checked
    its batch's status after journaling a part, stalled inside the check while another query
    retired, adopted (without that part) and removed the batch, and read "live" from a plan
    read before the removal and a retirement marker read after it: it deleted a message
    nobody delivered. A batch retired and removed right after the first status read is not
    live (the retirement marker is read first)."""
    options = make_options(journal_location, region="us-east-1")
    journal = Journal(journal_location, options)
    journal.write_plan(BatchPlan(2, (ReceiverPlan(0, 5),)))
    done: list[bool] = []

    def retire_and_remove(method: str, key: str) -> None:
        if method == "read" and not done:
            done.append(True)
            journal.retire(2)
            journal.remove_batch(2)

    stalled = Journal(
        journal_location, options, store=HookedStore(journal.store, after=retire_and_remove)
    )
    assert stalled.batch_status(2) != "live"
    assert done, "the removal ran between the reads"


def test_metrics_are_pruned_to_the_newest_every_few_batches(journal: Journal) -> None:
    for batch in range(1, 26):
        journal.write_metrics(batch, {"batch": batch}, keep=5, prune_every=10)
    # Pruned at batch 20 to 16-20; 21-25 are written since.
    assert [m["batch"] for m in journal.read_metrics()] == list(range(16, 26))
