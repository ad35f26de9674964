"""The journal over its stores (spark_sqs/journal/stores.py), local and on S3: files,
permissions, pickling, retries. Each record kind of spark_sqs/journal/ has its test_<kind>.py
beside this file."""

from __future__ import annotations

import logging
import os
import pickle
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.errors import JournalError
from spark_sqs.journal import Journal, JournalState
from tests.factories import OTHER_QUEUE_URL, QUEUE_URL, handles_of, make_options, pairs, table_of


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

    journal.dedupe.write(1, ["m"], now=0.0, window=60.0, wall=10.0**10)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert {p.parent.name for p in files} >= {"state", "000000000001", "dedupe"}
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

    other.dedupe.write(2, ["old"], now=0.0, window=100.0, wall=1_700_000_000.0)
    other.dedupe.write(3, ["new"], now=100.0, window=100.0, wall=1_700_000_000.0)
    other.dedupe.collect(150.0)
    assert journal.dedupe.read(now=10.0, window=60.0) == {"new": 70.0}

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


def test_s3_journals_of_one_location_share_one_client_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every receiver task builds its journal anew (it travels in the partition): a client of
    # its own would cost each task a botocore session and S3's service model.
    import botocore.session

    from spark_sqs.journal import stores
    from spark_sqs.per_process import PerProcess

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(stores, "_CLIENTS", PerProcess())
    created: list[str] = []
    original = botocore.session.Session.create_client

    def counting(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        created.append(service_name)
        return original(self, service_name, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counting)
    location = "s3://journal-bucket/j?endpoint_override=127.0.0.1:9&scheme=http"
    options = make_options(location, region="us-east-1")
    tasks = [pickle.loads(pickle.dumps(Journal(location, options))) for _ in range(5)]
    clients = {id(journal.store.client) for journal in tasks}
    assert (len(clients), created) == (1, ["s3"])

    # Another endpoint or region is another client.
    elsewhere = location.replace("127.0.0.1:9", "127.0.0.1:10")
    other = Journal(elsewhere, make_options(elsewhere, region="us-east-1")).store.client
    west = Journal(location, make_options(location, region="eu-west-1")).store.client
    assert len({id(c) for c in (tasks[0].store.client, other, west)}) == 3
    assert created == ["s3"] * 3


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


# -- removals at the lowest price -------------------------------------------------------------


def test_a_few_keys_go_as_free_single_deletes_and_many_as_one_multi_object_delete(
    journal_location: str,
) -> None:
    """S3 bills ``DeleteObjects`` like a PUT and ``DeleteObject`` nothing: a settled batch's
    handful of files goes key by key, the sweep's findings in one request; both stores remove
    the same keys, missing ones included."""
    from collections import Counter

    from spark_sqs.journal.stores import SINGLE_DELETES_UP_TO, S3Store

    journal = Journal(journal_location)
    store = journal.store
    sent: Counter[str] = Counter()
    if isinstance(store, S3Store):
        store.client.meta.events.register(
            "before-call.s3", lambda model, **_: sent.update([model.name])
        )
    few = [f"batches/1/{r:05d}.arrow" for r in range(SINGLE_DELETES_UP_TO - 1)]
    many = [f"drops/{n:03d}.arrow" for n in range(SINGLE_DELETES_UP_TO + 20)]
    for key in [*few, *many, "batches/1/_plan.json"]:
        store.create(key, b"x")
    sent.clear()

    store.delete_many([*few, "batches/1/absent.json"])
    if isinstance(store, S3Store):
        assert sent == Counter({"DeleteObject": SINGLE_DELETES_UP_TO})
    assert store.list("batches") == ["batches/1/_plan.json"]
    sent.clear()

    store.delete_many(many)
    if isinstance(store, S3Store):
        assert sent == Counter({"DeleteObjects": 1})
    assert store.list("drops") == []


def test_single_deletes_try_every_key_before_raising() -> None:
    from spark_sqs.journal.stores import S3Store

    class Client:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def delete_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
            if Key.endswith("denied"):
                from botocore.exceptions import ClientError

                raise ClientError({"Error": {"Code": "AccessDenied"}}, "DeleteObject")
            self.deleted.append(Key)
            return {}

    client = Client()
    store = S3Store("bucket", "j", client_factory=lambda: client, sleep=lambda _: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(JournalError, match="AccessDenied"):
        store.delete_many(["a", "denied", "b", "c"])
    assert sorted(client.deleted) == ["j/a", "j/b", "j/c"]
