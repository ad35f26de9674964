"""Poison batches on the driver: deciding a replay's narrowing, carrying messages out into a new
journal batch, quarantining the one message left to the dead-letter queue, and the manual
release (``spark-sqs release``). Runs on: driver (and the ``spark-sqs`` command, for release and
``inspect``).

The records and the whole mechanism are described in ``spark_sqs.journal.poison``; the
executors' side (attempt counting, applying a narrowing) is ``spark_sqs.executor.poison``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..acknowledgement.deletes import OneByOne, delete_messages
from ..errors import InvalidOptionError
from ..journal.poison import (
    CARRY,
    DEAD_LETTER,
    FIRST_ATTEMPT,
    RELEASED,
    SUSPECT,
    Attempt,
    Narrowing,
    attempts_by_step,
    first_attempt,
    keep_only,
)
from ..journal.window import DRIVER
from ..schema import RECEIPT_HANDLE
from ..sqs.batching import Entry
from ..sqs.client import SqsClient
from .planning import ADOPTED_FROM

if TYPE_CHECKING:
    from ..journal import BatchPlan, Journal
    from ..options import SqsOptions

logger = logging.getLogger(__name__)

# The message attribute that tells a dead-letter consumer where a message came from.
QUARANTINE_ATTRIBUTE = "SparkSqsQuarantine"
MAX_ATTRIBUTES = 10


@dataclass(frozen=True)
class Decision:
    kind: str  # "replay", "narrow", "quarantine"
    keep: dict[int, list[str]] = field(default_factory=dict)
    carried: dict[int, list[str]] = field(default_factory=dict)
    quarantined: tuple[int, str] | None = None  # (receiver, message id)
    # "replay": the one candidate left, whose quarantine waits for receivers that never
    # journaled (``decide``'s ``unjournaled``).
    deferred: tuple[int, str] | None = None


def candidates(
    narrowing: Narrowing | None, entries: Mapping[int, list[str]]
) -> list[tuple[int, str]]:
    """The messages the batch's replays deliver now, in (receiver, row) order: what the latest
    step keeps of the receivers it covers, everything of the receivers it does not.

    A message is one candidate, at its first receiver, however many entries of the batch hold
    it: two adoptions of one orphan's entry (an orphan retired by a batch whose own run died,
    then adopted again by another checkpoint's batch, both later adopted by a third) put it in
    two receivers. Counted twice, one copy could be kept and the other carried out, and both
    delivered, or the poison message quarantined and its other copy carried on to fail again.
    The later copies are then neither kept nor carried: no replay delivers them."""
    out = []
    seen: set[str] = set()
    for receiver in sorted(entries):
        if narrowing is not None and receiver in narrowing.keep:
            kept = set(narrowing.keep[receiver])
            ids = [i for i in entries[receiver] if i in kept]
        else:
            ids = list(entries[receiver])
        for i in ids:
            if i not in seen:
                seen.add(i)
                out.append((receiver, i))
    return out


def decide(
    narrowing: Narrowing | None,
    by_step: Mapping[int, int],
    entries: Mapping[int, list[str]],
    threshold: int,
    suspect: frozenset[str] = frozenset(),
    unjournaled: bool = False,
) -> Decision:
    """What the next replay of a batch delivers. Pure: the same journal gives the same answer.

    ``threshold`` failures at step 0 (one for a suspect batch), or one at any later step, move
    to the next step: the first half of the candidates is kept and the rest carried out; a
    single candidate that failed is quarantined. A suspect batch's first step keeps exactly its
    ``suspect`` messages (the carry of the step whose narrowed replay succeeded, which holds
    the failing message if one message makes the batch fail), and carries the others out.

    ``unjournaled``: a receiver of the batch that receives (not adopted, a limit above 0) has
    no entry. It yields only after its entry is written, so no attempt so far handed the whole
    batch to the sink: each died before that receiver journaled, killed, or cancelled because
    a sibling failed. That the one candidate failed every time is then no evidence against it
    (the journal cannot tell a run killed from one whose task failed on the candidate), and
    the receiver receives fresh messages on every replay, so no replay isolates it either. Its
    quarantine waits for ``threshold`` more failures at the step, which give that receiver the
    chance to journal; a candidate that makes its own task fail before its siblings journal
    is quarantined after them (a bound, not a wedge).
    """
    step = narrowing.step if narrowing is not None else 0
    needed = threshold if step == 0 else 1
    if by_step.get(step, 0) < needed:
        return Decision("replay")
    current = candidates(narrowing, entries)
    if not current:
        return Decision("replay")
    keep: dict[int, list[str]] = {r: [] for r in entries}
    if len(current) == 1:
        if unjournaled and by_step.get(step, 0) < needed + threshold:
            return Decision("replay", deferred=current[0])
        return Decision("quarantine", keep=keep, quarantined=current[0])
    half = (len(current) + 1) // 2
    if step == 0 and suspect:
        ordered = [c for c in current if c[1] in suspect]
        if 0 < len(ordered) < len(current):
            current = ordered + [c for c in current if c[1] not in suspect]
            half = len(ordered)
    carried: dict[int, list[str]] = {}
    for receiver, message_id in current[:half]:
        keep[receiver].append(message_id)
    for receiver, message_id in current[half:]:
        carried.setdefault(receiver, []).append(message_id)
    return Decision("narrow", keep=keep, carried=carried)


class Quarantine:
    """The driver's side of ``poisonMessagePolicy=deadLetter``, called when a run replays a
    batch (``prepare_replay``) and when a new plan adopts carried entries (``inherit``)."""

    def __init__(
        self,
        journal: Journal,
        client: SqsClient,
        queue_url: str,
        dead_letter_url: str | Mapping[str, str],
        options: SqsOptions,
        *,
        reserve_batch: Callable[[], int],
        track: Callable[..., None],
        confirm: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self._clock = clock
        self.client = client
        self.queue_url = queue_url
        # One dead-letter queue, or one per source queue (several queues in one stream: each
        # queue's own RedrivePolicy target).
        self._dead_letters = {} if isinstance(dead_letter_url, str) else dict(dead_letter_url)
        self.dead_letter_url = (
            dead_letter_url if isinstance(dead_letter_url, str) else self._dead_letters[queue_url]
        )
        self.options = options
        # Numbers a new journal batch for carried messages (the driver's planned marker).
        self._reserve_batch = reserve_batch
        # Makes the driver count a carry batch as pending, so the next new plan adopts it.
        self._track = track
        # The journal's lease (``Lease.confirm``): raises once another query took it over.
        # Required: a quarantine step decided without it is the deposed driver's hole.
        self._confirm = confirm

    def prepare_replay(
        self, batch: int, receivers: list[int], receiving: Collection[int] | None = None
    ) -> Narrowing | None:
        """Finish what a crash left of the latest step, then take the next one if the batch's
        attempts call for it. Returns the step the replay runs under.

        ``receiving``: the receivers of the plan that receive messages when they have no entry
        (a limit above 0; None: every receiver not adopted)."""
        records = self.journal.poison
        names = records.names(batch)
        narrowing = records.latest_narrowing(batch, names)
        if narrowing is not None:
            # Only the lease's holder finishes a step: a new owner that adopted the batch
            # finishes it (before copying), and a carry batch created after that is nobody's.
            self._confirm()
            self.complete(batch, narrowing)
        attempts = records.attempts(batch, names)
        suspect = SUSPECT in names
        threshold = 1 if suspect else self.options.max_batch_attempts
        suspect_ids: frozenset[str] = frozenset()
        if suspect:
            suspect_ids = records.suspect_ids(batch)
        tables = {r: t for r in receivers if (t := self.journal.entries.read(batch, r)) is not None}
        attempts += [
            Attempt(r, first, 0)
            for r, t in tables.items()
            if r < ADOPTED_FROM and (first := first_attempt(t)) is not None
        ]
        by_step = attempts_by_step(attempts)
        entries = {r: t.column("messageId").to_pylist() for r, t in tables.items()}
        # Entries are read by key: a receiver whose entry is written meanwhile only delays a
        # quarantine.
        unjournaled = sorted(
            r
            for r in (receivers if receiving is None else receiving)
            if r < ADOPTED_FROM and r not in tables
        )
        decision = decide(
            narrowing, by_step, entries, threshold, suspect_ids, unjournaled=bool(unjournaled)
        )
        if decision.deferred is not None:
            at = narrowing.step if narrowing is not None else 0
            logger.warning(
                "batch %d: one message left (%s) after %d failed attempts at step %d, but "
                "receivers %s never journaled, so no attempt handed the whole batch to the "
                "sink: replaying; quarantined once %d attempts at this step failed",
                batch,
                decision.deferred[1],
                by_step.get(at, 0),
                at,
                unjournaled,
                (threshold if at == 0 else 1) + threshold,
            )
        if decision.kind == "replay":
            return narrowing
        # A driver paused while it read the entries may have lost the journal meanwhile: the
        # new owner adopts the batch and removes its entries, so what was read can be a part
        # of it (a lone message left is no evidence). Only the lease's holder decides a step.
        self._confirm()
        step = (narrowing.step if narrowing is not None else 0) + 1
        total = sum(by_step.values())
        carry_batch = self._reserve_batch() if decision.carried else None
        new = Narrowing(
            step=step,
            keep=decision.keep,
            carried=decision.carried,
            carry_batch=carry_batch,
            quarantined=(decision.quarantined[1],) if decision.quarantined else (),
            attempts=total,
        )
        new = records.write_narrowing(batch, new)
        # Again after the record: a pause before its create may have let another query take
        # the journal over, whose adoption of the batch may not have read it. The new owner
        # finishes a step it read; one it did not read is finished by nobody.
        self._confirm()
        kept = sum(len(ids) for ids in new.keep.values())
        if new.quarantined:
            logger.warning(
                "batch %d: %d failed attempts; quarantining message %s (step %d)",
                batch,
                total,
                new.quarantined[0],
                step,
            )
        else:
            logger.warning(
                "batch %d: %d failed attempts%s; narrowing it to %d messages (step %d), %d carried "
                "to journal batch %s for a later batch",
                batch,
                total,
                " (suspect: carried from a narrowed batch)" if suspect else "",
                kept,
                step,
                sum(len(ids) for ids in new.carried.values()),
                new.carry_batch,
            )
        self.complete(batch, new, tables)
        return new

    def complete(
        self, batch: int, narrowing: Narrowing, tables: Mapping[int, pa.Table] | None = None
    ) -> None:
        """Idempotent: create the carry batch's files and finish the quarantine of a step."""
        if narrowing.carry_batch is not None:
            self._carry(batch, narrowing, tables or {})
        for message_id in narrowing.quarantined:
            self._quarantine(batch, narrowing, message_id, tables or {})

    def unadopted_carries(self, orphans: list[int]) -> dict[int, tuple[int, ...]]:
        """The carry batch of each narrowed orphan's latest step that no plan adopted yet, with
        the receivers it holds, from the step's record (read by key), whether or not the carry
        batch's files exist yet (the run that narrowed the orphan may have died first). Earlier
        steps' carry batches exist whole: a step is decided only once the one before it was
        finished. Under another policy a narrowed orphan is refused when adopted."""
        carries: dict[int, tuple[int, ...]] = {}
        for orphan in orphans:
            step = self.journal.poison.latest_narrowing(orphan)
            if step is None or step.carry_batch is None or self._adopted(orphan, step):
                continue
            carries[step.carry_batch] = tuple(sorted(step.carried))
        return carries

    def _adopted(self, batch: int, narrowing: Narrowing) -> bool:
        """True once a plan adopted the carry batch of ``batch``'s step ``narrowing``."""
        return self.journal.poison.carry_adopted(batch, narrowing.step)

    def _carry(self, batch: int, narrowing: Narrowing, tables: Mapping[int, pa.Table]) -> None:
        carry = narrowing.carry_batch
        assert carry is not None
        if self._adopted(batch, narrowing):
            # A later batch adopted the carry batch and removed it: creating it again would
            # deliver its messages a second time.
            return
        # The marker first: it is what makes the adopting batch a suspect one.
        self.journal.poison.write_carry(carry, batch, narrowing.step, sorted(narrowing.carried))
        for receiver, ids in sorted(narrowing.carried.items()):
            table = tables.get(receiver)
            if table is None:
                table = self.journal.entries.read(batch, receiver)
            if table is None:
                # Only possible once the batch was acknowledged, after its carry was adopted.
                continue
            carried = keep_only(table, set(ids))
            metadata = {
                k: v for k, v in (carried.schema.metadata or {}).items() if k != FIRST_ATTEMPT
            }
            self.journal.entries.write(carry, receiver, carried.replace_schema_metadata(metadata))
        self._track(carry, receivers=tuple(sorted(narrowing.carried)))

    def _quarantine(
        self, batch: int, narrowing: Narrowing, message_id: str, tables: Mapping[int, pa.Table]
    ) -> None:
        records = self.journal.poison
        if records.quarantine_sent(batch, message_id):
            return
        row = self._row(batch, message_id, tables)
        if row is None:
            logger.warning(
                "batch %d: message %s to quarantine is no longer journaled", batch, message_id
            )
            return
        # The message's own queue (several queues in one stream), not the options' first.
        source = row.get("queueUrl") or self.queue_url
        dead_letter = self._dead_letters.get(source, self.dead_letter_url)
        info = {
            "sourceQueue": source,
            "messageId": message_id,
            "approximateReceiveCount": row.get("approximateReceiveCount"),
            "batch": batch,
            "batchAttempts": narrowing.attempts,
            "journal": self.options.journal_location,
            "quarantineId": quarantine_id(self.options.journal_location, source, message_id),
        }
        # The decision before the send: a crash after it is finished by the next plan.
        records.write_quarantine(
            batch, message_id, {**info, "deadLetterQueue": dead_letter, "decidedAt": time.time()}
        )
        request = dead_letter_request(dead_letter, row, info)
        try:
            self.client.send_message(**request)
        except Exception as exc:
            from ..sqs.client import classify

            err = classify(exc, "SendMessage", dead_letter)
            raise type(err)(
                f"{err} (quarantining message {message_id} of batch {batch}). Fix: allow "
                f"sqs:SendMessage on the dead-letter queue {dead_letter}, or set "
                "'deadLetterQueueUrl' to a queue this query may send to; the next run retries",
                retriable=err.retriable,
            ) from None
        records.mark_quarantine_sent(batch, message_id)
        logger.warning(
            "batch %d: message %s sent to the dead-letter queue %s",
            batch,
            message_id,
            dead_letter,
        )
        # Prompt; the batch's acknowledgement deletes it again (and records an uncertain
        # delete for redelivery dedupe), so a failure here loses nothing. Its window segment
        # comes first, like every delete's: a copy SQS hands out afterwards must not reach the
        # sink (the message is in the dead-letter queue).
        deletion = delete_messages(
            self.journal,
            OneByOne(self.client, source),
            [[Entry(message_id, row[RECEIPT_HANDLE])]],
            window=[(message_id, None)],
            queue_url=source,
            duplicate_window=self.options.duplicate_window,
            batch=batch,
            who=DRIVER,
            catch=Exception,
            clock=self._clock,
        )
        if deletion.error is not None:
            logger.warning(
                "batch %d: could not delete quarantined message %s now: %s",
                batch,
                message_id,
                deletion.error,
            )

    def _row(
        self, batch: int, message_id: str, tables: Mapping[int, pa.Table]
    ) -> dict[str, Any] | None:
        sources = dict(tables)
        if not sources:
            for receiver in self.journal.batches.live_receivers(batch) or ():
                table = self.journal.entries.read(batch, receiver)
                if table is not None:
                    sources[receiver] = table
        for table in sources.values():
            found = keep_only(table, {message_id})
            if found.num_rows:
                return found.to_pylist()[0]
        return None

    def adopted(self, carry: int) -> None:
        """``carry``, a batch of carried messages, was adopted by a later batch (every copy
        exists) and is about to be removed: its narrowed batch records it, so that finishing
        that batch's step again never creates the carry batch anew."""
        doc = self.journal.poison.read_carry(carry)
        if doc is None:
            return
        source, step = int(doc["from"]), int(doc["step"])
        if self.journal.plans.read(source) is not None:
            self.journal.poison.mark_carry_adopted(source, step)

    def inherit(self, batch: int, orphans: list[int]) -> None:
        """A new plan adopts ``orphans``: if any is a carry batch, the plan's batch is suspect
        (narrowed after one failure, first to the messages of the newest carry batch: the
        others were carried out of replays that failed without them). Called before the
        orphans are removed, so a crash in between is finished by the next call."""
        carries = carry_batches(self.journal, orphans)
        if not carries:
            return
        newest = max(carries)
        ids = [
            i
            for r in self.journal.batches.live_receivers(newest) or ()
            if (t := self.journal.entries.read(newest, r)) is not None
            for i in t.column("messageId").to_pylist()
        ]
        self.journal.poison.write_suspect(batch, newest, ids)


def narrowed_without_policy(options: SqsOptions, batch: int) -> InvalidOptionError:
    """The error for a journal holding a narrowed batch under another poison policy."""
    return InvalidOptionError.for_option(
        "poisonMessagePolicy",
        options.poison_message_policy,
        f"batch {batch} in journalLocation {options.journal_location} was narrowed under "
        "poisonMessagePolicy=deadLetter and is not acknowledged yet; only that policy delivers "
        "its carried messages and finishes a quarantine exactly once",
        "restart with poisonMessagePolicy=deadLetter until `spark-sqs inspect` shows no "
        "narrowed batch, then change the policy",
    )


def carry_batches(journal: Journal, batches: list[int]) -> list[int]:
    """Those of ``batches`` that hold messages carried out of a narrowed batch."""
    return [b for b in batches if journal.poison.is_carry(b)]


def quarantine_id(journal_location: str, queue_url: str, message_id: str) -> str:
    """Deterministic: the same message quarantined by any run gets the same id (the FIFO
    dead-letter queue's MessageDeduplicationId)."""
    return hashlib.sha256("\0".join((journal_location, queue_url, message_id)).encode()).hexdigest()


def dead_letter_request(
    url: str, row: Mapping[str, Any], info: Mapping[str, Any]
) -> dict[str, Any]:
    """SendMessage for a quarantined message: its body and attributes, plus one attribute
    saying where it came from; a message with 10 attributes already gets its body wrapped in a
    JSON envelope instead (SQS allows at most 10)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in row.get("messageAttributes") or []:
        entry: dict[str, Any] = {"DataType": value["dataType"]}
        if value.get("binaryValue") is not None:
            entry["BinaryValue"] = value["binaryValue"]
        else:
            entry["StringValue"] = value.get("stringValue") or ""
        attributes[name] = entry
    body = row.get("body") or ""
    described = json.dumps(dict(info), sort_keys=True)
    if len(attributes) < MAX_ATTRIBUTES:
        attributes[QUARANTINE_ATTRIBUTE] = {"DataType": "String", "StringValue": described}
    else:
        body = json.dumps({QUARANTINE_ATTRIBUTE: dict(info), "body": body}, sort_keys=True)
    request: dict[str, Any] = {"QueueUrl": url, "MessageBody": body}
    if attributes:
        request["MessageAttributes"] = attributes
    if url.endswith(".fifo"):
        request["MessageGroupId"] = row.get("messageGroupId") or "spark-sqs-quarantine"
        request["MessageDeduplicationId"] = str(info["quarantineId"])
    return request


def resolve_dead_letter_queue(client: SqsClient, queue_url: str, options: SqsOptions) -> str:
    """``deadLetterQueueUrl``, else the queue's RedrivePolicy target; an error if neither."""
    if options.dead_letter_queue_url:
        return options.dead_letter_queue_url
    from ..sqs.client import queue_attributes

    attrs = queue_attributes(client, queue_url, ["RedrivePolicy"])
    policy = attrs.get("RedrivePolicy")
    arn = json.loads(policy).get("deadLetterTargetArn") if policy else None
    if not arn:
        raise InvalidOptionError.for_option(
            "poisonMessagePolicy",
            DEAD_LETTER,
            f"the queue {queue_url} has no RedrivePolicy, so there is no dead-letter queue to "
            "send a poison message to",
            "set 'deadLetterQueueUrl', or give the queue a redrive policy, or use "
            "poisonMessagePolicy=fail",
        )
    parts = arn.split(":")
    name, account = parts[-1], parts[-2]
    try:
        return client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    except Exception:
        # Same endpoint, the target's account and name (SQS URLs are <endpoint>/<account>/<name>).
        return f"{queue_url.rstrip('/').rsplit('/', 2)[0]}/{account}/{name}"


# -- spark-sqs release --


def release_batch(
    journal: Journal, client: SqsClient, queue_url: str, batch: int
) -> dict[str, Any]:
    """Give a stuck batch's messages back to SQS (``spark-sqs release``; the query must be
    stopped: the caller holds the journal's lease).

    Order, each step idempotent so that running the command again finishes a crashed run:
    1. ``_released.json`` is created with the batch's plan with every receiver's limit set to 0;
    2. the batch's carry batches, entries, parts, attempt and narrowing records are removed;
    3. the plan is replaced by that zero plan (if a crash leaves no plan, the driver writes the
       marker's plan: ``released_plan``), so Spark's replay of the batch receives nothing new
       and delivers an empty batch (its receivers still delete the previous batch);
    4. the messages are made visible (a crash before that only leaves them invisible until
       their visibility timeout: nothing is lost).
    """
    from ..journal import BatchPlan, ReceiverPlan
    from ..sqs.batching import BatchCaller, Entry

    names = journal.poison.names(batch)
    handles: dict[str, tuple[str, str | None]] = {}
    tables = []
    for receiver in journal.batches.live_receivers(batch) or ():
        table = journal.entries.read(batch, receiver)
        # A receiver that died mid-loop under deleteAfterJournal has parts and no entry.
        tables += (
            [table]
            if table is not None
            else [t for _, t in journal.entries.read_parts(batch, receiver)]
        )
    for table in tables:
        ids = table.column("messageId").to_pylist()
        # Each handle goes back to its own queue (several queues in one stream).
        queues = (
            table.column("queueUrl").to_pylist()
            if "queueUrl" in table.column_names
            else [None] * len(ids)
        )
        handles.update(
            zip(
                ids,
                zip(table.column(RECEIPT_HANDLE).to_pylist(), queues, strict=True),
                strict=True,
            )
        )
    carries = sorted(
        {s.carry_batch for s in journal.poison.steps(batch) if s.carry_batch is not None}
    )
    plan = journal.plans.read(batch)
    zero = None
    if plan is not None:
        zero = BatchPlan(
            plan.batch,
            tuple(ReceiverPlan(r.receiver, 0) for r in plan.receivers),
            drops=plan.drops,
            drop_count=plan.drop_count,
            acks=plan.acks,
        )
    doc = {"releasedAt": time.time(), "messages": len(handles)}
    if zero is not None:
        doc["plan"] = json.loads(zero.to_json())
    doc = journal.poison.write_released(batch, doc)
    for carry in carries:
        journal.batches.remove(carry)
    journal.poison.remove_released_files(batch, names)
    if "plan" in doc:
        stored = journal.plans.read(batch)
        if stored is None or any(r.limit or r.adopt_from for r in stored.receivers):
            journal.plans.replace(batch, json.dumps(doc["plan"]).encode())
    result = BatchCaller(client, queue_url).change_visibility(
        [Entry(i, h, q) for i, (h, q) in sorted(handles.items())], 0
    )
    return {
        "batch": batch,
        "messages": len(handles),
        "madeVisible": len(result.succeeded),
        "failed": len(result.permanent) + len(result.transient),
        "carryBatchesRemoved": carries,
    }


def released_plan(journal: Journal, batch: int) -> BatchPlan | None:
    """The zero plan of a released batch whose plan a crashed release left missing, written
    back (None if the batch was not released)."""
    plan = journal.poison.released_plan(batch)
    return None if plan is None else journal.plans.write(plan)


def batch_report(journal: Journal, batch: int) -> dict[str, Any]:
    """What ``spark-sqs inspect`` shows of a batch's attempts and narrowing."""
    names = journal.poison.names(batch)
    attempts = journal.poison.attempts(batch, names)
    for receiver in journal.batches.live_receivers(batch) or ():
        table = journal.entries.read(batch, receiver) if receiver < ADOPTED_FROM else None
        first = first_attempt(table) if table is not None else None
        if first is not None:
            attempts.append(Attempt(receiver, first, 0))
    steps = journal.poison.steps(batch)
    return {
        "attempts": len({a.key for a in attempts}),
        "attemptsByStep": {str(k): v for k, v in sorted(attempts_by_step(attempts).items())},
        "narrowingStep": max((s.step for s in steps), default=0),
        "delivering": sum(len(ids) for ids in steps[-1].keep.values()) if steps else None,
        "carryBatches": [s.carry_batch for s in steps if s.carry_batch is not None],
        "suspect": SUSPECT in names,
        "carriedFrom": _carried_from(journal, batch, names),
        "released": RELEASED in names,
    }


def _carried_from(journal: Journal, batch: int, names: list[str]) -> int | None:
    if CARRY not in names:
        return None
    doc = journal.poison.read_carry(batch)
    return None if doc is None else int(doc["from"])
