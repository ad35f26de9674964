"""The journal over its stores, local and on S3: files, permissions, pickling, retries; and the
acknowledgement reports (journal/reports.py). Each record kind has its test_journal_<kind>.py."""

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

import pytest

from spark_sqs.errors import JournalError
from spark_sqs.journal import AckedEntry, AckReport, Journal, JournalState, LocalStore, reports
from spark_sqs.journal.reports import report_key
from tests.fakes import HookedStore, ListHidingStore
from tests.unit.factories import QUEUE_URL, make_options
from tests.unit.journals import OTHER_QUEUE_URL, handles_of, pairs, table_of


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


# -- entries -----------------------------------------------------------------------------------


def test_write_leaves_no_temporary_files(journal: Journal, location: str) -> None:
    journal.entries.write(1, 0, table_of(0))
    journal.entries.write(1, 0, table_of(1))  # refused
    batch_dir = Path(location) / "batches" / "000000000001"
    assert sorted(p.name for p in batch_dir.iterdir()) == ["00000.arrow"]


# -- state and ownership -----------------------------------------------------------------------


def test_writing_under_a_regular_file_raises_journal_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    journal = Journal(str(blocker / "journal"))
    with pytest.raises(JournalError, match="Cannot write journal file"):
        journal.entries.write(1, 0, table_of(0))
    with pytest.raises(JournalError, match="Cannot write journal file"):
        journal.state.write(JournalState(1, 0))


def test_file_uri_and_home_relative_locations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    by_uri = Journal((tmp_path / "j").as_uri())
    by_home = Journal("~/j")
    by_uri.entries.write(1, 0, table_of(0))

    assert by_home.entries.has_journaled(1, 0)
    assert by_home.batches.list() == [1]
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
    journal.meta.check_owner(QUEUE_URL)
    journal.state.write(JournalState(1, 0))
    journal.entries.write(1, 0, table_of(0))
    root = Path(location)

    journal.dedupe.write(1, ["m"], expires_at=10.0**10)
    journal.metrics.write(1, {"batch": 1})
    files = [p for p in root.rglob("*") if p.is_file()]
    assert {p.parent.name for p in files} >= {"state", "000000000001", "dedupe", "metrics"}
    for path in files:
        assert _mode(path) == 0o600, str(path)


def test_local_directories_are_accessible_by_the_owner_only(
    umask_022: None, journal: Journal, location: str
) -> None:
    # As on a driver: the probe creates the root, the first entry creates batches/<batch>.
    journal.meta.probe_writable()
    journal.entries.write(1, 0, table_of(0))
    root = Path(location)

    for path in (root, root / "batches", root / "batches" / "000000000001"):
        assert _mode(path) == 0o700, str(path)


def test_batch_directory_is_owner_only(umask_022: None, journal: Journal, location: str) -> None:
    journal.entries.write(1, 0, table_of(0))
    assert _mode(Path(location) / "batches" / "000000000001") == 0o700


def test_journal_root_created_by_the_probe_is_owner_only(
    umask_022: None, journal: Journal, location: str
) -> None:
    journal.meta.probe_writable()
    assert _mode(Path(location)) == 0o700


# -- pickling ----------------------------------------------------------------------------------


def test_journal_pickles_without_its_filesystem(journal: Journal) -> None:
    journal.entries.write(3, 0, table_of(0))  # opens the filesystem
    data = pickle.dumps(journal)

    assert b"pyarrow._fs" not in data
    restored = pickle.loads(data)
    assert restored.location == journal.location
    back = restored.entries.read(3, 0)
    assert back is not None and back.equals(table_of(0))
    assert restored.entries.write(3, 0, table_of(1)) is False


def test_unopened_journal_pickles(location: str) -> None:
    restored = pickle.loads(pickle.dumps(Journal(location, make_options(location))))
    assert restored.entries.write(1, 0, table_of(0)) is True
    assert restored.entries.has_journaled(1, 0)


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

    journal.meta.probe_writable()
    journal.meta.check_owner(QUEUE_URL)
    assert journal.state.read() == JournalState()
    journal.state.write(JournalState(planned_batch=2, acked_batch=1))
    assert journal.state.read() == JournalState(2, 1)

    assert journal.entries.read(2, 0) is None
    assert journal.batches.list() == []
    first, second = table_of(0, 1), table_of(2)
    assert journal.entries.write(2, 0, first) is True
    assert journal.entries.write(2, 0, table_of(9)) is False
    assert journal.entries.write(2, 3, second) is True

    # Another process (pickled journal, fresh filesystem) reads the same entries.
    other = pickle.loads(pickle.dumps(journal))
    back = other.entries.read(2, 0)
    assert back is not None and back.equals(first)
    assert other.batches.list() == [2]
    assert [r.receiver for r in other.entries.batch_receipts(2, [0, 1, 2, 3])] == [0, 3]
    assert pairs(other.entries.batch_receipts(2, [0, 3])) == handles_of(first) + handles_of(second)
    with pytest.raises(JournalError, match="belongs to queue"):
        other.meta.check_owner(OTHER_QUEUE_URL)

    other.dedupe.write(2, ["old"], expires_at=100.0)
    other.dedupe.write(3, ["new"], expires_at=200.0)
    assert journal.dedupe.read(now=150.0) == {"new": 200.0}
    assert journal.dedupe.read(now=0.0) == {"new": 200.0}, "expired record not removed"

    other.batches.remove(2)
    assert journal.batches.list() == []
    assert journal.entries.read(2, 0) is None
    assert journal.state.read() == JournalState(2, 1)


def test_s3_journal_client_leaves_timestamps_unparsed(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A LIST page's LastModified values cost most of its parsing; the journal never reads them.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    location = f"s3://journal-bucket/{uuid.uuid4().hex}?endpoint_override={s3_endpoint}&scheme=http"
    journal = Journal(location, make_options(location, region="us-east-1"))
    journal.entries.write(1, 0, table_of(0))
    assert journal.batches.list() == [1]
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
        journal.state.read()


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


def test_ack_reports_no_pending_batch_reads_are_collected(journal: Journal) -> None:
    for by in (2, 3, 5):
        journal.write_ack_report(by, 0, [_ack_entry(by - 1, 0)])
    # Batch 3's receivers acknowledge batch 4 (pending, oldest): their reports must stay.
    assert journal.collect_ack_reports(oldest_pending=4, keep={3}) == 1
    assert journal.read_ack_report(2, 0) is None
    for by, acknowledged in ((3, 2), (5, 4)):
        report = journal.read_ack_report(by, 0)
        assert report is not None and [e.batch for e in report.entries] == [acknowledged]


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


def test_an_ack_report_is_written_at_its_fixed_key_and_read_with_one_get(
    journal: Journal,
) -> None:
    entries = (_ack_entry(4, 0, uncertain=("m1", "m2")), _ack_entry(4, 1), _ack_entry(3, 2))
    journal.write_ack_report(5, 2, entries)
    assert journal.store.list("acks/000000000005") == [report_key(5, 2)]
    assert report_key(5, 2) == "acks/000000000005/00002.json"
    store = _counted(journal)
    assert journal.read_ack_report(5, 2) == AckReport(2, entries)
    assert store.calls == [("read", report_key(5, 2))], "one GET, no LIST"
    assert journal.read_ack_report(5, 1) is None
    assert journal.read_ack_report(6, 2) is None


def test_a_long_report_is_kept_whole_in_the_body(journal: Journal) -> None:
    entries = tuple(_ack_entry(b, 0) for b in range(1000, 1040))
    journal.write_ack_report(2000, 0, entries)
    assert journal.store.list("acks/000000002000") == ["acks/000000002000/00000.json"]
    assert journal.read_ack_report(2000, 0) == AckReport(0, entries)


def test_an_ack_report_at_its_key_is_read_although_the_list_hides_it(location: str) -> None:
    """A listing may lag a write (S3-compatible stores, NFS across hosts): a report the driver
    settles a batch from is read by key, never found by a LIST."""
    hiding = ListHidingStore(LocalStore(location), lambda key: key.startswith("acks/"))
    journal = Journal(location, make_options(location), store=hiding)
    entries = (_ack_entry(4, 0, uncertain=("m7",)), _ack_entry(4, 1))
    journal.write_ack_report(5, 3, entries)
    assert journal.store.list("acks") == [], "the LIST does not show it"
    hiding.calls.clear()

    assert journal.read_ack_report(5, 3) == AckReport(3, entries)
    assert not [c for c in hiding.calls if c[0] == "list"], "no LIST when the key exists"


def _legacy_summary_key(batch: int, receiver: int, entries: list[AckedEntry]) -> str:
    """The key an earlier version gave a report without uncertain ids: its counters."""
    summary = reports.summary_of(entries)
    assert summary is not None
    return f"acks/{batch:012d}/{receiver:05d}.s-{summary}.json"


def test_an_ack_report_an_earlier_version_named_after_its_counters_is_read_from_its_name(
    journal: Journal,
) -> None:
    """A restart after an upgrade: a report of an earlier version is found by a LIST, only
    when the fixed key is absent, and is read from its name alone."""
    entries = [
        _ack_entry(4, 0, window_dropped=1),
        _ack_entry(4, 1, lag=json.dumps({"messages": 2, "oldestAgeMs": 900, "medianAgeMs": 5})),
        _ack_entry(3, 2, lag=None),
    ]
    key = _legacy_summary_key(5, 7, entries)
    journal.store.create(key, reports.body_of(entries))
    # Another receiver's legacy report in the same batch is not this one's.
    journal.store.create(_legacy_summary_key(5, 8, [_ack_entry(4, 2)]), b"{}")
    store = _counted(journal)
    read = journal.read_ack_report(5, 7)
    assert store.calls == [("read", report_key(5, 7)), ("list", "acks/000000000005")], "no GET"
    assert read is not None and read.receiver == 7
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
    assert journal.read_ack_report(5, 9) is None


def test_an_ack_report_of_an_earlier_version_is_read_from_its_body(journal: Journal) -> None:
    """A restart after an upgrade: the previous version named every report <receiver>.json
    (and wrote no windowDropped), which is the fixed key."""
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
    assert journal.read_ack_report(5, 3) == AckReport(3, (_ack_entry(4, 0),))


def test_the_first_attempt_s_report_stands(journal: Journal) -> None:
    """A retried task repeats its deletes and writes its report again: the first one stands (it
    was written after that attempt's deletes, so what it calls certain was deleted with a
    valid handle); a later attempt's report is not merged into it."""
    first = [_ack_entry(4, 0)]
    journal.write_ack_report(5, 1, first)
    journal.write_ack_report(5, 1, [_ack_entry(4, 0, uncertain=("m9",), deleted=8)])
    journal.write_ack_report(5, 2, [_ack_entry(4, 1)])
    assert journal.store.list("acks/000000000005") == [report_key(5, 1), report_key(5, 2)]
    assert journal.read_ack_report(5, 1) == AckReport(1, tuple(first))
    assert journal.read_ack_report(5, 2) == AckReport(2, (_ack_entry(4, 1),))


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


# -- identity, format, probe -------------------------------------------------------------------


# -- a batch's life -----------------------------------------------------------------------------
