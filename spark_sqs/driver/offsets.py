"""Offsets of the SQS source, and the check that a checkpoint belongs to its journal. Runs on:
driver.

SQS has no positions to seek to, so an offset is a micro-batch sequence number of the source's
own, with the identity of the journal that numbered it: ``{"batch": N, "journal": "<id>"}``.
Batch N's messages are whatever its receivers journaled under N in that journal. Spark compares
offsets as JSON strings, so the dict is tiny and its keys are always in this order. Receipt
handles never go into offsets. Offsets written before the journal's identity was added have
no ``journal`` key; they are read as they are (and checked by number only).

Spark keeps the offsets in the checkpoint and hands them back; the journal keeps everything
else. If ``journalLocation`` is changed, or the journal deleted or replaced, while the
checkpoint is kept, the two no longer describe one stream: planning batch N anew in a journal
that never heard of it receives new messages under an old batch number, which a sink that
skips batches it already has (Delta, Iceberg, a foreachBatch checking the id) then drops or
doubles. ``CheckpointGuard`` refuses such a query before anything is received, acknowledged
or deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CheckpointMismatchError, SqsSourceError

KEY = "batch"
JOURNAL_KEY = "journal"


def make(batch: int, journal: str | None = None) -> dict[str, Any]:
    offset: dict[str, Any] = {KEY: int(batch)}
    if journal:
        offset[JOURNAL_KEY] = journal
    return offset


def batch_of(offset: Mapping[str, Any] | None) -> int:
    """The batch number in an offset Spark hands back (from the offset log or the runner)."""
    if offset is None:
        return 0
    try:
        value = offset[KEY]
    except (KeyError, TypeError):
        raise SqsSourceError(
            f"Offset {offset!r} was not written by the SQS source (no '{KEY}' key). Fix: the "
            "checkpoint belongs to another source; use a new checkpointLocation"
        ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SqsSourceError(f"Offset {offset!r} has an invalid batch number")
    return value


def journal_of(offset: Mapping[str, Any] | None) -> str | None:
    """The identity of the journal that numbered ``offset``; None for an offset written before
    offsets carried it."""
    if offset is None:
        return None
    value = offset.get(JOURNAL_KEY)
    return value if isinstance(value, str) and value else None


@dataclass
class CheckpointGuard:
    """What the journal knows of batch numbers, for checking the offsets Spark hands back.

    A batch number in Spark's checkpoint is known to this journal if the journal numbered it:
    it is at most the newest number the journal had handed out when this run started
    (``known_through``), or this run handed it out (``handed_out``). Spark passes a batch as
    the *start* of another only once it has committed it, so a start must also not be older
    than what the journal acknowledged (``acked``), unless it is the journal's initial offset
    (a new checkpoint on a used journal starts there, and adopts what is pending).
    """

    location: str
    identity: str | None
    known_through: int
    initial: int | None
    handed_out: set[int] = field(default_factory=set)
    # Batches this run planned (partitions called with them as the end): on Spark 4.0/4.1,
    # whose latestOffset gets no start, a number handed out but never planned is not yet a
    # start that Spark committed.
    planned: set[int] = field(default_factory=set)
    # Spark 4.0/4.1: numbers latestOffset answered with when it started no batch (the newest
    # planned). For a new checkpoint Spark takes such an answer as a batch from its initial
    # offset; every batch up to it is acknowledged, so that batch holds nothing.
    idle: set[int] = field(default_factory=set)
    # Reads an alias the journal recorded for another journal's batch (``absorbs``), by key.
    read_alias: Callable[[str, int], int | None] | None = None

    def forget_below(self, acked: int) -> None:
        """Drop the numbers below ``acked`` from what this run handed out, planned or answered
        idle: a start below it is refused (unless it is the initial batch, which the journal
        numbered before this run), and so is an end at or below it that was not answered idle
        at ``acked`` or later. What is kept is bounded by the batches in flight, not by the
        length of the run."""
        for numbers in (self.handed_out, self.planned, self.idle):
            numbers.difference_update([n for n in numbers if n < acked])

    def check_start(self, offset: Mapping[str, Any], acked: int, *, planned_only: bool) -> int:
        """The committed batch ``offset`` names, if this journal may go on from it.
        ``planned_only``: a number this run handed out counts only once it was planned."""
        self.forget_below(acked)
        batch = self.resolve(offset)
        # First: a number below ``acked`` was numbered (markers only grow), though this run
        # may have forgotten handing it out (forget_below).
        if batch < acked and batch != self.initial:
            self._refuse(batch, f"has acknowledged batches up to {acked} already")
        ours = self.planned if planned_only else self.handed_out
        if batch > self.known_through and batch not in ours:
            self._refuse(batch, "never numbered that batch")
        return batch

    def check_end(self, offset: Mapping[str, Any], acked: int) -> int:
        """The batch ``offset`` ends, if this journal numbered it and it is not acknowledged
        (Spark replays only batches it has not committed)."""
        self.forget_below(acked)
        batch = batch_of(offset)
        self._check_identity(offset, batch)
        if batch <= acked and batch not in self.idle:
            self._refuse(batch, f"has acknowledged batches up to {acked} already")
        if batch > self.known_through and batch not in self.handed_out:
            self._refuse(batch, "never numbered that batch")
        return batch

    def foreign(self, offset: Mapping[str, Any]) -> str | None:
        """The identity of another journal that ``offset`` names, or None."""
        theirs = journal_of(offset)
        return theirs if theirs is not None and self.identity not in (None, theirs) else None

    def absorbs(self, start: int, end: Mapping[str, Any]) -> bool:
        """True for a batch whose end another journal numbered while its start is this
        journal's (resolved): on Spark 4.0/4.1, whose latestOffset() gets no start, a run
        started with this checkpoint on another journal answered before anything could be
        checked, Spark logged that answer, and the run was refused when it planned the batch
        (nothing was received under it). Once the right journal is back, such a batch holds
        nothing, and its end stands for ``start`` (the caller records the alias)."""
        return self.foreign(end) is not None and batch_of(end) >= 0 and start >= 0

    def resolve(self, offset: Mapping[str, Any]) -> int:
        """This journal's batch for ``offset``: its number, or, for another journal's offset
        that this journal absorbed (``absorbs``), the batch it stands for. Any other offset of
        another journal is refused."""
        batch = batch_of(offset)
        theirs = self.foreign(offset)
        if theirs is None:
            return batch
        mapped = self.read_alias(theirs, batch) if self.read_alias is not None else None
        if mapped is None:
            self._check_identity(offset, batch)
        assert mapped is not None
        return mapped

    def _check_identity(self, offset: Mapping[str, Any], batch: int) -> None:
        theirs = journal_of(offset)
        if theirs is not None and self.identity is not None and theirs != self.identity:
            raise CheckpointMismatchError(
                f"The checkpoint does not match journalLocation {self.location}: its "
                f"offsets name batch {batch} of journal {theirs}, and the journal at that "
                f"location is journal {self.identity}. {_CAUSE} {_FIX}"
            )

    def _refuse(self, batch: int, what: str) -> None:
        state = (
            "is empty"
            if self.known_through == 0
            else f"has numbered batches up to {self.known_through}"
        )
        raise CheckpointMismatchError(
            f"The checkpoint does not match journalLocation {self.location}: the checkpoint is "
            f"at batch {batch}, and the journal {state} and {what}. {_CAUSE} {_FIX}"
        )


_CAUSE = (
    "This happens when journalLocation was changed, or the journal deleted or replaced, while "
    "the checkpoint was kept. Nothing was received, acknowledged or deleted."
)
_FIX = (
    "Fix: point journalLocation back at the journal this checkpoint was written with, or "
    "start the query with a new checkpointLocation (a new checkpoint on a used journal "
    "delivers what the journal holds unacknowledged in its first batch)."
)
