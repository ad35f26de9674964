"""Several queues in one stream. Runs on: driver.

``queueUrl`` (or ``queueName``) may name a comma-separated list of queues, checked with the
other connection options (``spark_sqs.connection``: no empty entries or duplicates, one kind,
one region). Everything per-queue that the rest of the source needs lives here, as small pure
functions:

- ``resolve_queue_urls``: every queue of the connection as a URL.
- ``receivers_per_queue`` / ``assign_queues``: a batch's receivers spread over the queues in
  proportion to their backlog; a queue with visible messages keeps at least one receiver while
  there are as many receivers as such queues.
- ``poll_backlog``: every queue's counts, per queue and summed; ``BacklogPoller`` keeps the last
  poll for the coordinator and polls again only when due.

Where a receipt handle goes back to: each journaled row names its queue (the ``queueUrl``
column), and every delete and visibility change is sent to the queue of its row
(``spark_sqs.sqs.batching.entries_of``), never to a queue of the current options. A batch's plan
records each receiver's queue, so a replay receives from the queues of its first attempt even
after a queue was removed from the options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import SqsSourceError
from ..sqs.client import SqsClient, classify, queue_attributes

if TYPE_CHECKING:
    from ..connection import Connection
    from ..journal import BatchPlan

logger = logging.getLogger(__name__)

BACKLOG_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


def receivers_per_queue(
    receivers: int, backlog: Mapping[str, int], *, rotate: int = 0
) -> dict[str, int]:
    """How many of ``receivers`` receivers each queue gets, in proportion to its backlog.

    A queue with no visible messages gets none, unless no queue has any (a batch started to
    deliver journaled entries, or on a stale count): then the receivers are spread evenly, so
    that the batch still has receivers. A queue with a backlog gets at least one while there
    are as many receivers as such queues; with fewer, the largest backlogs get one each (ties
    broken by ``rotate``, e.g. the batch number, so no queue waits forever). Shares go by
    largest remainder. Queues keep the order of ``backlog``; the result sums to ``receivers``.
    """
    queues = list(backlog)
    if receivers <= 0 or not queues:
        return {q: 0 for q in queues}
    busy = [q for q in queues if backlog[q] > 0]
    if not busy:
        # Evenly, starting at a rotating queue.
        out = {q: receivers // len(queues) for q in queues}
        for i in range(receivers % len(queues)):
            out[queues[(rotate + i) % len(queues)]] += 1
        return out
    out = {q: 0 for q in queues}
    if receivers <= len(busy):
        order = sorted(
            range(len(busy)),
            key=lambda i: (-backlog[busy[i]], (i - rotate) % len(busy)),
        )
        for i in order[:receivers]:
            out[busy[i]] = 1
        return out
    # Largest remainder over the backlogs, then a receiver for each busy queue left without
    # one, taken from the queue with the most.
    total = sum(backlog[q] for q in busy)
    shares = {q: receivers * backlog[q] / total for q in busy}
    for q in busy:
        out[q] = int(shares[q])
    by_remainder = sorted(
        range(len(busy)),
        key=lambda i: (-(shares[busy[i]] - int(shares[busy[i]])), (i - rotate) % len(busy)),
    )
    for i in by_remainder[: receivers - sum(out.values())]:
        out[busy[i]] += 1
    for q in busy:
        if out[q] == 0:
            # Of the queues with the most, the smallest backlog gives: order is kept.
            richest = max(busy, key=lambda b: (out[b], -backlog[b]))
            out[richest] -= 1
            out[q] = 1
    return out


def assign_queues(
    receivers: Sequence[int], backlog: Mapping[str, int], *, rotate: int = 0
) -> dict[int, str]:
    """Receiver number -> queue URL, the counts of ``receivers_per_queue`` in receiver order."""
    counts = receivers_per_queue(len(receivers), backlog, rotate=rotate)
    queue_order = [q for q, n in counts.items() for _ in range(n)]
    return dict(zip(sorted(receivers), queue_order, strict=True))


def poll_backlog(client: SqsClient, queue_urls: Sequence[str]) -> dict[str, dict[str, int]]:
    """Each queue's ``BACKLOG_ATTRIBUTES``. A queue whose poll fails transiently is left out
    (logged); a failure a person must fix raises."""
    out: dict[str, dict[str, int]] = {}
    for url in queue_urls:
        try:
            attrs = queue_attributes(client, url, BACKLOG_ATTRIBUTES)
        except SqsSourceError as exc:
            if not exc.retriable:
                raise
            logger.warning("checking queue %s for messages failed, will retry: %s", url, exc)
            continue
        out[url] = {k: int(v) for k, v in attrs.items()}
    return out


def summed(per_queue: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The counts of every queue added up."""
    total: dict[str, int] = {}
    for counts in per_queue.values():
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    return total


def resolve_queue_urls(client: SqsClient, connection: Connection) -> list[str]:
    """Every queue of the connection as a URL (``GetQueueUrl`` for names)."""
    if connection.queue_urls:
        return list(connection.queue_urls)
    if connection.queue_url:
        return [connection.queue_url]
    kwargs: dict[str, Any] = {}
    if connection.queue_owner_account_id:
        kwargs["QueueOwnerAWSAccountId"] = connection.queue_owner_account_id
    urls = []
    for name in connection.queue_names or (connection.queue_name,):
        try:
            urls.append(client.get_queue_url(QueueName=name, **kwargs)["QueueUrl"])
        except Exception as exc:
            raise classify(exc, "GetQueueUrl", repr(name)) from None
    return urls


def with_queues(plan: BatchPlan, backlog: Mapping[str, int], *, rotate: int = 0) -> BatchPlan:
    """``plan`` (a new ``BatchPlan``) with each receiver's queue recorded: the receivers that
    get a share of new messages are spread by ``assign_queues``; the others (replaying their
    own entry, or delivering an adopted one) receive nothing and name the first queue."""
    from dataclasses import replace

    if not backlog:
        return plan
    sharing = [r.receiver for r in plan.receivers if r.limit > 0 and r.adopt_from is None]
    queue_of = assign_queues(sharing, backlog, rotate=rotate)
    first = next(iter(backlog))
    receivers = tuple(replace(r, queue=queue_of.get(r.receiver, first)) for r in plan.receivers)
    spread = receivers_per_queue(len(sharing), backlog, rotate=rotate)
    if len(backlog) > 1:
        logger.info(
            "batch %d: receivers per queue %s (visible messages %s)",
            plan.batch,
            {q: n for q, n in spread.items()},
            dict(backlog),
        )
    return replace(plan, receivers=receivers)


class BacklogPoller:
    """The queues' backlog as last polled, polled again at most every ``interval`` seconds of
    ``clock`` unless a poll is asked for (after each batch, at AvailableNow's start)."""

    def __init__(
        self,
        client: SqsClient,
        queue_urls: Sequence[str],
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self._client = client
        self._queue_urls = list(queue_urls)
        self._interval = interval
        self._clock = clock
        self._last = float("-inf")
        self._due = True
        self.per_queue: dict[str, dict[str, int]] = {}
        self.total: dict[str, int] = {}

    @property
    def visible(self) -> int:
        """Visible messages of every queue, as last polled."""
        return self.total.get("ApproximateNumberOfMessages", 0)

    def poll_next_time(self) -> None:
        self._due = True

    def has_messages(self) -> bool:
        """Whether the queues have visible messages, polling them if due. A poll that failed
        transiently for every queue answers no (the next call polls again)."""
        now = self._clock()
        if self._due or now - self._last >= self._interval:
            self._last = now
            self._due = False
            # One that failed transiently is left out of this poll.
            polled = poll_backlog(self._client, self._queue_urls)
            if not polled:
                return False
            self.per_queue = polled
            self.total = summed(polled)
        return self.visible > 0

    def polled_visible(self) -> dict[str, int]:
        """Visible messages of each queue whose last poll answered (none before any poll)."""
        return {
            url: counts.get("ApproximateNumberOfMessages", 0)
            for url, counts in self.per_queue.items()
        }

    def visible_by_queue(self) -> dict[str, int]:
        """Visible messages of each queue as last polled, for spreading receivers over them."""
        return {
            url: self.per_queue.get(url, {}).get("ApproximateNumberOfMessages", 0)
            for url in self._queue_urls
        }
