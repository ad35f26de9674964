"""deleteAfterJournal's parts and their seal (executor/parts.py), on a local journal and on
moto's S3 server."""

from __future__ import annotations

import pytest

from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.errors import JournalError
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import BatchPlan, Journal, ReceiverPlan
from spark_sqs.journal.stores import open_store
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs, HookedStore
from tests.helpers import collect

PART = "batches/000000000001/00000.part-00000.arrow"
# What a receiver writes: its batch's parts, seal and entry, and its window segments.
WRITTEN_UNDER = ("batches", "window")


def test_an_attempt_whose_part_is_gone_at_its_seal_writes_nothing_and_the_journal_put_back_keeps_it(
    journal_location: str,
) -> None:
    """The journal is deleted after an attempt journaled a part and deleted its messages from
    SQS, and before it sealed (a straggler held that long, docs/design.md's crash table). A
    seal below the missing part would make an entry without those messages, and a journal put
    back later keeps what tasks wrote meanwhile: the messages, deleted from SQS, would be in no
    entry. The attempt writes nothing; the journal put back holds the part, and the retry
    seals it and delivers its messages."""
    opts = make_options(journal_location, region="us-east-1", deleteAfterJournal="true")
    inner = open_store(journal_location, opts.connection)
    saved: dict[str, bytes] = {}
    sqs = FakeSqs(script=[[sqs_message(n) for n in range(3)], []])

    def delete_the_journal(method: str, key: str) -> None:
        # Once the part's messages are deleted, and before the seal reads the part.
        if method == "read" and key == PART and sqs.deleted() and not saved:
            for k in [k for prefix in WRITTEN_UNDER for k in inner.list(prefix)]:
                data = inner.read(k)
                assert data is not None
                saved[k] = data
                inner.delete(k)

    store = HookedStore(inner, before=delete_the_journal)
    journal = Journal(journal_location, opts, store=store)
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 100),), delete_after_journal=True))
    part = ReceiverPartition(1, 0, 100, QUEUE_URL, opts)

    out = collect(read_partition(part, client_factory=lambda: sqs, journal=journal))

    assert out.num_rows == 0
    assert PART in saved and len(sqs.deleted()) == 3
    # No seal, no entry: nothing written to the emptied journal.
    assert [k for prefix in WRITTEN_UNDER for k in inner.list(prefix)] == []

    for key, data in saved.items():
        assert inner.create(key, data)
    retry = collect(
        read_partition(
            part,
            client_factory=lambda: FakeSqs(script=[[]]),
            journal=Journal(journal_location, opts),
        )
    )
    assert sorted(retry.column("messageId").to_pylist()) == sorted(
        sqs_message(n)["MessageId"] for n in range(3)
    )


def test_an_attempt_whose_part_alone_is_gone_at_its_seal_fails_naming_the_journal(
    journal_location: str,
) -> None:
    """Its batch still planned but its own part gone (the journal moved or put back from an
    older copy under it): nothing is sealed, and the task fails with a JournalError that names
    journalLocation, rather than delivering an entry without the part's deleted messages."""
    opts = make_options(journal_location, region="us-east-1", deleteAfterJournal="true")
    inner = open_store(journal_location, opts.connection)
    sqs = FakeSqs(script=[[sqs_message(n) for n in range(3)], []])
    gone: list[str] = []

    def delete_the_part(method: str, key: str) -> None:
        if method == "read" and key == PART and sqs.deleted() and not gone:
            inner.delete(PART)
            gone.append(PART)

    journal = Journal(journal_location, opts, store=HookedStore(inner, before=delete_the_part))
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 100),), delete_after_journal=True))
    part = ReceiverPartition(1, 0, 100, QUEUE_URL, opts)

    with pytest.raises(JournalError, match="journalLocation") as raised:
        collect(read_partition(part, client_factory=lambda: sqs, journal=journal))

    assert "nothing was sealed" in str(raised.value) and gone == [PART]
    assert [k for k in inner.list("batches") if ".part-" in k or k.endswith("00000.arrow")] == []
