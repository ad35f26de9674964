"""What the journal costs per micro-batch: S3 requests by kind, counted on moto's S3 server
while the real driver (``Coordinator``) and receivers (``read_partition``) run steady-state
batches where nothing goes wrong. Start-up (the probe, the lease, the first batches) and
work on timers (the heartbeat, lease renewals) are not counted: they do not grow per batch. A
cost of the driver, the receivers and the journal together, so no single module's test file is
its home."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import Journal
from spark_sqs.journal.stores import S3Store
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs

# Each S3 operation as the kind of request it is billed as.
KINDS = {
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "PutObject": "PUT",
    "CreateMultipartUpload": "PUT",
    "UploadPart": "PUT",
    "CompleteMultipartUpload": "PUT",
    "CopyObject": "PUT",
    "ListObjectsV2": "LIST",
    "ListObjects": "LIST",
    "DeleteObjects": "POST",
    "DeleteObject": "DELETE",
}
MESSAGES_PER_BATCH = 5
WARM_UP = 3  # batches before counting: the first plans, acknowledgements and markers


class CountingS3:
    """Makes S3 clients on moto's server that count every request they send, by kind and by
    the kind of key (its first path segment under the journal's prefix)."""

    def __init__(self, endpoint: str, prefix: str) -> None:
        self.endpoint = endpoint
        self.prefix = prefix
        self.requests: Counter[str] = Counter()
        self.keys: Counter[tuple[str, str]] = Counter()

    def __call__(self) -> Any:
        import boto3

        client = boto3.client("s3", region_name="us-east-1", endpoint_url=self.endpoint)
        client.meta.events.register("before-call.s3", self._count)
        return client

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        kind = KINDS.get(model.name, model.name)
        self.requests[kind] += 1
        url = params.get("url_path", "")
        key = url.split(f"/{self.prefix}/", 1)[-1] if f"/{self.prefix}/" in url else ""
        if model.name in ("ListObjectsV2", "ListObjects"):
            key = str(params.get("query_string", {}).get("prefix", "")).split("/", 1)[-1]
        self.keys[(kind, key.split("/", 1)[0])] += 1

    def clear(self) -> None:
        self.requests.clear()
        self.keys.clear()


def steady_batch_requests(
    moto_endpoint: str, s3: Any, num_partitions: int, per_receiver: int
) -> tuple[Counter[str], Counter[tuple[str, str]], int]:
    """The S3 requests of one steady-state batch, from the driver's latestOffset through its
    receivers' reads, and the number of receivers it planned."""
    try:
        s3.create_bucket(Bucket="journals")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    prefix = uuid.uuid4().hex
    location = f"s3://journals/{prefix}"
    options = make_options(location, numPartitions=str(num_partitions), waitTimeSeconds="0")
    counting = CountingS3(moto_endpoint, prefix)

    def journal() -> Journal:
        store = S3Store("journals", prefix, client_factory=counting)
        return Journal(location, options, store=store)

    sqs = FakeSqs()
    driver = Coordinator(
        options,
        sqs,
        QUEUE_URL,
        journal(),
        run_heartbeat=False,
        messages_per_receiver=per_receiver,
    )
    receivers_journal = journal()
    sent = 0
    receivers = 0
    try:
        for batch in range(WARM_UP + 1):
            if batch == WARM_UP:
                counting.clear()
            sqs.queue += [sqs_message(n) for n in range(sent, sent + MESSAGES_PER_BATCH)]
            sent += MESSAGES_PER_BATCH
            end = driver.latest_offset({"batch": batch})
            assert end == {"batch": batch + 1}
            parts = driver.plan({"batch": batch}, end)
            receivers = len(parts)
            rows = 0
            for part in parts:
                outs = read_partition(part, client_factory=lambda: sqs, journal=receivers_journal)
                rows += sum(pa.Table.from_batches([out]).num_rows for out in outs)
            assert rows == MESSAGES_PER_BATCH
    finally:
        driver.close()
    return Counter(counting.requests), Counter(counting.keys), receivers


# Requests of one steady-state batch (driver and receivers) by kind, for 1, 2 and 4 receivers:
# upper bounds, so that a change that adds requests fails here. What they are, per key kind
# (1 receiver). The driver settles the committed batch: GET its receiver's acknowledgement
# report; PUT the acked marker, which holds the batch's counters (no metrics/ object); before
# it removes the settled batch's plan it checks the batch's window seal (GET); DELETE the
# batch's plan, carry and release records, then its receivers' entries and extension markers,
# its retirement record and the reports read, one free DELETE each (no billed DeleteObjects
# POST: up to 16 keys, about 5 receivers, go as single deletes; more as one POST). It marks and
# plans the next: PUT the planned marker; GET plan and release record, PUT plan. From batch 17
# on it also DELETEs the planned marker 16 before, from batch 101 on the acked marker 100
# before (the newest 16 and 100 are kept): the counted batch is below both, hence two DELETEs
# fewer than the bound. Each receiver reads its entry, its retired record and plan (GET each:
# the plan read is the first liveness check), then both again after journaling (the straggler
# check), reads the entry it acknowledges (GET), writes its window segment and acknowledgement
# report (PUT), writes its entry (PUT). The receiver that acknowledges the previous batch seals
# that batch's window segments with its own ids (GET the previous plan, each writer's first
# number before and after: the seal is its segment, no extra PUT). A receiver that receives
# looks the window up by key (GET the previous batch's seal, each writer's next number of its
# own batch: absent, 404). No LIST: old drop sets and reports, files of finished batches that
# only a mishap writes, window segments below the driver's range and an earlier version's
# metrics/ files are swept by LIST at start, every 100th batch and when idle, not in the
# counted one.
#
# Per receiver R, when every receiver receives and acknowledges: +3 PUT (entry, report, window
# segment; the sealer's segment is its seal), 0 LIST, 0 POST: PUT+LIST+POST = 3 + 3R (6 at
# R=1; docs/design.md, "The duplicate window", states it). In this test only receiver 0
# receives: the others write an entry and a report (+2 PUT each: 4 + 2R). GET = 8 + 10R: per
# receiver its five reads of entry, retired record and plan and the entry it acknowledges, its
# report read by the driver, the sealer's probes of its segments before and after sealing, one
# 404 in the receiving receiver's lookup. DELETE = 4 + 3R (entry, extension marker, report).
BOUNDS = {
    1: {"GET": 18, "PUT": 6, "LIST": 0, "POST": 0, "DELETE": 9},
    2: {"GET": 28, "PUT": 8, "LIST": 0, "POST": 0, "DELETE": 12},
    4: {"GET": 48, "PUT": 12, "LIST": 0, "POST": 0, "DELETE": 18},
}


@pytest.mark.parametrize(("num_partitions", "per_receiver"), [(4, 100), (2, 1), (4, 1)])
def test_a_steady_state_batch_costs_a_bounded_number_of_requests(
    moto_endpoint: str, s3: Any, num_partitions: int, per_receiver: int
) -> None:
    """A trickle on numPartitions=4 plans one receiver; a receiver per message plans 2 and 4.
    Requests grow per receiver by its own reads and writes only (GET, PUT). A steady batch
    lists nothing, posts no multi-object delete, and one receiver's batch costs at most 8
    PUT+LIST+POST (6 now)."""
    requests, keys, receivers = steady_batch_requests(
        moto_endpoint, s3, num_partitions, per_receiver
    )
    assert receivers == (1 if per_receiver == 100 else num_partitions)
    bound = BOUNDS[receivers]
    assert set(requests) <= set(bound), (requests, sorted(keys.items()))
    over = {k: (n, bound[k]) for k, n in requests.items() if n > bound[k]}
    assert not over, (over, sorted(keys.items()))
    # No HEAD: every existence check is a GET that reads the object too.
    assert requests["HEAD"] == 0
    assert requests["LIST"] == 0, sorted(keys.items())
    # No billed multi-object delete: a settled batch's files go by free single deletes.
    assert requests["POST"] == 0, sorted(keys.items())
    # The batch's counters ride in its acknowledged marker: two state PUTs (acked, planned),
    # no metrics/ object.
    assert keys[("PUT", "state")] == 2 and not any(k == "metrics" for _, k in keys), keys
    if receivers == 1:
        assert requests["PUT"] + requests["LIST"] + requests["POST"] <= 8
