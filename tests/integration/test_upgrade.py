"""Upgrading in place: a stream that the released version ran, stopped with batches pending in
its journal, goes on under this version on the same checkpoint and journal; every message
reaches the sink exactly once and the queue empties. And the other direction: a journal of a
newer format than this version reads is refused before anything is received.

The released version is a commit of this repository's history (``RELEASED``): its
``spark_sqs`` is extracted with ``git archive`` and run in a child process
(``upgrade_child.py``) whose ``PYTHONPATH`` puts it first, for the driver and the executors.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from spark_sqs.journal import Journal
from spark_sqs.journal.meta import FORMAT_VERSION
from spark_sqs.sqs.client import queue_counts
from tests.helpers import (
    CopiesAfterDelete,
    drain_and_stop,
    expire_visibility,
    send_numbered,
    sqs_stream,
    start_and_fail,
    wait_until,
)
from tests.integration.upgrade_child import write_sink

pytestmark = pytest.mark.integration

# The version users run now: the last commit CI landed before journal format 3. Move it on
# when a release changes what the journal or the checkpoint holds (with the checks of what the
# released version left, which are those of format 2).
RELEASED = "8c3c3cccb18b9143dd6d4c89089b463d328f0874"
RELEASED_FORMAT = 2
REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("upgrade_child.py")
# Long enough that the released version's heartbeat keeps its batches in flight on a busy
# machine, and that the messages of the batch it was killed in are still in flight when this
# version replays it; the test makes messages visible again itself where it means to.
VISIBILITY = 60
PER_TRIGGER = 10
# A report of this version: at the fixed key of its batch and receiver.
FIXED_REPORT = re.compile(r"^acks/\d{12}/\d{5}\.json$")
# A report of the released version: its counters in the name.
SUMMARY_REPORT = re.compile(r"^acks/\d{12}/\d{5}\.s-[^/]+\.json$")


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the released version's ``spark_sqs``, extracted from git.

    Missing history fails the test rather than skipping it: a skip would turn the only check
    of upgrades off, unnoticed, in a CI that clones shallowly (the default of
    ``actions/checkout``)."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{RELEASED}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"The upgrade test runs the released version, commit {RELEASED}, taken from this "
            f"repository's history, and {REPO} does not have it (a shallow clone, or no git "
            f"clone: {found.stderr.decode(errors='replace').strip()}). Fix: `git fetch "
            f"--unshallow`, or `git fetch origin {RELEASED}`; in CI, clone with full history "
            "(actions/checkout: `fetch-depth: 0`)",
            pytrace=False,
        )
    folder = tmp_path_factory.mktemp("released")
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", RELEASED, "spark_sqs"], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0, "git archive failed"
    assert (folder / "spark_sqs" / "__init__.py").exists()
    return folder


class ReleasedQuery:
    """The released version's query in a child process, in a session of its own so that the
    whole tree (Python driver, JVM, Python workers) can be killed at once."""

    def __init__(
        self, released: Path, tmp: Path, endpoint: str, queue_url: str, journal: str, ending: str
    ) -> None:
        self.released = released
        self.control = tmp / "control"
        self.control.mkdir()
        self.log = tmp / "released-child.log"
        self.args = [
            sys.executable,
            str(CHILD),
            *("--endpoint", endpoint, "--queue-url", queue_url, "--journal", journal),
            *("--checkpoint", str(tmp / "checkpoint"), "--out", str(tmp / "out")),
            *("--control", str(self.control), "--ending", ending),
            *("--visibility", str(VISIBILITY), "--max-messages", str(PER_TRIGGER)),
        ]
        # The released package first; the repository after it, for devtools and tests. The
        # working directory is not the repository: Python workers, started with `-m`, put
        # their working directory first on sys.path.
        self.env = dict(os.environ, PYTHONPATH=f"{released}{os.pathsep}{REPO}")
        self.cwd = tmp
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )

    def wait_for(self, there: Any, what: str, timeout: float = 300) -> None:
        def check() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"child exited early:\n{self.log.read_text()[-3000:]}")
            return bool(there())

        wait_until(check, timeout, f"the released version's query to reach {what}")

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        assert self.process is not None
        (self.control / "stop").write_text("")
        try:
            assert self.process.wait(120) == 0, self.log.read_text()[-3000:]
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)

    def sunk(self) -> list[int]:
        """The batch ids the child's sink wrote."""
        return sorted(int(p.name.split("-", 1)[1]) for p in self.control.glob("sunk-*"))

    def check_imported_released_version(self) -> None:
        """The driver's Python and every executor's Python worker imported the released
        package (the streaming-source process's part shows in what it wrote)."""
        imported = json.loads((self.control / "imported.json").read_text())
        processes = [imported["driver"], *imported["executors"]]
        assert len({p["pid"] for p in processes}) >= 2, imported
        for process in processes:
            assert Path(process["file"]).is_relative_to(self.released), imported
            assert process["format"] == RELEASED_FORMAT, imported


def _sink_numbers(out: Path) -> list[int]:
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    return sorted(json.loads(b)["n"] for b in table.column("body").to_pylist())


def _offsets(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """Spark's offset log: batch id -> the source's end offset."""
    return {
        int(path.name): json.loads(path.read_text().splitlines()[-1])
        for path in (checkpoint / "offsets").iterdir()
        if path.name.isdigit()
    }


def _check_each_sent_once(out: Path, sent: list[int]) -> None:
    numbers = _sink_numbers(out)
    assert numbers == sent, (
        f"lost {sorted(set(sent) - set(numbers))}, "
        f"duplicated {sorted({n for n in numbers if numbers.count(n) > 1})}"
    )


def _start_this_version(
    spark: Any,
    endpoint: str,
    queue_url: str,
    journal_location: str,
    checkpoint: Path,
    out: Path,
    written: Callable[[int], None],
) -> Any:
    """This version's query, on the checkpoint and journal the released version left, with
    the options and sink the released version ran with (``upgrade_child.py``); ``written`` is
    called after each batch's write."""
    stream = sqs_stream(
        spark,
        endpoint,
        queue_url,
        journal_location,
        visibilityTimeout=VISIBILITY,
        maxMessagesPerTrigger=PER_TRIGGER,
        numPartitions=2,
    )
    return (
        stream.writeStream.foreachBatch(write_sink(spark, str(out), written))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def _committed(checkpoint: Path) -> set[int]:
    commits = checkpoint / "commits"
    return (
        {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.exists() else set()
    )


def _journal_at(tmp_path: Path, moto_endpoint: str, s3: Any, kind: str) -> str:
    if kind == "local":
        return str(tmp_path / "journal")
    try:
        s3.create_bucket(Bucket="upgrade-journals")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    host = moto_endpoint.split("://", 1)[1]
    return f"s3://upgrade-journals/{tmp_path.name}?endpoint_override={host}&scheme=http"


@pytest.mark.parametrize("journal_kind", ["local", "s3"])
@pytest.mark.parametrize("ending", ["killed", "stopped"])
def test_a_stream_of_the_released_version_goes_on_under_this_one_exactly_once(
    released: Path,
    spark: Any,
    moto_endpoint: str,
    sqs: Any,
    s3: Any,
    queue_url: str,
    tmp_path: Path,
    journal_kind: str,
    ending: str,
) -> None:
    """The released version runs the stream, and stops with batches pending in its journal:

    - ``killed``: SIGKILLed after its sink wrote Spark's batch 1 and before Spark's commit log
      has it. Batch 1 is logged, in the sink, not committed; batch 0 is committed, its
      messages were deleted by batch 1's receivers, whose reports (named as the released
      version names them) its driver had not read yet.
    - ``stopped``: ``query.stop()`` after batch 0 is in the commit log, with no next batch
      planned: batch 0 is committed and nothing of it acknowledged.

    More messages arrive while the stream is down. This version then runs on the same
    checkpoint and journal until the queue is empty: it replays batch 1 as first received (the
    sink runs it, then skips the write: anything else would be lost), acknowledges what the
    released version left, and drops redeliveries of its messages.
    """
    journal_location = _journal_at(tmp_path, moto_endpoint, s3, journal_kind)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    sent = send_numbered(sqs, queue_url, 30)

    child = ReleasedQuery(released, tmp_path, moto_endpoint, queue_url, journal_location, ending)
    child.start()
    if ending == "killed":
        child.wait_for(lambda: (child.control / "at-after-sink").exists(), "its held batch")
        child.kill()
    else:
        child.wait_for(lambda: 0 in _committed(checkpoint), "the commit of its batch")
        child.stop()
    child.check_imported_released_version()

    # What the released version left: a journal of its format, offsets without the journal's
    # identity, and batches pending (planned, not acknowledged).
    journal = Journal(journal_location)
    identity = journal.meta.identity()
    meta = journal.store.read("_meta.json")
    assert meta is not None and json.loads(meta)["format"] == RELEASED_FORMAT
    assert "journalId" not in json.loads(meta)
    released_offsets = _offsets(checkpoint)
    assert all("journal" not in o for o in released_offsets.values()), released_offsets
    before = journal.state.read()
    assert before.planned_batch > before.acked_batch, before
    # The released version wrote each acknowledged batch's counters to metrics/<N>.json.
    released_metrics = {m["batch"] for m in journal.metrics.read()}
    assert journal.batches.status(before.planned_batch) == "live"
    if ending == "killed":
        assert child.sunk() == [0, 1]
        assert sorted(released_offsets) == [0, 1] and _committed(checkpoint) == {0}
        assert [k for k in journal.store.list("acks") if SUMMARY_REPORT.match(k)], (
            "no report of the released version's executors"
        )
    else:
        assert child.sunk() == [0]
        assert sorted(released_offsets) == [0] and _committed(checkpoint) == {0}
        assert sum(queue_counts(sqs, queue_url)) == 30  # nothing acknowledged

    sent += send_numbered(sqs, queue_url, 20, start=len(sent))
    if ending == "stopped":
        # The committed batch's messages come back, as after an upgrade that outlasted the
        # visibility timeout: this version must drop them as redeliveries.
        assert expire_visibility(queue_url) == PER_TRIGGER
    # killed: the logged batch's messages stay in flight (the timeout is long), so a replay
    # that received anew instead of replaying the journal would get other messages, which
    # the sink drops (it has batch 1): lost.

    # This version, on the same checkpoint and journal.
    reports: set[str] = set()

    def written(_: int) -> None:
        # After a batch's receivers acknowledged the previous batch, before the driver reads
        # and removes their reports.
        reports.update(Journal(journal_location).store.list("acks"))

    query = _start_this_version(
        spark, moto_endpoint, queue_url, journal_location, checkpoint, out, written
    )

    def settled() -> bool:
        state = Journal(journal_location).state.read()
        return state.acked_batch == state.planned_batch and not journal.batches.list()

    drain_and_stop(query, sqs, queue_url, timeout=300, until=settled)

    _check_each_sent_once(out, sent)
    assert queue_counts(sqs, queue_url) == (0, 0)

    # The journal as this version keeps it. Its _meta.json is not rewritten: the identity
    # derived from it stays, and this version's offsets carry it.
    after = Journal(journal_location)
    assert after.store.read("_meta.json") == meta
    assert identity and after.meta.identity() == identity
    offsets = _offsets(checkpoint)
    assert len(offsets) > len(released_offsets)
    for batch_id, offset in offsets.items():
        if batch_id in released_offsets:
            assert offset == released_offsets[batch_id]
        else:
            assert offset["journal"] == identity, offset
    # Every batch acknowledged and removed, by key; the initial batch kept.
    state = after.state.read()
    assert state.initial_batch == before.initial_batch
    assert state.planned_batch == offsets[max(offsets)]["batch"]
    assert after.batches.list() == [] and after.store.list("acks") == []
    for batch in range(before.acked_batch + 1, state.planned_batch + 1):
        assert after.batches.status(batch) == "removed"
    # The counters: the released version's files are still read, beside this version's, which
    # its acknowledged markers hold.
    counted = {m["batch"]: m for m in after.metrics.read()}
    assert released_metrics <= set(counted), (released_metrics, sorted(counted))
    assert counted[state.acked_batch]["batch"] == state.acked_batch
    assert not [k for k in after.store.list("metrics") if int(k[8:-5]) > before.acked_batch]
    # Receivers of this version wrote their reports at fixed keys.
    new_reports = reports - {k for k in reports if SUMMARY_REPORT.match(k)}
    assert new_reports and all(FIXED_REPORT.match(k) for k in new_reports), sorted(reports)


def test_a_journal_of_a_newer_format_is_refused_before_anything_is_received(
    spark: Any, moto_endpoint: str, sqs: Any, queue_url: str, tmp_path: Path
) -> None:
    """A journal this version wrote, with its format number raised above the one it writes
    (what a journal a newer version created looks like to this one): the query fails at
    start naming the format and the fix, and the queue is left alone."""
    location = tmp_path / "journal"
    Journal(str(location)).meta.check_owner(queue_url)
    meta = json.loads((location / "_meta.json").read_text())
    assert meta["format"] == FORMAT_VERSION
    (location / "_meta.json").write_text(json.dumps({**meta, "format": FORMAT_VERSION + 1}))
    send_numbered(sqs, queue_url, 5)

    options = {
        "queueUrl": queue_url,
        "endpointUrl": moto_endpoint,
        "journalLocation": str(location),
    }
    message = start_and_fail(spark, options, str(tmp_path / "checkpoint"))

    assert f"journal format {FORMAT_VERSION + 1}" in message, message
    assert "newer version of spark-sqs" in message and "Fix:" in message, message
    assert queue_counts(sqs, queue_url) == (5, 0)
    assert not (location / "batches").exists()


def test_window_segments_of_the_previous_layout_still_drop_copies(
    released: Path,
    spark: Any,
    moto_endpoint: str,
    sqs: Any,
    queue_url: str,
    tmp_path: Path,
) -> None:
    """The released version acknowledges batch 0 (batch 1's receivers delete its messages,
    writing window segments named as it names them: ``window/<expires>-<N>-<who>.arrow``) and
    is killed. This version goes on on the same journal until every batch is acknowledged;
    SQS then hands out copies of the messages the released version deleted (no batch holds
    them any more). This version finds the previous layout's segments by one LIST (its driver
    at start, each worker at its first lookup) and drops the copies: every message reaches the
    sink once."""
    journal_location = str(tmp_path / "journal")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    sent = send_numbered(sqs, queue_url, 30)
    copies = CopiesAfterDelete(held=True).__enter__()
    child = ReleasedQuery(released, tmp_path, moto_endpoint, queue_url, journal_location, "killed")
    child.start()
    child.wait_for(lambda: (child.control / "at-after-sink").exists(), "its held batch")
    child.kill()
    copies.__exit__()
    legacy = [k for k in Journal(journal_location).store.list("window") if "/" not in k[7:]]
    assert legacy, "the released version wrote window segments"
    assert copies.copies, "copies of the messages the released version deleted"
    query = _start_this_version(
        spark, moto_endpoint, queue_url, journal_location, checkpoint, out, lambda _: None
    )

    def settled() -> bool:
        state = Journal(journal_location).state.read()
        return state.acked_batch == state.planned_batch

    def delivered() -> bool:
        try:
            return sorted(set(_sink_numbers(out))) == sent and settled()
        except Exception:
            return False  # no output yet

    try:
        wait_until(delivered, 300, "every message sent in the sink, every batch acknowledged")
    except BaseException:
        query.stop()
        raise
    released_copies = copies.release()
    drain_and_stop(query, sqs, queue_url, timeout=300, until=settled)
    _check_each_sent_once(out, sent)
    assert queue_counts(sqs, queue_url) == (0, 0)
    metrics = Journal(journal_location).metrics.read()
    dropped = sum(m.get("duplicateWindowDropped", 0) for m in metrics)
    assert dropped == released_copies, "the copies were dropped by the previous layout's segments"
