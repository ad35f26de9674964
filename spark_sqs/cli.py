"""The ``spark-sqs`` command: ``send`` and ``inspect``, against real AWS or any SQS endpoint.
Runs on: a workstation. (The demo is a development tool of the repository: ``make demo``.)

spark-sqs send --queue-url URL [--count N] [--endpoint-url URL]
spark-sqs inspect --queue-url URL [--journal LOCATION] [--endpoint-url URL]
spark-sqs release --journal LOCATION --batch N [--yes] [--endpoint-url URL]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .connection import Connection
from .console import say
from .options import SqsOptions
from .producer import numbered_entries
from .sqs.client import SqsClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark-sqs", description="spark-sqs tools")
    commands = parser.add_subparsers(dest="command", required=True)

    send = commands.add_parser("send", help="send numbered test messages to a queue")
    _queue_args(send)
    send.add_argument("--count", type=int, default=100)
    send.add_argument("--group", default=None, help="MessageGroupId (FIFO queues)")

    inspect = commands.add_parser("inspect", help="queue backlog and what a journal holds")
    _queue_args(inspect)
    inspect.add_argument("--journal", default=None, help="a query's journalLocation")

    release = commands.add_parser(
        "release",
        help="make a stuck batch's messages visible in the queue again (stop the query first)",
    )
    release.add_argument("--journal", required=True, help="the query's journalLocation")
    release.add_argument("--batch", required=True, type=int)
    release.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    release.add_argument("--endpoint-url", default=None)
    release.add_argument("--region", default=None)
    release.add_argument(
        "--queue-url", default=None, help="default: the queue the journal belongs to"
    )

    args = parser.parse_args(argv)
    run = {"send": _send, "release": _release, "inspect": _inspect}[args.command]
    try:
        return run(args)
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError

        from .errors import SqsSourceError
        from .sqs.client import classify

        if not isinstance(exc, (SqsSourceError, BotoCoreError, ClientError)):
            raise
        # What failed and what to do, not a traceback: a missing queue, wrong credentials.
        action = _ACTIONS[args.command]
        error = classify(exc, action, getattr(args, "queue_url", None) or args.journal)
        say(f"spark-sqs {args.command}: {error}", stream=sys.stderr)
        return 1


_ACTIONS = {"send": "SendMessageBatch", "inspect": "GetQueueAttributes", "release": "release"}


def _queue_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--endpoint-url", default=None)
    parser.add_argument("--region", default=None)


def _connection_options(args: argparse.Namespace, queue_url: str) -> dict[str, str]:
    raw = {"queueUrl": queue_url}
    if args.endpoint_url:
        raw["endpointUrl"] = args.endpoint_url
    if args.region:
        raw["region"] = args.region
    return raw


def _client(args: argparse.Namespace) -> tuple[SqsClient, Connection]:
    import os

    from .sqs.client import make_client

    connection = Connection.parse(_connection_options(args, args.queue_url), os.environ)
    return make_client(connection), connection


def _send(args: argparse.Namespace) -> int:
    client, connection = _client(args)
    group = (args.group or "spark-sqs") if connection.is_fifo else None
    for start in range(0, args.count, 10):
        entries = numbered_entries(start, min(start + 10, args.count), fifo_group=group)
        response = client.send_message_batch(QueueUrl=args.queue_url, Entries=entries)
        if response.get("Failed"):
            say(f"failed: {response['Failed']}", stream=sys.stderr)
            return 1
    say(f"sent {args.count} messages to {args.queue_url}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .journal import Journal
    from .sqs.client import queue_attributes

    journal = None
    if args.journal:
        raw = {**_connection_options(args, args.queue_url), "journalLocation": args.journal}
        journal = Journal(args.journal, SqsOptions.parse(raw))
    client, _ = _client(args)
    attrs = queue_attributes(client, args.queue_url, ["All"])
    report: dict[str, Any] = {
        "queue": args.queue_url,
        "visible": int(attrs.get("ApproximateNumberOfMessages", 0)),
        "inFlight": int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
        "delayed": int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)),
        "visibilityTimeout": int(attrs.get("VisibilityTimeout", 0)),
        "deadLetterQueue": json.loads(attrs["RedrivePolicy"]) if "RedrivePolicy" in attrs else None,
    }
    if journal is not None:
        state = journal.state.read()
        live = {
            b: receivers
            for b in journal.batches.list()
            if (receivers := journal.batches.live_receivers(b)) is not None
        }
        pending = {
            b: sum(len(r.message_ids) for r in journal.entries.batch_receipts(b, receivers))
            for b, receivers in live.items()
        }
        report["journal"] = {
            "plannedBatch": state.planned_batch,
            "acknowledgedBatch": state.acked_batch,
            # batch -> messages journaled and not yet deleted
            "unacknowledgedBatches": {str(b): n for b, n in pending.items()},
            "unacknowledgedMessages": sum(pending.values()),
            # batch -> planned receivers with nothing journaled yet: their tasks have not run,
            # are receiving, or died before journaling (a replay receives for them afresh)
            "receiversWithoutEntry": {
                str(b): missing
                for b, receivers in live.items()
                if (missing := [r for r in receivers if not journal.entries.has_journaled(b, r)])
            },
            "recentBatches": journal.metrics.read()[-5:],
        }
        # Poison batches (driver/poison.py): batches read by attempts that did not complete, their
        # narrowing, and every message quarantined to the dead-letter queue.
        from .driver import poison

        reports = {b: poison.batch_report(journal, b) for b in pending}
        report["journal"]["batchesWithFailedAttempts"] = {
            str(b): r
            for b, r in reports.items()
            if r["attempts"] > 1
            or r["narrowingStep"]
            or r["suspect"]
            or r["carriedFrom"] is not None
        }
        report["journal"]["quarantinedMessages"] = journal.poison.quarantined()
    say(json.dumps(report, indent=2))
    return 0


def _release(args: argparse.Namespace) -> int:
    import uuid

    from .driver import poison
    from .journal import Journal
    from .journal.lease import Lease
    from .sqs.client import make_client

    queue_url = args.queue_url or Journal(args.journal).meta.queue_url()
    if not queue_url:
        say(f"{args.journal} is not a spark-sqs journal (no _meta.json)", stream=sys.stderr)
        return 2
    raw = {**_connection_options(args, queue_url), "journalLocation": args.journal}
    options = SqsOptions.parse(raw)
    journal = Journal(args.journal, options)
    if args.batch <= journal.state.read().acked_batch:
        say(f"batch {args.batch} is already acknowledged: nothing to release", stream=sys.stderr)
        return 2
    receivers = journal.batches.live_receivers(args.batch) or ()
    held = sum(len(r.message_ids) for r in journal.entries.batch_receipts(args.batch, receivers))
    say(
        f"batch {args.batch} of {queue_url}: {held} journaled messages will be made visible in "
        "the queue and the batch's journal entries removed. The query's replay of the batch "
        "then delivers an empty batch and the messages arrive in later batches; if the sink "
        "already committed this batch, they arrive a second time."
    )
    if not args.yes:
        answer = input("Release them? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            say("nothing done")
            return 1
    # The query must be stopped: take its lease (waits out a lease that may still be live).
    lease = Lease(journal.store, args.journal, owner=f"release-{uuid.uuid4().hex}", interval=30.0)
    lease.acquire()
    try:
        result = poison.release_batch(
            journal,
            make_client(options.connection, wait_time_seconds=options.wait_time_seconds),
            queue_url,
            args.batch,
        )
    finally:
        lease.release()
    say(json.dumps(result, indent=2))
    return 0 if not result["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
