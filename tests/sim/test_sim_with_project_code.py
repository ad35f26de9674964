"""The simulated SQS drives the project's own receive loop and batch acknowledgement unchanged,
as the simulation will (a check that the sim quacks like the boto3 client where it matters)."""

from __future__ import annotations

from sim import Fault, SimSqs
from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.executor.receiving import receive_messages
from spark_sqs.options import SqsOptions
from spark_sqs.sqs.batching import BatchCaller, Entry


def fifo_queue(sim: SimSqs) -> str:
    return sim.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]


def partition(url: str, max_messages: int) -> ReceiverPartition:
    options = SqsOptions.parse({"queueUrl": url, "journalLocation": "/tmp/unused"}, env={})
    return ReceiverPartition(
        batch=1, receiver=0, max_messages=max_messages, queue_url=url, options=options
    )


def test_the_receive_loop_recovers_a_lost_fifo_receive_through_its_attempt_id() -> None:
    sim = SimSqs(seed=4)
    url = fifo_queue(sim)
    for i in range(25):
        sim.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId=f"g{i % 3}")
    sim.inject(Fault("ReceiveMessage", "lost_response"))
    client = sim.client(total_max_attempts=3)
    messages, stats = receive_messages(client, partition(url, 25), clock=sim.clock.monotonic)
    # The first receive takes group g0 and the head of g1, which locks g1 for this batch; the
    # next takes g2. The retry after the lost response got the same ten back, not fresh ones:
    # nothing was received twice, and the lost receive's messages are not stranded in flight.
    g0, g2 = [f"m{i}" for i in range(0, 25, 3)], [f"m{i}" for i in range(2, 25, 3)]
    assert sorted(m["Body"] for m in messages) == sorted([*g0, "m1", *g2])
    assert set(sim.receive_counts(url).values()) == {0, 1}
    assert [d.kind for d in sim.deliveries(url)].count("replay") == 10
    assert len(sim.in_flight(url)) == stats.received == 18
    assert stats.stopped_by == "empty receive"


def test_batch_acknowledgement_sorts_stale_fifo_handles_out_and_survives_a_lost_answer() -> None:
    sim = SimSqs(seed=5)
    url = fifo_queue(sim)
    for i in range(12):
        sim.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId=f"g{i}")
    got = sim.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1)
    got = got["Messages"] + sim.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    stale = got[0]
    sim.clock.advance(1)
    # Ten of the first receive's handles expired; take a fresh receive of those.
    fresh = sim.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in fresh + got[10:]]
    entries.append(Entry(stale["MessageId"] + "-old", stale["ReceiptHandle"]))
    sim.inject(Fault("DeleteMessageBatch", "lost_response"))
    caller = BatchCaller(sim.client(), url, parallelism=1, sleep=sim.clock.sleep)
    result = caller.delete(entries)
    assert sorted(result.succeeded) == sorted(m["MessageId"] for m in fresh + got[10:])
    assert result.permanent == {stale["MessageId"] + "-old": "InvalidParameterValue"}
    assert sim.live(url) == []
