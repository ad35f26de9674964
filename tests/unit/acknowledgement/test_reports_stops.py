"""Why receivers stopped receiving, from their journal entries to their batch's metrics:
carried by the acknowledgement reports (spark_sqs/acknowledgement/reports.py; the reports' own
records are tested in test_reports.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_sqs.acknowledgement import reports
from spark_sqs.acknowledgement.reports import AckedEntry, AckReports, summed_stops
from spark_sqs.journal import Journal
from tests.factories import make_options


def _ack_entry(
    batch: int, receiver: int, uncertain: tuple[str, ...] = (), **extra: Any
) -> AckedEntry:
    fields = {"rows": 10, "dropped": 0, "deleted": 10, "delete_failures": 0} | extra
    return AckedEntry(batch=batch, receiver=receiver, uncertain=uncertain, **fields)


def test_an_ack_report_carries_why_each_receiver_stopped(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    entries = [
        _ack_entry(4, 0, stops=(("empty receive", 1),)),
        _ack_entry(4, 1, stops=(("visible when planned", 1),)),
        _ack_entry(4, 2, stops=(("empty receive", 1),), uncertain=("m1",)),
        _ack_entry(3, 0),
    ]
    AckReports(journal).write(5, 7, entries)
    read = AckReports(journal).read(5, 7)
    assert read is not None
    assert [e.stops for e in read.entries] == [e.stops for e in entries]
    assert summed_stops(e.stops for e in read.of_batch(4)) == {
        "empty receive": 2,
        "visible when planned": 1,
    }


def test_a_report_named_by_an_earlier_version_counts_the_stops_in_its_name(tmp_path: Path) -> None:
    """Reports written before reports were read by key carried their counters, stop reasons
    included, in the object's name; an upgraded driver still settles from them."""
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    entries = [
        _ack_entry(4, 0, stops=(("empty receive", 1),)),
        _ack_entry(4, 1, stops=(("visible when planned", 1),)),
        _ack_entry(4, 2, stops=(("empty receive", 1),)),
        _ack_entry(4, 3, stops=(("a reason of a later version", 1),)),
    ]
    summary = reports.summary_of(entries)
    assert summary is not None and "xe2o1v1" in summary
    journal.store.create(f"acks/000000000005/00007.s-{summary}.json", reports.body_of(entries))
    read = AckReports(journal).read(5, 7)
    assert read is not None
    (by_batch,) = read.entries
    assert dict(by_batch.stops) == {"empty receive": 2, "visible when planned": 1, "other": 1}
