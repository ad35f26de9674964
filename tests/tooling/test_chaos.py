"""The fault harness's own parts: the injector does to a real client what it claims, and the
sink reader and counters see through uncommitted files, duplicates and reordering."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from chaos import faults
from chaos.cluster import (
    EXECUTOR_CLASS,
    EventLogCounts,
    Process,
    StandaloneCluster,
    alive_workers,
    busy_executors,
    completed_stages,
    count_event_log,
    event_logs,
    executor_identity,
    executor_pids,
    free_port,
    processes,
    session_conf,
    worker_environment,
    worker_host,
)
from chaos.faults import FaultConfig, FaultInjector, count_faults, faults_by_role, slow_tasks
from chaos.kills import (
    Schedule,
    SpeculationWatch,
    carry_out,
    draw_kills,
    speculation_recorded,
    waiting_for_copy,
)
from chaos.run import (
    RSS_ROLES,
    Outcome,
    _count,
    _count_arrivals,
    _order_violations,
    _processes,
    drain_target,
    flatness,
    render,
    rss_by_role,
    serialise_moto_s3_puts,
    sink_counters,
)
from chaos.sink import (
    committed_batches,
    committed_files,
    skipped_batches,
    write_then_skip_batches,
)
from spark_sqs.errors import TransientSqsError
from spark_sqs.sqs.client import classify, queue_counts


@pytest.fixture(scope="module")
def endpoint() -> Any:
    from devtools.local_sqs import MotoServer

    server = MotoServer()
    yield server.endpoint
    server.stop()


def _boto(
    service: str, endpoint: str, injector: FaultInjector | None = None, attempts: int = 1
) -> Any:
    client = boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        # One attempt by default: the raw fault, not botocore's retry of it.
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}),
    )
    if injector is not None:
        client.meta.events.register(f"before-send.{service}", injector)
    return client


def _client(endpoint: str, injector: FaultInjector | None = None) -> Any:
    return _boto("sqs", endpoint, injector)


def _queue_with_one_message(endpoint: str, name: str) -> tuple[Any, str]:
    plain = _client(endpoint)
    url = plain.create_queue(QueueName=name)["QueueUrl"]
    plain.send_message(QueueUrl=url, MessageBody="m")
    return plain, url


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [("throttle", "ThrottlingException", 400), ("server-error", "InternalFailure", 500)],
)
def test_error_responses_never_reach_sqs_and_classify_as_transient(
    endpoint, tmp_path, kind, code, status
):
    plain, url = _queue_with_one_message(endpoint, f"chaos-{kind}")
    log = tmp_path / "faults.log"
    client = _client(endpoint, FaultInjector(FaultConfig(rate=1.0, log=str(log), kinds=(kind,))))
    with pytest.raises(ClientError) as info:
        client.receive_message(QueueUrl=url, VisibilityTimeout=60)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert queue_counts(plain, url) == (1, 0)
    assert isinstance(classify(info.value, "ReceiveMessage", url), TransientSqsError)
    assert count_faults(str(log)) == {("ReceiveMessage", kind): 1}


def test_reset_fails_before_the_request_is_sent(endpoint, tmp_path):
    plain, url = _queue_with_one_message(endpoint, "chaos-reset")
    config = FaultConfig(rate=1.0, log=str(tmp_path / "f.log"), kinds=("reset",))
    client = _client(endpoint, FaultInjector(config))
    with pytest.raises(ConnectionClosedError) as info:
        client.receive_message(QueueUrl=url, VisibilityTimeout=60)
    assert queue_counts(plain, url) == (1, 0)
    assert isinstance(classify(info.value, "ReceiveMessage", url), TransientSqsError)


def test_timeout_acts_on_the_request_and_loses_the_answer(endpoint, tmp_path):
    plain, url = _queue_with_one_message(endpoint, "chaos-timeout")
    config = FaultConfig(rate=1.0, log=str(tmp_path / "f.log"), kinds=("timeout",))
    client = _client(endpoint, FaultInjector(config))
    with pytest.raises(ReadTimeoutError):
        client.receive_message(QueueUrl=url, VisibilityTimeout=60)
    # SQS handed the message out: it is in flight, and the caller never saw it.
    assert queue_counts(plain, url) == (0, 1)


def test_only_the_chosen_operations_fail(endpoint, tmp_path):
    plain, url = _queue_with_one_message(endpoint, "chaos-ops")
    config = FaultConfig(
        rate=1.0, log=str(tmp_path / "f.log"), kinds=("reset",), operations=("DeleteMessageBatch",)
    )
    client = _client(endpoint, FaultInjector(config))
    assert len(client.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]) == 1
    with pytest.raises(ConnectionClosedError):
        client.delete_message_batch(QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": "x"}])


def test_rate_zero_injects_nothing(endpoint, tmp_path):
    plain, url = _queue_with_one_message(endpoint, "chaos-none")
    log = tmp_path / "f.log"
    client = _client(endpoint, FaultInjector(FaultConfig(rate=0.0, log=str(log))))
    for _ in range(20):
        client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    assert not log.exists()


def test_configuration_travels_through_the_environment():
    config = FaultConfig(rate=0.25, log="/x/f.log", seed=7, kinds=("reset",), operations=("A",))
    assert FaultConfig.from_env(config.to_env()) == config
    s3 = FaultConfig(rate=0.25, log="/x/f.log", s3_rate=0.1)
    assert FaultConfig.from_env(s3.to_env()) == s3
    assert (s3.rate_for("sqs"), s3.rate_for("s3"), config.rate_for("s3")) == (0.25, 0.1, 0.25)


def test_install_hooks_every_new_sqs_client_once(endpoint, tmp_path, monkeypatch):
    import botocore.session

    monkeypatch.setattr(faults, "_INSTALLED", None)
    monkeypatch.setattr(
        botocore.session.Session, "create_client", botocore.session.Session.create_client
    )
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.install() is None  # nothing configured, nothing installed
    config = FaultConfig(rate=1.0, log=str(tmp_path / "f.log"), kinds=("reset",))
    monkeypatch.setenv(faults.ENV, config.to_env())
    first = faults.install()
    assert first is not None and faults.install() is first
    _, url = _queue_with_one_message(endpoint, "chaos-install")
    with pytest.raises(ConnectionClosedError):
        _client(endpoint).receive_message(QueueUrl=url)


def test_fault_log_counts_by_operation_kind_and_role(tmp_path):
    log = tmp_path / "f.log"
    log.write_text(
        "1 ReceiveMessage reset executor\n"
        "2 ReceiveMessage reset executor\n"
        "3 DeleteMessageBatch timeout driver\n"
    )
    assert count_faults(str(log)) == {
        ("ReceiveMessage", "reset"): 2,
        ("DeleteMessageBatch", "timeout"): 1,
    }
    assert faults_by_role(str(log)) == {"executor": (2, 2), "driver": (1, 1)}


def _write_part(sink: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    path = sink / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _log(sink: Path, name: str, *entries: tuple[Path, str]) -> None:
    lines = ["v1"] + [
        json.dumps({"path": f"file://{path}", "size": 1, "action": action})
        for path, action in entries
    ]
    (sink / "_spark_metadata" / name).write_text("\n".join(lines))


def _row(n: int, group: str = "g0") -> dict[str, Any]:
    return {"messageId": f"id-{n}", "body": json.dumps({"n": n}), "messageGroupId": group}


def test_sink_reader_takes_only_committed_files(tmp_path):
    sink = tmp_path / "out"
    (sink / "_spark_metadata").mkdir(parents=True)
    a = _write_part(sink, "part-a.parquet", [_row(0), _row(1)])
    b = _write_part(sink, "part-b.parquet", [_row(2)])
    # Written by an attempt that was killed before its batch was committed.
    _write_part(sink, "part-orphan.parquet", [_row(2)])
    _log(sink, "0", (a, "add"))
    _log(sink, "1", (b, "add"))
    (sink / "_spark_metadata" / ".2.tmp").write_text("v1\n")
    assert committed_files(sink) == [(0, a), (1, b)]
    rows = committed_batches(sink, ["messageId", "body", "messageGroupId"])
    assert [(batch, [r["messageId"] for r in part]) for batch, part in rows] == [
        (0, ["id-0", "id-1"]),
        (1, ["id-2"]),
    ]


def test_sink_reader_starts_from_the_newest_compaction(tmp_path):
    sink = tmp_path / "out"
    (sink / "_spark_metadata").mkdir(parents=True)
    a = _write_part(sink, "a.parquet", [_row(0)])
    b = _write_part(sink, "b.parquet", [_row(1)])
    c = _write_part(sink, "c.parquet", [_row(2)])
    _log(sink, "8", (a, "add"))  # superseded by 9.compact
    _log(sink, "9.compact", (a, "add"), (b, "add"))
    _log(sink, "10", (c, "add"), (a, "delete"))
    assert committed_files(sink) == [(9, b), (10, c)]


def test_counts_lost_duplicated_and_foreign_rows(tmp_path):
    sink = tmp_path / "out"
    (sink / "_spark_metadata").mkdir(parents=True)
    a = _write_part(sink, "a.parquet", [_row(0), _row(1), _row(1), _row(9)])
    _log(sink, "0", (a, "add"))
    outcome = Outcome("standard")
    _count(outcome, tmp_path, {0: "id-0", 1: "id-1", 2: "id-2"}, fifo=False)
    assert (outcome.sent, outcome.rows) == (3, 4)
    assert (outcome.lost, outcome.duplicated, outcome.unexpected) == (1, 1, 2)
    assert not outcome.passed


def test_fifo_order_is_checked_per_group_across_batches():
    def rows(*spec: tuple[int, int, str]) -> list[tuple[int, dict[str, Any]]]:
        return [(batch, _row(n, group)) for batch, n, group in spec]

    in_order = rows((0, 0, "a"), (0, 1, "a"), (0, 0, "b"), (1, 2, "a"), (1, 1, "b"))
    assert _order_violations(in_order) == 0
    # Within a batch, several receivers may hold one group: no order across their files.
    assert _order_violations(rows((0, 1, "a"), (0, 0, "a"), (1, 2, "a"))) == 0
    assert _order_violations(rows((0, 0, "a"), (0, 2, "a"), (1, 1, "a"))) == 1


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_process_table_gives_parent_session_and_command() -> None:
    parent, session, command = _processes()[os.getpid()]
    assert (parent, session) == (os.getppid(), os.getsid(0))
    assert sys.executable.encode() in command or b"python" in command


# -- the s3:// journal's S3 calls -----------------------------------------------------------------


def _s3_client(endpoint: str, injector: FaultInjector | None = None, attempts: int = 1) -> Any:
    return _boto("s3", endpoint, injector, attempts)


def _bucket(endpoint: str, name: str) -> Any:
    plain = _s3_client(endpoint)
    plain.create_bucket(Bucket=name)
    return plain


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [("throttle", "SlowDown", 503), ("server-error", "InternalError", 500)],
)
def test_s3_error_responses_never_reach_s3(endpoint, tmp_path, kind, code, status):
    plain = _bucket(endpoint, f"chaos-s3-{kind}")
    log = tmp_path / "f.log"
    config = FaultConfig(rate=0.0, s3_rate=1.0, log=str(log), kinds=(kind,))
    client = _s3_client(endpoint, FaultInjector(config))
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=f"chaos-s3-{kind}", Key="k", Body=b"x", IfNoneMatch="*")
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert plain.list_objects_v2(Bucket=f"chaos-s3-{kind}").get("KeyCount") == 0
    assert count_faults(str(log)) == {("PutObject", kind): 1}


def test_a_lost_conditional_put_is_retried_into_412_and_the_store_reports_it_exists(
    endpoint, tmp_path
):
    """What the s3:// journal must survive: the PUT landed, its answer was lost, botocore's retry
    of the conditional PUT is refused with 412, so the store's create says "exists"."""
    from spark_sqs.journal.stores import S3Store

    plain = _bucket(endpoint, "chaos-s3-lost")
    log = tmp_path / "f.log"
    injector = FaultInjector(FaultConfig(rate=0.0, s3_rate=1.0, log=str(log), kinds=("timeout",)))
    client = _s3_client(endpoint, injector, attempts=3)
    calls = []

    def once(request: Any, event_name: str = "", **kwargs: Any) -> Any:
        calls.append(event_name)
        return injector(request, event_name=event_name, **kwargs) if len(calls) == 1 else None

    client.meta.events.unregister("before-send.s3", injector)
    client.meta.events.register("before-send.s3", once)
    store = S3Store("chaos-s3-lost", "journal", client_factory=lambda: client)
    assert store.create("batches/1/0.arrow", b"entry") is False
    assert len(calls) == 2  # the lost PUT, then its retry
    body = plain.get_object(Bucket="chaos-s3-lost", Key="journal/batches/1/0.arrow")["Body"]
    assert body.read() == b"entry"
    assert count_faults(str(log)) == {("PutObject", "timeout"): 1}


@pytest.mark.parametrize("operation", ["GetObject", "ListObjectsV2", "DeleteObject"])
def test_s3_reads_lists_and_deletes_fail_only_when_chosen(endpoint, tmp_path, operation):
    bucket = f"chaos-s3-{operation.lower()}"
    plain = _bucket(endpoint, bucket)
    plain.put_object(Bucket=bucket, Key="k", Body=b"x")
    config = FaultConfig(
        rate=0.0, s3_rate=1.0, log=str(tmp_path / "f.log"), kinds=("reset",),
        operations=(operation,),
    )  # fmt: skip
    client = _s3_client(endpoint, FaultInjector(config))
    calls = {
        "GetObject": lambda: client.get_object(Bucket=bucket, Key="k"),
        "ListObjectsV2": lambda: client.list_objects_v2(Bucket=bucket),
        "DeleteObject": lambda: client.delete_object(Bucket=bucket, Key="k"),
    }
    for name, call in calls.items():
        if name == operation:
            with pytest.raises(ConnectionClosedError):
                call()
        elif name != "DeleteObject":
            call()
    assert plain.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"


def test_a_lost_get_object_answer_is_read_and_discarded(endpoint, tmp_path):
    _bucket(endpoint, "chaos-s3-get").put_object(Bucket="chaos-s3-get", Key="k", Body=b"x" * 70000)
    config = FaultConfig(rate=0.0, s3_rate=1.0, log=str(tmp_path / "f.log"), kinds=("timeout",))
    client = _s3_client(endpoint, FaultInjector(config))
    with pytest.raises(ReadTimeoutError):
        client.get_object(Bucket="chaos-s3-get", Key="k")


def test_install_hooks_s3_clients_with_their_own_rate(endpoint, tmp_path, monkeypatch):
    import botocore.session

    monkeypatch.setattr(faults, "_INSTALLED", None)
    monkeypatch.setattr(
        botocore.session.Session, "create_client", botocore.session.Session.create_client
    )
    config = FaultConfig(rate=0.0, s3_rate=1.0, log=str(tmp_path / "f.log"), kinds=("reset",))
    monkeypatch.setenv(faults.ENV, config.to_env())
    assert faults.install() is not None
    _, url = _queue_with_one_message(endpoint, "chaos-install-s3")
    assert _client(endpoint).get_queue_attributes(QueueUrl=url)  # SQS at rate 0: no fault
    with pytest.raises(ConnectionClosedError):
        _s3_client(endpoint).list_objects_v2(Bucket="any")


def test_fault_log_counts_by_role_and_service(tmp_path):
    log = tmp_path / "f.log"
    log.write_text(
        "1 ReceiveMessage reset executor\n"
        "1 PutObject timeout executor 1795430213.250\n"
        "2 GetObject throttle driver 1795430214.001\n"
        "3 ListObjectsV2 throttle driver\n"
    )
    assert faults.faults_by_role_and_service(str(log)) == {
        ("executor", "sqs"): (1, 1),
        ("executor", "s3"): (1, 1),
        ("driver", "s3"): (2, 2),
    }
    assert faults_by_role(str(log)) == {"executor": (2, 1), "driver": (2, 2)}


# -- the sink round trip (fifo-sqs-sink) ----------------------------------------------------------


def _arrival(n: int, group: str = "g0", dedupe: str | None = None) -> dict[str, Any]:
    return {"body": json.dumps({"n": n}), "group": group, "dedupe": dedupe or f"d{n}"}


def _arrivals_outcome(arrivals: list[dict[str, Any]], sent: range = range(4)) -> Outcome:
    outcome = Outcome("fifo-sqs-sink", sink="sqs", drained=True)
    _count_arrivals(outcome, arrivals, {n: f"id-{n}" for n in sent})
    return outcome


def test_sink_arrivals_pass_with_each_number_once_in_group_order():
    # Groups interleave freely; within each, numbers increase.
    outcome = _arrivals_outcome([_arrival(0), _arrival(2, "g1"), _arrival(1), _arrival(3, "g1")])
    assert (outcome.sent, outcome.rows, outcome.lost, outcome.duplicated) == (4, 4, 0, 0)
    assert (outcome.unexpected, outcome.order_violations, outcome.same_dedupe_id) == (0, 0, 0)
    assert outcome.passed


def test_sink_arrivals_report_a_missing_message():
    outcome = _arrivals_outcome([_arrival(0), _arrival(1), _arrival(3, "g1")])
    assert (outcome.lost, outcome.duplicated, outcome.order_violations) == (1, 0, 0)
    assert not outcome.passed


def test_sink_arrivals_report_a_duplicate_and_whether_sqs_should_have_dropped_it():
    # A copy with the same deduplication id: SQS failed to drop it (or the window had passed).
    same = _arrivals_outcome([_arrival(0), _arrival(1), _arrival(1), _arrival(2), _arrival(3)])
    assert (same.duplicated, same.same_dedupe_id, same.lost) == (1, 1, 0)
    assert not same.passed
    # A copy with another id: the sink derived a different id for the same row.
    other = [_arrival(0), _arrival(1), _arrival(1, dedupe="x"), _arrival(2), _arrival(3)]
    outcome = _arrivals_outcome(other)
    assert (outcome.duplicated, outcome.same_dedupe_id) == (1, 0)
    assert not outcome.passed


def test_sink_arrivals_report_group_order_violations_and_foreign_messages():
    outcome = _arrivals_outcome([_arrival(1), _arrival(0), _arrival(2, "g1"), _arrival(3, "g1")])
    assert (outcome.order_violations, outcome.lost, outcome.duplicated) == (1, 0, 0)
    assert not outcome.passed
    foreign = [*map(_arrival, range(4)), {"body": "not json", "group": "g0", "dedupe": "z"}]
    foreign.append(_arrival(7))
    outcome = _arrivals_outcome(foreign)
    assert (outcome.unexpected, outcome.lost, outcome.order_violations) == (2, 0, 0)
    assert not outcome.passed


def test_drain_target_reads_every_group_in_order_and_empties_the_queue(endpoint):
    plain = _client(endpoint)
    url = plain.create_queue(QueueName="chaos-target.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    for n in range(25):
        plain.send_message(
            QueueUrl=url,
            MessageBody=json.dumps({"n": n}),
            MessageGroupId=f"g{n % 3}",
            MessageDeduplicationId=f"d{n}",
        )
    arrivals = drain_target(plain, url, timeout=60)
    assert sorted(json.loads(a["body"])["n"] for a in arrivals) == list(range(25))
    assert {a["dedupe"] for a in arrivals} == {f"d{n}" for n in range(25)}
    outcome = Outcome("fifo-sqs-sink", sink="sqs", drained=True)
    _count_arrivals(outcome, arrivals, {n: "" for n in range(25)})
    assert outcome.passed
    assert queue_counts(plain, url) == (0, 0)


def test_moto_drops_a_fifo_copy_until_the_first_is_deleted(endpoint):
    """What the sink round trip relies on (PLATFORM.md, moto): a resend with the same
    deduplication id within 5 minutes is dropped, but moto, unlike SQS, forgets the id once
    the message is deleted, so the harness reads the target only after the query stopped."""
    plain = _client(endpoint)
    url = plain.create_queue(QueueName="chaos-dedupe.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    entries = [
        {"Id": str(i), "MessageBody": f"m{i}", "MessageGroupId": "g", "MessageDeduplicationId": d}
        for i, d in enumerate(["a", "b"])
    ]
    plain.send_message_batch(QueueUrl=url, Entries=entries)
    again = plain.send_message_batch(QueueUrl=url, Entries=entries)
    assert len(again["Successful"]) == 2 and not again.get("Failed")  # accepted, then dropped
    assert queue_counts(plain, url) == (2, 0)
    first = plain.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
    plain.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    plain.send_message_batch(QueueUrl=url, Entries=entries[:1])
    assert sum(queue_counts(plain, url)) == 2  # "a" is back: SQS would still drop it


def test_a_lost_send_answer_sends_and_the_retry_with_the_same_ids_is_dropped(endpoint, tmp_path):
    plain = _client(endpoint)
    url = plain.create_queue(QueueName="chaos-send.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    config = FaultConfig(
        rate=1.0, log=str(tmp_path / "f.log"), kinds=("timeout",), operations=("SendMessageBatch",)
    )
    entries = [
        {"Id": "0", "MessageBody": "m", "MessageGroupId": "g", "MessageDeduplicationId": "d"}
    ]
    with pytest.raises(ReadTimeoutError):
        _client(endpoint, FaultInjector(config)).send_message_batch(QueueUrl=url, Entries=entries)
    assert queue_counts(plain, url) == (1, 0)  # SQS took it; the caller never heard
    plain.send_message_batch(QueueUrl=url, Entries=entries)
    assert queue_counts(plain, url) == (1, 0)
    assert count_faults(str(tmp_path / "f.log")) == {("SendMessageBatch", "timeout"): 1}


def test_sink_counters_sum_the_metrics_files(tmp_path):
    for batch, sent in ((0, 10), (1, 5)):
        data = {"rows": sent, "sent": sent, "retried": batch, "calls": 2, "queueUrl": "q"}
        (tmp_path / f"batch-{batch:010d}.json").write_text(json.dumps(data))
    totals = sink_counters(tmp_path)
    assert (totals["sent"], totals["retried"], totals["calls"]) == (15, 1, 4)
    assert sink_counters(tmp_path / "missing") == {}


def test_report_shows_the_sink_round_trip_and_send_faults_only_where_the_sink_sends():
    args = argparse.Namespace(
        fault_kinds=["timeout"], fault_operations=["ReceiveMessage", "SendMessageBatch"],
        s3_fault_rate=None, fault_rate=0.2, messages=300, soak=0, rate=10.0, kills=2,
        worker_kills=1, kill_min=3.0, kill_max=40.0, visibility=10, receivers=[1],
        max_per_trigger=[50], stall_every=150, stall_factor=1.5, seed=1,
    )  # fmt: skip
    plain = Outcome("fifo", drained=True, faults={("SendMessageBatch", "timeout"): 0})
    sink = Outcome("fifo-sqs-sink", sink="sqs", drained=True, rows=300, sink_span=320.0)
    sink.faults = {("SendMessageBatch", "timeout"): 7}
    sink.sink_counters = {"sent": 300, "retried": 7, "calls": 40}
    text = render([plain, sink], args)
    assert "| fifo-sqs-sink | SendMessageBatch | 7 |" in text
    assert "| fifo | SendMessageBatch |" not in text
    assert "| fifo-sqs-sink | 300 | 0 | 320 s | **no** | 300 | 7 | 0 | 0 | 40 |" in text


def test_a_poison_scenario_passes_only_with_the_message_quarantined_once_and_not_in_the_sink():
    clean = {"drained": True, "poison": True}
    assert Outcome("standard-poison", quarantined=1, **clean).passed
    assert not Outcome("standard-poison", quarantined=0, **clean).passed
    assert not Outcome("standard-poison", quarantined=2, **clean).passed
    assert not Outcome("standard-poison", quarantined=1, poison_in_sink=1, **clean).passed
    # The other scenarios do not look at the dead-letter queue.
    assert Outcome("standard", drained=True).passed


def test_the_sns_producer_publishes_envelopes_and_remembers_the_sns_ids(endpoint):
    from chaos.run import Producer

    plain = _client(endpoint)
    url = plain.create_queue(QueueName="chaos-sns")["QueueUrl"]
    arn = plain.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns = boto3.client(
        "sns",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    topic = sns.create_topic(Name="chaos-sns")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    producer = Producer(plain, url, fifo=False, rate=1000.0, total=12, until=None, sns=(sns, topic))
    producer.run()
    envelopes = [json.loads(a["body"]) for a in drain_target(plain, url, timeout=60)]
    assert {e["MessageId"]: json.loads(e["Message"])["n"] for e in envelopes} == {
        i: n for n, i in producer.sent.items()
    }
    assert all(e["Type"] == "Notification" and e["TopicArn"] == topic for e in envelopes)


# -- memory over a soak ------------------------------------------------------------------------


def test_flatness_leaves_out_the_warm_up_and_compares_the_thirds() -> None:
    mib = 1 << 20
    warm_then_flat = [50 * mib] * 10 + [200 * mib] * 30
    assert flatness(warm_then_flat)["flat"] is True
    growing = [(100 + 4 * i) * mib for i in range(40)]  # 4 MiB more per sample
    result = flatness(growing)
    assert result["flat"] is False and result["growth"] > 1.1
    assert flatness([mib] * 5)["flat"] is None  # too few samples to tell
    # Within 16 MiB: noise of a small process is not growth.
    assert flatness([10 * mib] * 20 + [20 * mib] * 20)["flat"] is True


def test_rss_is_read_per_role_from_the_process_table() -> None:
    me = os.getpid()
    session = 4242
    table = {
        session: (1, session, b"python\0chaos/child.py\0"),
        10: (session, session, b"/usr/lib/jvm/bin/java\0-cp\0x\0"),
        11: (10, session, b"python\0-m\0pyspark.sql.streaming.python_streaming_source_runner\0"),
        12: (10, session, b"python\0-m\0pyspark.daemon\0pyspark.worker\0"),
        me: (12, session, b"python\0-m\0pyspark.daemon\0pyspark.worker\0"),  # a forked worker
        99: (1, 7, b"python\0other\0"),  # another session
    }
    found = rss_by_role(table, session)
    assert set(found) == set(RSS_ROLES)
    # Only this process exists of those: it is the one worker, counted once.
    assert found["worker_max"] == found["workers_total"] > 0
    assert found["source_runner"] == found["jvm"] == found["driver_python"] == 0


# -- the standalone cluster: processes, event log, slowed tasks, the write-then-skip sink -------


def _table(*rows: tuple[int, int, int, str]) -> dict[int, Process]:
    """``pid -> Process`` from ``(pid, parent, session, command line with spaces)``."""
    return {pid: Process(parent, session, command.replace(" ", "\0").encode()) for pid, parent,
            session, command in rows}  # fmt: skip


JAVA_EXECUTOR = "/usr/lib/jvm/bin/java -cp x org.apache.spark.executor.CoarseGrainedExecutorBackend"


def test_executors_are_the_jvms_of_the_cluster_sessions():
    table = _table(
        (10, 1, 10, "/jdk/bin/java -cp x org.apache.spark.deploy.worker.Worker"),
        (11, 10, 10, JAVA_EXECUTOR),
        (12, 11, 10, "/venv/bin/python -m pyspark.daemon pyspark.worker"),
        # Another cluster's executor (another session), and a shell that only names the class.
        (21, 20, 20, JAVA_EXECUTOR),
        (14, 10, 10, "bash -c grep org.apache.spark.executor.CoarseGrainedExecutorBackend"),
    )
    assert executor_pids(table, {10}) == [11]
    assert executor_pids(table, {10, 20}) == [11, 21]
    assert executor_pids(table, {99}) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_real_executor_like_process_is_found_by_process(tmp_path):
    # A program named java whose command line is an executor's, in a session of its own, with a
    # child (as the executor's Python daemon) that must not count.
    java = tmp_path / "java"
    java.symlink_to(sys.executable)
    script = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    command = [str(java), "-c", script, EXECUTOR_CLASS.decode()]
    command += ["--executor-id", "7", "--hostname", "127.0.0.2", "--app-id", "app-x"]
    process = subprocess.Popen(command, start_new_session=True)
    try:

        def children() -> list[int]:
            return [p for p, row in processes().items() if row.parent == process.pid]

        assert _wait(lambda: len(children()) == 1)
        table = processes()
        assert executor_pids(table, {process.pid}) == [process.pid]
        assert executor_pids(table, {os.getsid(0)}) == []
        assert executor_identity(table[process.pid].command) == ("app-x", "7")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_an_executor_is_known_by_its_application_and_executor_id():
    arguments = " --driver-url spark://d --executor-id 3 --cores 1 --app-id app-1-0002 --x y"
    command = (JAVA_EXECUTOR + arguments).replace(" ", "\0")
    assert executor_identity(command.encode()) == ("app-1-0002", "3")
    assert executor_identity(JAVA_EXECUTOR.replace(" ", "\0").encode()) is None
    assert executor_identity(b"java\0--app-id") is None


def test_busy_executors_are_those_the_driver_reports_with_active_tasks():
    import http.server
    import threading

    answers = {
        "/api/v1/applications": [{"id": "app-7"}],
        "/api/v1/applications/app-7/executors": [
            {"id": "driver", "activeTasks": 0},
            {"id": "0", "activeTasks": 1},
            {"id": "1", "activeTasks": 0},
            {"id": "2", "activeTasks": 2},
        ],
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps(answers[self.path.rstrip("/")]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert busy_executors(server.server_address[1]) == ("app-7", ["0", "2"])
    finally:
        server.shutdown()
    assert busy_executors(free_port()) is None  # nothing listens: the driver is not up yet


def _wait(predicate: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _task_start(stage: int, index: int, attempt: int, launch: int, speculative: bool) -> str:
    return json.dumps(
        {
            "Event": "SparkListenerTaskStart",
            "Stage ID": stage,
            "Stage Attempt ID": 0,
            "Task Info": {
                "Task ID": 100 * stage + 10 * index + attempt,
                "Index": index,
                "Attempt": attempt,
                "Launch Time": launch,
                "Executor ID": str(attempt),
                "Host": f"127.0.0.{attempt + 2}",
                "Speculative": speculative,
                "Finish Time": 0,
            },
        }
    )


def _task_end(stage: int, index: int, attempt: int, launch: int, finish: int, **reason: Any) -> str:
    return json.dumps(
        {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage,
            "Stage Attempt ID": 0,
            "Task End Reason": reason or {"Reason": "Success"},
            "Task Info": {
                "Index": index,
                "Attempt": attempt,
                "Launch Time": launch,
                "Finish Time": finish,
                "Speculative": attempt > 0,
            },
        }
    )


def test_event_log_counts_speculative_attempts_and_whether_they_ran_beside_the_original(tmp_path):
    first = tmp_path / "app-1"
    first.write_text(
        "\n".join(
            [
                json.dumps({"Event": "SparkListenerApplicationStart", "Timestamp": 0}),
                _task_start(0, 0, 0, 1000, False),
                _task_start(0, 1, 0, 1000, False),
                _task_end(0, 1, 0, 1000, 2000),
                # A copy of task 0 while attempt 0 still runs; attempt 0 is then killed.
                _task_start(0, 0, 1, 4000, True),
                _task_end(0, 0, 1, 4000, 5000),
                _task_end(
                    0,
                    0,
                    0,
                    1000,
                    5100,
                    Reason="TaskKilled",
                    **{"Kill Reason": "Stage cancelled: Stage finished"},
                ),  # fmt: skip
                # Killed with no attempt of it succeeding (the query stopped): not counted.
                _task_start(2, 0, 0, 8000, False),
                _task_end(2, 0, 0, 8000, 9000, Reason="TaskKilled"),
                # Lost with its executor, then retried (not speculative).
                _task_start(1, 0, 0, 6000, False),
                _task_end(1, 0, 0, 6000, 7000, Reason="ExecutorLostFailure"),
                json.dumps({"Event": "SparkListenerExecutorRemoved", "Executor ID": "1"}),
                _task_start(1, 0, 1, 7100, False),
            ]
        )
        + "\n"
    )
    # A SIGKILLed driver's log: in progress, a copy whose original has no end yet, a torn line.
    second = tmp_path / "app-2.inprogress"
    second.write_text(
        _task_start(0, 2, 0, 100, False) + "\n" + _task_start(0, 2, 1, 900, True) + "\n"
        '{"Event":"SparkListenerTaskEnd","Stage'
    )
    (tmp_path / ".hidden").write_text("")
    logs = event_logs(tmp_path)
    assert [p.name for p in logs] == ["app-1", "app-2.inprogress"]
    counts = count_event_log(logs)
    assert (counts.applications, counts.tasks) == (2, 8)
    assert (counts.speculative, counts.concurrent, counts.speculative_won) == (2, 2, 1)
    assert counts.speculative_tasks == [(0, 0, 0), (0, 0, 2)]
    assert counts.killed_by_other_attempt == 1
    assert (counts.executors_removed, counts.tasks_lost_with_executor) == (1, 1)
    assert count_event_log(event_logs(tmp_path / "missing")).applications == 0


def test_a_copy_launched_after_the_original_ended_does_not_count_as_concurrent(tmp_path):
    log = tmp_path / "app"
    log.write_text(
        "\n".join(
            [
                _task_start(0, 0, 0, 1000, False),
                _task_end(0, 0, 0, 1000, 2000),
                _task_start(0, 0, 1, 3000, True),
            ]
        )
    )
    counts = count_event_log([log])
    assert (counts.speculative, counts.concurrent) == (1, 0)


def test_a_cluster_scenario_passes_only_with_a_speculative_attempt():
    clean = {"drained": True, "cluster": True}
    assert not Outcome("standard-cluster", **clean).passed
    assert Outcome("standard-cluster", events=EventLogCounts(speculative=1), **clean).passed
    assert not Outcome(
        "standard-cluster", events=EventLogCounts(speculative=3), duplicated=1, **clean
    ).passed
    assert Outcome("standard", drained=True).passed


def test_slowed_tasks_are_one_receiver_in_a_stable_share_of_stages():
    config = FaultConfig(
        rate=0.0, log="x", seed=5, slow_share=0.5, slow_partitions=3, slow_seconds=(6.0, 15.0),
        slow_after_max=8.0,
    )  # fmt: skip
    plans = {
        (stage, part): config.slow_plan(stage, part) for stage in range(100) for part in range(4)
    }
    # Every process draws the same answer for a task.
    assert plans == {key: config.slow_plan(*key) for key in plans}
    slowed = {key: plan for key, plan in plans.items() if plan is not None}
    stages = [stage for stage, _ in slowed]
    assert len(stages) == len(set(stages))  # one task a stage at most
    assert 0.35 < len(stages) / 100 < 0.65
    assert {part for _, part in slowed} == {0, 1, 2}  # never beyond slow_partitions
    assert {point for point, _ in slowed.values()} == {"before", "after"}
    assert all(6.0 <= s <= 15.0 for p, s in slowed.values() if p == "before")
    assert all(s <= 8.0 for p, s in slowed.values() if p == "after")
    assert FaultConfig(rate=0.0, log="x").slow_plan(0, 0) is None
    assert FaultConfig.from_env(config.to_env()) == config


def _in_task(monkeypatch, stage: int, partition: int, attempt: int, attempt_id: int) -> None:
    from pyspark import TaskContext

    # Not TaskContext(): its __new__ stores the instance in the class attribute before
    # monkeypatch could record the original, which would then outlive the test (and make the
    # next SparkSession refuse to start, "CONTEXT_ONLY_VALID_ON_DRIVER", on PySpark 4.0).
    context = object.__new__(TaskContext)
    context._stageId, context._partitionId = stage, partition
    context._attemptNumber, context._taskAttemptId = attempt, attempt_id
    monkeypatch.setattr(TaskContext, "_taskContext", context)


@pytest.mark.parametrize("point", ["before", "after"])
def test_a_slowed_task_sleeps_once_in_its_first_receive_and_copies_do_not(
    endpoint, tmp_path, monkeypatch, point
):
    plain, url = _queue_with_one_message(endpoint, f"chaos-slow-{point}")
    slow_log = tmp_path / "slow.log"
    config = FaultConfig(
        rate=0.0, log=str(tmp_path / "f.log"), slow_share=1.0, slow_seconds=(0.1, 0.1),
        slow_points=(point,), slow_log=str(slow_log),
    )  # fmt: skip
    seen: list[tuple[int, int]] = []

    def sleep(seconds: float) -> None:
        # What SQS holds while the task sleeps: after the answer, the message is in flight.
        if not seen:
            seen.append(queue_counts(plain, url))
        time.sleep(seconds)

    injector = FaultInjector(config, sleep=sleep)
    client = _client(endpoint, injector)
    _in_task(monkeypatch, stage=3, partition=0, attempt=0, attempt_id=42)
    first = client.receive_message(QueueUrl=url, VisibilityTimeout=60)
    assert len(first["Messages"]) == 1  # the "after" point hands the real answer on
    client.receive_message(QueueUrl=url, VisibilityTimeout=60)  # the same attempt: no sleep
    _in_task(monkeypatch, stage=3, partition=0, attempt=1, attempt_id=43)  # a copy
    client.receive_message(QueueUrl=url, VisibilityTimeout=60)
    assert seen == [{"after": (0, 1), "before": (1, 0)}[point]]
    tasks = slow_tasks(str(slow_log))
    assert [(t.stage, t.partition, t.point, t.ended) for t in tasks] == [(3, 0, point, True)]
    assert not tasks[0].woken_by_copy  # no mark folder configured: it slept its time


def test_a_copy_starting_to_receive_wakes_the_sleeping_original(endpoint, tmp_path, monkeypatch):
    _, url = _queue_with_one_message(endpoint, "chaos-slow-copy")
    slow_log, marks = tmp_path / "slow.log", tmp_path / "marks"
    config = FaultConfig(
        rate=0.0, log=str(tmp_path / "f.log"), slow_share=1.0, slow_seconds=(120.0, 120.0),
        slow_points=("before",), slow_log=str(slow_log), slow_marks=str(marks), run=2,
    )  # fmt: skip
    client = _client(endpoint, FaultInjector(config))
    # The copy (attempt 1) receives first here; the sleeping original would see its mark at its
    # next look just the same.
    _in_task(monkeypatch, stage=4, partition=0, attempt=1, attempt_id=51)
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    assert [p.name for p in marks.iterdir()] == ["2-4-0"]
    _in_task(monkeypatch, stage=4, partition=0, attempt=0, attempt_id=50)
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    [task] = slow_tasks(str(slow_log))
    assert task.ended and task.woken_by_copy
    # Another run's stage 4 is another task: not woken by this mark. With a speculative copy
    # seen, it sleeps its configured 0.2 s (not the eager wait for a copy that never comes).
    (marks / faults.SPECULATION_SEEN).touch()
    other = FaultConfig.from_env(replace(config, run=3, slow_seconds=(0.2, 0.2)).to_env())
    client = _client(endpoint, FaultInjector(other))
    _in_task(monkeypatch, stage=4, partition=0, attempt=0, attempt_id=60)
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    tasks = slow_tasks(str(slow_log))
    assert [(t.woken_by_copy, t.ended) for t in tasks] == [(True, True), (False, True)]
    assert tasks[1].seconds == 0.2


def test_slow_log_marks_a_sleep_without_its_end_as_cut_short(tmp_path):
    log = tmp_path / "slow.log"
    log.write_text(
        "7 start 1 2 0 11 before 10.0 1000.000\n"
        "8 start 1 2 1 12 after 4.0 1000.000\n"
        "8 end 1 2 1 12 after 4.0 1004.000\n"
        "8 start 2 2 2 13 before 9.0 1005.000\n"
        "8 woken 2 2 2 13 before 9.0 1006.000\n"
        "9 start 2"  # torn by a kill
    )
    tasks = {(t.pid, t.partition): t for t in slow_tasks(str(log))}
    assert sorted(tasks) == [(7, 0), (8, 1), (8, 2)]
    assert [t.run for _, t in sorted(tasks.items())] == [1, 1, 2]
    assert [(t.ended, t.woken_by_copy) for _, t in sorted(tasks.items())] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert (tasks[7, 0].seconds, tasks[7, 0].point, tasks[8, 1].started) == (10.0, "before", 1000.0)
    assert slow_tasks(str(tmp_path / "missing")) == []


def test_until_a_copy_is_seen_receiver_0_of_every_stage_sleeps_until_its_copy(tmp_path):
    """Eager slowing: every batch has a receiver 0, and every stage is a chance for a copy
    until the harness has left its mark: receiver 0 sleeps before its first receive (holding
    nothing) until its copy wakes it, however long Spark takes to launch one on a loaded
    machine. Then the configured share, partitions and points again."""
    config = FaultConfig(
        rate=0.0, log="x", seed=5, slow_share=0.5, slow_partitions=3, slow_seconds=(10.0, 30.0),
        slow_after_max=12.0,
    )  # fmt: skip
    eager = [config.slow_plan(stage, 0, eager=True) for stage in range(50)]
    assert eager == [("before", faults.EAGER_SECONDS)] * 50
    assert faults.EAGER_SECONDS > 2 * config.slow_seconds[1]
    others = [config.slow_plan(stage, p, eager=True) for stage in range(50) for p in (1, 2)]
    assert others == [None] * 100
    calm = [stage for stage in range(50) if config.slow_plan(stage, 0) is None]
    assert 20 < len(calm) < 50  # without the eagerness, most stages leave receiver 0 alone
    # The injector is eager while the harness's mark is missing from the marks folder.
    marks = tmp_path / "marks"
    injector = FaultInjector(replace(config, slow_marks=str(marks)))
    assert injector._eager()
    marks.mkdir()
    (marks / faults.SPECULATION_SEEN).touch()
    assert not injector._eager()
    assert not FaultInjector(config)._eager()  # no marks folder: the share from the start


class _Clock:
    """A clock that only the test's sleeps move."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def _carry_out(kills: list[tuple[float, str]], held: Any, cap: float = 120.0) -> Any:
    clock = _Clock()
    schedule = Schedule(lambda: held(clock.now), cap=cap, clock=clock, sleep=clock.sleep)
    done: list[tuple[str, float]] = []
    finished = carry_out(
        kills, schedule, lambda what: done.append((what, clock.now)), lambda: False
    )
    assert finished
    return done, schedule


@pytest.mark.parametrize("kind", ["executor", "worker", "query"])
def test_no_kill_lands_while_the_slowed_task_waits_for_its_copy(kind):
    """The kills seed 42090 drew for its first cluster run (executor 13.7 s, Python worker
    36.8 s, query 39.7 s; in CI the query's kill took receiver 2 of the first batch in its sleep,
    and the scenario saw no copy). A slowed task sleeps from 1 s before the ``kind`` kill until
    its stage completes 20 s later: every kill drawn still happens, in order, none in that
    window, and those after it keep their gaps."""
    rng = random.Random("42090-standard-cluster")
    rng.choice([3, 4]), rng.choice([50, 100, 200])  # the run's options, drawn first
    kills = draw_kills(rng, rng.uniform(15.0, 75.0), workers=1, executors=1)
    assert [what for _, what in kills] == ["executor", "worker", "query"]
    assert kills[-1][0] == pytest.approx(39.67, abs=0.01)
    moment = next(m for m, what in kills if what == kind)
    sleeping, completed = moment - 1.0, moment + 19.0

    def held(now: float) -> bool:
        return sleeping <= now < completed

    assert any(held(m) for m, _ in kills)  # the drawing alone (the old harness) kills in it
    done, schedule = _carry_out(kills, held)
    assert [what for what, _ in done] == [what for _, what in kills]
    assert not any(held(at) for _, at in done)
    assert schedule.holds == 1
    assert schedule.held_seconds == pytest.approx(completed - moment, abs=0.6)
    # Each kill at its drawn moment, or later by the hold it waited through.
    for (drawn, _), (_, at) in zip(kills, done, strict=True):
        expected = drawn if drawn < sleeping else drawn + schedule.held_seconds
        assert at == pytest.approx(expected, abs=0.6)


def test_holds_are_capped_per_run_so_a_stuck_stage_does_not_stop_the_kills():
    done, schedule = _carry_out([(5.0, "executor"), (20.0, "query")], lambda now: True, cap=30.0)
    assert [what for what, _ in done] == ["executor", "query"]
    assert schedule.held_seconds == pytest.approx(30.0, abs=0.6)
    assert done[1][1] == pytest.approx(50.0, abs=1.2)


def test_a_run_is_held_for_its_own_slowed_stage_until_it_completes_or_a_copy_is_on_record(
    tmp_path,
):
    eventlog, marks, slow_log = tmp_path / "eventlog", tmp_path / "marks", tmp_path / "slow.log"
    eventlog.mkdir()
    watch = SpeculationWatch(eventlog, str(slow_log), marks)
    assert not watch.held(2, "app-2")  # nothing slowed yet
    slow_log.write_text("7 start 1 3 0 11 before 20.0 1000.000\n")
    assert not watch.held(2, "app-2")  # another run's slowed task (a zombie of run 1)
    with open(slow_log, "a") as handle:
        handle.write("8 start 2 3 0 12 before 20.0 1001.000\n")
    app = eventlog / "app-2.inprogress"
    app.write_text(_task_start(3, 0, 0, 1000, False) + "\n")
    assert watch.held(2, "app-2") and watch.held(2, None)
    # Its stage completes without a copy: nothing to wait for any more.
    stage_done = {"Event": "SparkListenerStageCompleted", "Stage Info": {"Stage ID": 3}}
    with open(app, "a") as handle:
        handle.write(json.dumps(stage_done) + "\n")
    assert completed_stages(app) == {3}
    assert not watch.held(2, "app-2")
    # The next stage is slowed in its turn, and held until a copy is on record.
    with open(slow_log, "a") as handle:
        handle.write("8 start 2 4 0 13 after 12.0 1030.000\n")
    assert watch.held(2, "app-2")
    assert not (marks / faults.SPECULATION_SEEN).exists()
    with open(app, "a") as handle:
        handle.write(_task_start(4, 0, 1, 1040, True) + "\n")
    assert not watch.held(2, "app-2")
    assert (marks / faults.SPECULATION_SEEN).exists()  # eager slowing ends
    assert speculation_recorded(event_logs(eventlog))
    assert not waiting_for_copy([], 2, set())


def test_write_then_skip_reader_takes_committed_batches_only(tmp_path):
    out = tmp_path / "out"
    for folder in ("batches/0", "batches/2", "attempts/1-abc", "skipped"):
        (out / folder).mkdir(parents=True)
    _write_part(out / "batches" / "0", "part-0.parquet", [_row(0), _row(1)])
    _write_part(out / "batches" / "2", "part-0.parquet", [_row(2)])
    (out / "batches" / "2" / "_SUCCESS").write_text("")
    # A killed run's attempt, and the file of a skipped replay: neither counts.
    _write_part(out / "attempts" / "1-abc", "part-0.parquet", [_row(2)])
    (out / "skipped" / "2-def").write_text("")
    batches = write_then_skip_batches(out, ["body"])
    assert [(b, [json.loads(r["body"])["n"] for r in rows]) for b, rows in batches] == [
        (0, [0, 1]),
        (2, [2]),
    ]
    assert skipped_batches(out) == 1
    assert write_then_skip_batches(tmp_path / "none", ["body"]) == []


def test_executors_get_credentials_and_faults_from_the_application_not_the_worker(tmp_path):
    env = {
        "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "PYTHONPATH": "/inject:/repo",
        faults.ENV: "{}", "PYSPARK_PYTHON": "/py", "PATH": "/bin", "HOME": "/root",
    }  # fmt: skip
    worker = worker_environment(env, Path("/spark"), "127.0.0.3")
    assert worker == {
        "PATH": "/bin", "HOME": "/root", "SPARK_HOME": "/spark",
        "SPARK_LOCAL_IP": "127.0.0.3", "SPARK_LOCAL_HOSTNAME": "127.0.0.3",
    }  # fmt: skip
    cluster = StandaloneCluster(tmp_path, workers=3)
    conf = session_conf(cluster, tmp_path / "events", env, "/py")
    assert conf["spark.executorEnv.AWS_ACCESS_KEY_ID"] == "a"
    assert conf["spark.executorEnv.PYTHONPATH"] == "/inject:/repo"
    assert conf[f"spark.executorEnv.{faults.ENV}"] == "{}"
    assert "spark.executorEnv.PATH" not in conf
    assert conf["spark.cores.max"] == "3" and conf["spark.speculation"] == "true"
    # A lone task (a trickle's batch) is copied too, before the shortest slowed sleep ends.
    threshold = conf["spark.speculation.task.duration.threshold"]
    assert threshold.endswith("s") and float(threshold[:-1]) < 10.0  # --slow-seconds 10 30
    assert conf["spark.eventLog.dir"] == (tmp_path / "events").as_uri()
    assert worker_host(0) == "127.0.0.2" and worker_host(1) == "127.0.0.3"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_the_cluster_starts_from_the_pip_package_and_leaves_nothing_when_its_user_fails(tmp_path):
    with pytest.raises(RuntimeError, match="the harness failed"):
        with StandaloneCluster(tmp_path, workers=1) as cluster:
            state = cluster.state()
            assert state is not None and alive_workers(state) == 1
            assert state["workers"][0]["host"] == "127.0.0.2"
            sessions = cluster.sessions | {p.pid for p in cluster._processes}
            assert _in_sessions(sessions)
            raise RuntimeError("the harness failed")
    assert _wait(lambda: not _in_sessions(sessions))
    assert cluster.state() is None


def _in_sessions(sessions: set[int]) -> list[int]:
    return [pid for pid, row in processes().items() if row.session in sessions]


def test_concurrent_conditional_puts_on_moto_create_once_as_on_s3(endpoint, monkeypatch):
    import threading

    from moto.s3.models import S3Backend
    from moto.s3.responses import S3Response

    # Undone after the test, like the slowed lookup below.
    monkeypatch.setattr(S3Response, "put_object", S3Response.put_object)
    serialise_moto_s3_puts()
    # Widen moto's gap between checking If-None-Match and storing the object: unserialised,
    # every one of the concurrent creates would pass the check.
    original = S3Backend.get_object

    def slow_get_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = original(self, *args, **kwargs)
        time.sleep(0.2)
        return found

    monkeypatch.setattr(S3Backend, "get_object", slow_get_object)
    clients = [_s3_client(endpoint) for _ in range(4)]
    clients[0].create_bucket(Bucket="chaos-concurrent-puts")
    created: list[int] = []
    start = threading.Barrier(len(clients))

    def create(index: int) -> None:
        start.wait()
        try:
            clients[index].put_object(
                Bucket="chaos-concurrent-puts", Key="entry", Body=b"x", IfNoneMatch="*"
            )
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed"
        else:
            created.append(index)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(created) == 1


def test_report_shows_the_cluster_figures_for_cluster_scenarios_only():
    args = argparse.Namespace(
        fault_kinds=["timeout"], fault_operations=["ReceiveMessage"], s3_fault_rate=None,
        fault_rate=0.2, messages=300, soak=0, rate=10.0, kills=2, worker_kills=1, kill_min=3.0,
        kill_max=40.0, visibility=10, receivers=[1], max_per_trigger=[50], stall_every=150,
        stall_factor=1.5, seed=1, workers=2, cluster_receivers=[3, 4], cluster_visibility=20,
        cluster_kill_window=[15.0, 75.0], executor_kills=1, slow_share=0.3,
        slow_seconds=[6.0, 15.0], slow_points=["before", "after"], slow_after_max=0.4,
        speculation_hold=120.0,
    )  # fmt: skip
    events = EventLogCounts(
        applications=3, speculative=5, concurrent=5, speculative_won=2, killed_by_other_attempt=4,
        executors_removed=2, tasks_lost_with_executor=1,
    )  # fmt: skip
    cluster = Outcome(
        "standard-cluster", cluster=True, drained=True, executor_kills=2,
        slowed=8, slowed_woken_by_copy=3, slowed_cut_short=1, events=events, skipped_batches=1,
        kills_held=1, held_seconds=14.2,
    )  # fmt: skip
    text = render([Outcome("standard", drained=True), cluster], args)
    assert "| standard-cluster | 2 | 8 | 3 | 1 | 5 | 5 | 2 | 4 | 2 | 1 | 1 | 3 | 1 (14 s) |" in text
    assert "| standard | 2 |" not in text
    assert "visibilityTimeout 20 s" in text and "after it at most 8 s" in text
    assert "Cluster:" not in render([Outcome("standard", drained=True)], args)
