"""The spark-sqs command against an in-process moto (send, then inspect queue and journal)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_sqs.cli import main
from spark_sqs.journal import BatchPlan, Journal, JournalState, ReceiverPlan
from spark_sqs.schema import messages_to_table
from tests.factories import make_options, sqs_message


@pytest.fixture
def queue_url(mocked_sqs: Any) -> str:
    return mocked_sqs.create_queue(QueueName="cli")["QueueUrl"]


def test_send_then_inspect_reports_backlog_and_journal(queue_url, tmp_path, capsys) -> None:
    assert main(["send", "--queue-url", queue_url, "--count", "25"]) == 0
    journal = Journal(str(tmp_path / "j"), make_options(str(tmp_path / "j")))
    # Batch 3 is pending: its plan names receivers 0 and 1; 0's entry holds two messages, 1
    # has journaled nothing yet.
    journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 2), ReceiverPlan(1, 2))))
    journal.entries.write(3, 0, messages_to_table([sqs_message(1), sqs_message(2)], queue_url))
    journal.state.write(JournalState(planned_batch=3, acked_batch=2, initial_batch=0))
    capsys.readouterr()

    assert main(["inspect", "--queue-url", queue_url, "--journal", str(tmp_path / "j")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["visible"] == 25 and report["inFlight"] == 0
    assert report["journal"]["plannedBatch"] == 3
    assert report["journal"]["unacknowledgedBatches"] == {"3": 2}
    assert report["journal"]["receiversWithoutEntry"] == {"3": [1]}
    assert "AQEB" not in json.dumps(report), "no receipt handles in the output"


def test_inspect_shows_the_counters_of_recent_batches_from_their_markers(
    queue_url, tmp_path, capsys
) -> None:
    """Each acknowledged marker holds its batch's counters; a journal upgraded from the
    version that wrote ``metrics/<N>.json`` shows those files' counters too."""
    journal = Journal(str(tmp_path / "j"), make_options(str(tmp_path / "j")))
    journal.store.put("metrics/000000000001.json", json.dumps({"batch": 1, "deleted": 4}).encode())
    known = JournalState()
    for batch in range(2, 8):
        state = JournalState(planned_batch=batch, acked_batch=batch, initial_batch=0)
        journal.state.write(state, known=known, metrics={"batch": batch, "deleted": batch})
        known = state
    capsys.readouterr()

    assert main(["inspect", "--queue-url", queue_url, "--journal", str(tmp_path / "j")]) == 0
    report = json.loads(capsys.readouterr().out)
    recent = report["journal"]["recentBatches"]
    assert [(m["batch"], m["deleted"]) for m in recent] == [(b, b) for b in range(3, 8)]
    assert [m["batch"] for m in journal.metrics.read()] == list(range(1, 8))


def test_unknown_arguments_are_rejected(queue_url) -> None:
    with pytest.raises(SystemExit):
        main(["send", "--queue-url", queue_url, "--bogus"])


def test_a_missing_queue_is_an_error_naming_it_not_a_traceback(mocked_sqs, capsys) -> None:
    missing = mocked_sqs.create_queue(QueueName="gone")["QueueUrl"]
    mocked_sqs.delete_queue(QueueUrl=missing)

    assert main(["send", "--queue-url", missing, "--count", "3"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("spark-sqs send: ") and "does not exist" in err and missing in err
    assert "Traceback" not in err
