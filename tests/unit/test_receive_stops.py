"""Why receivers stopped receiving, from their journal entries to their batch's metrics: the
counts in the names of acknowledgement reports (journal/reports.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_sqs.journal import AckedEntry, Journal
from tests.unit.factories import make_options


def _ack_entry(
    batch: int, receiver: int, uncertain: tuple[str, ...] = (), **extra: Any
) -> AckedEntry:
    fields = {"rows": 10, "dropped": 0, "deleted": 10, "delete_failures": 0} | extra
    return AckedEntry(batch=batch, receiver=receiver, uncertain=uncertain, **fields)


def test_an_ack_report_s_name_counts_why_the_receivers_stopped(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    entries = [
        _ack_entry(4, 0, stops=(("empty receive", 1),)),
        _ack_entry(4, 1, stops=(("visible when planned", 1),)),
        _ack_entry(4, 2, stops=(("empty receive", 1),)),
        _ack_entry(4, 3, stops=(("a reason of a later version", 1),)),
        _ack_entry(3, 0),
    ]
    journal.write_ack_report(5, 7, entries)
    [key] = journal.store.list("acks/000000000005")
    assert "xe2o1v1" in key
    [read] = journal.read_ack_reports(5)
    by_batch = {e.batch: e for e in read.entries}
    assert dict(by_batch[4].stops) == {"empty receive": 2, "visible when planned": 1, "other": 1}
    assert by_batch[3].stops == ()
    # In a body (a report with uncertain ids), each entry keeps its own reason.
    journal.write_ack_report(6, 1, [_ack_entry(5, 0, ("m1",), stops=(("time budget", 1),))])
    [body] = journal.read_ack_reports(6)
    assert body.entries[0].stops == (("time budget", 1),)
