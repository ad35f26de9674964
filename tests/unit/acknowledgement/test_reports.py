"""The acknowledgement reports (spark_sqs/acknowledgement/reports.py): written at a fixed key,
read with one GET, reports of earlier versions read from their names or bodies, collected."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.acknowledgement import reports
from spark_sqs.acknowledgement.reports import AckedEntry, AckReport, AckReports, report_key
from spark_sqs.journal import Journal, LocalStore
from tests.factories import make_options
from tests.fakes import HookedStore, ListHidingStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_ack_reports_no_pending_batch_reads_are_collected(journal: Journal) -> None:
    for by in (2, 3, 5):
        AckReports(journal).write(by, 0, [_ack_entry(by - 1, 0)])
    # Batch 3's receivers acknowledge batch 4 (pending, oldest): their reports must stay.
    assert AckReports(journal).collect(oldest_pending=4, keep={3}) == 1
    assert AckReports(journal).read(2, 0) is None
    for by, acknowledged in ((3, 2), (5, 4)):
        report = AckReports(journal).read(by, 0)
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
    AckReports(journal).write(5, 2, entries)
    assert journal.store.list("acks/000000000005") == [report_key(5, 2)]
    assert report_key(5, 2) == "acks/000000000005/00002.json"
    store = _counted(journal)
    assert AckReports(journal).read(5, 2) == AckReport(2, entries)
    assert store.calls == [("read", report_key(5, 2))], "one GET, no LIST"
    assert AckReports(journal).read(5, 1) is None
    assert AckReports(journal).read(6, 2) is None


def test_a_long_report_is_kept_whole_in_the_body(journal: Journal) -> None:
    entries = tuple(_ack_entry(b, 0) for b in range(1000, 1040))
    AckReports(journal).write(2000, 0, entries)
    assert journal.store.list("acks/000000002000") == ["acks/000000002000/00000.json"]
    assert AckReports(journal).read(2000, 0) == AckReport(0, entries)


def test_an_ack_report_at_its_key_is_read_although_the_list_hides_it(location: str) -> None:
    """A listing may lag a write (S3-compatible stores, NFS across hosts): a report the driver
    settles a batch from is read by key, never found by a LIST."""
    hiding = ListHidingStore(LocalStore(location), lambda key: key.startswith("acks/"))
    journal = Journal(location, make_options(location), store=hiding)
    entries = (_ack_entry(4, 0, uncertain=("m7",)), _ack_entry(4, 1))
    AckReports(journal).write(5, 3, entries)
    assert journal.store.list("acks") == [], "the LIST does not show it"
    hiding.calls.clear()

    assert AckReports(journal).read(5, 3) == AckReport(3, entries)
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
    read = AckReports(journal).read(5, 7)
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
    assert AckReports(journal).read(5, 9) is None


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
    assert AckReports(journal).read(5, 3) == AckReport(3, (_ack_entry(4, 0),))


def test_the_first_attempt_s_report_stands(journal: Journal) -> None:
    """A retried task repeats its deletes and writes its report again: the first one stands (it
    was written after that attempt's deletes, so what it calls certain was deleted with a
    valid handle); a later attempt's report is not merged into it."""
    first = [_ack_entry(4, 0)]
    AckReports(journal).write(5, 1, first)
    AckReports(journal).write(5, 1, [_ack_entry(4, 0, uncertain=("m9",), deleted=8)])
    AckReports(journal).write(5, 2, [_ack_entry(4, 1)])
    assert journal.store.list("acks/000000000005") == [report_key(5, 1), report_key(5, 2)]
    assert AckReports(journal).read(5, 1) == AckReport(1, tuple(first))
    assert AckReports(journal).read(5, 2) == AckReport(2, (_ack_entry(4, 1),))
