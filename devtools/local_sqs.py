"""An embedded SQS (moto) for the demo, the tests, the benchmarks and the fault harness. Runs on:
the driver process of those tools only; a development tool, not in the wheel (the source never
imports it). Needs ``moto[server]`` (in the lock files).

moto's SQS backend has no locking: two concurrent ReceiveMessage calls can hand out the same
message, and concurrent deletes race. Every backend method is serialised here with one lock.
A long poll must not hold that lock while it waits, so ``receive_message`` polls the backend
without waiting, under the lock, and waits between polls outside it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

_LOCK = threading.RLock()
_PATCHED = False


def serialise_moto_sqs() -> None:
    global _PATCHED
    if _PATCHED:
        return
    from moto.sqs.models import SQSBackend

    for name, member in list(vars(SQSBackend).items()):
        if name.startswith("_") or not callable(member) or name == "receive_message":
            continue
        setattr(SQSBackend, name, _locked(member))

    original_receive = SQSBackend.receive_message

    @functools.wraps(original_receive)
    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        RECEIVE_GATE.enter()
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        while True:
            with _LOCK:
                # moto unlocks a FIFO group only as it walks past each expired message, so the
                # group's first expired messages are skipped and later ones delivered first.
                # SQS redelivers a group in order: release every expired message up front.
                queue = self.get_queue(queue_name)
                queue.pending_messages.difference_update(
                    [m for m in queue.pending_messages if m.visible]
                )
                result = original_receive(
                    self, queue_name, count, 0, visibility_timeout, message_attribute_names
                )
            if result or time.monotonic() >= deadline:
                return result
            # Server-side long-poll granularity, not a test wait.
            time.sleep(0.05)

    SQSBackend.receive_message = receive_message
    _make_receipt_handles_strict()
    _authorise_like_sqs()
    _record_receive_requests()
    _speed_up_per_message_work()
    _PATCHED = True


def _make_receipt_handles_strict() -> None:
    """Make moto treat receipt handles as SQS does: only the newest handle of a
    message counts. Deleting with an older one "succeeds" on a standard queue but leaves the
    message in place, and fails on a FIFO queue; changing visibility with it fails."""
    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Queue, SQSBackend

    original_delete = Queue.delete_message

    def delete_message(self: Any, receipt_handle: str) -> None:
        for message in self._messages:
            if message.had_receipt_handle(receipt_handle):
                if message.receipt_handle != receipt_handle:
                    if self.fifo_queue:
                        raise ReceiptHandleIsInvalid()
                    return
                break
        original_delete(self, receipt_handle)

    original_change = SQSBackend.change_message_visibility

    def change_message_visibility(
        self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> None:
        queue = self.get_queue(queue_name)
        for message in queue._messages:
            if message.had_receipt_handle(receipt_handle):
                if message.receipt_handle != receipt_handle or message.visible:
                    raise ReceiptHandleIsInvalid()
                break
        original_change(self, queue_name, receipt_handle, visibility_timeout)

    Queue.delete_message = delete_message
    SQSBackend.change_message_visibility = _locked(change_message_visibility)


# SQS authorises each batch action with the permission of its single-message action (there is no
# sqs:DeleteMessageBatch permission); moto checks the batch action's own name.
_BATCH_PERMISSIONS = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "sqs:SendMessageBatch": "sqs:SendMessage",
}


def _authorise_like_sqs() -> None:
    """When moto enforces IAM (``moto.settings.INITIAL_NO_AUTH_ACTION_COUNT``), check what SQS
    checks: batch actions need the single-message permission, and ``GetQueueUrl`` is authorised
    on the named queue's ARN (moto checks it against ``*``, so a policy naming the queue fails)."""
    from moto.iam.access_control import IAMRequestBase
    from moto.sqs.exceptions import QueueDoesNotExist
    from moto.sqs.responses import SQSResponse

    original_init = IAMRequestBase.__init__

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._action = _BATCH_PERMISSIONS.get(self._action, self._action)

    original_resource = SQSResponse._determine_resource

    def determine_resource(self: Any) -> str:
        name = self._get_param("QueueName")
        if name and not self._get_param("QueueUrl"):
            try:
                return self.sqs_backend.get_queue(name).queue_arn
            except QueueDoesNotExist:
                return "*"
        return original_resource(self)

    IAMRequestBase.__init__ = init
    SQSResponse._determine_resource = determine_resource


def _locked(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return fn(*args, **kwargs)

    return wrapper


def _speed_up_per_message_work() -> None:
    """moto's SQS slows down with queue depth: every message check reads the
    clock through datetime arithmetic, and every received message recomputes all queue
    attributes (which scans every message) to learn the retention period. Same semantics,
    without the quadratic cost."""
    import moto.sqs.models as models

    def unix_time(dt: Any = None) -> float:
        if dt is not None:
            return _original_unix_time(dt)
        return time.time()

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    _original_unix_time = models.unix_time
    models.unix_time = unix_time
    models.unix_time_millis = unix_time_millis

    def is_message_valid_based_on_retention_period(
        self: Any, queue_name: str, message: Any
    ) -> bool:
        retention = int(self.get_queue(queue_name).message_retention_period)
        return retention + message.sent_timestamp / 1000 > time.time()

    models.SQSBackend.is_message_valid_based_on_retention_period = _locked(
        is_message_valid_based_on_retention_period
    )


class ReceiveRequests:
    """What ``ReceiveMessage`` calls reached the server (moto ignores some parameters, so tests
    check them here), and a fault switch: ``fail_next(n)`` answers the next ``n`` calls with
    HTTP 500 after moto has handed out the messages, as when a response is lost on the way."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self._fail = 0

    def fail_next(self, count: int) -> None:
        with self._guard:
            self._fail = count

    def record(self, params: dict[str, Any]) -> bool:
        """Record a call; True if it must fail."""
        with self._guard:
            self.calls.append(params)
            if self._fail > 0:
                self._fail -= 1
                return True
            return False

    def for_queue(self, queue_url: str) -> list[dict[str, Any]]:
        name = queue_url.rstrip("/").rsplit("/", 1)[-1]
        with self._guard:
            return [c for c in self.calls if c.get("QueueUrl", "").endswith("/" + name)]


RECEIVE_REQUESTS = ReceiveRequests()


class InjectedFault(Exception):
    """Raised inside moto to make it answer HTTP 500."""


def _record_receive_requests() -> None:
    from moto.sqs.responses import SQSResponse

    original = SQSResponse.receive_message

    def receive_message(self: Any) -> Any:
        params = {
            "QueueUrl": self._get_param("QueueUrl"),
            "ReceiveRequestAttemptId": self._get_param("ReceiveRequestAttemptId"),
            "MaxNumberOfMessages": self._get_param("MaxNumberOfMessages"),
        }
        fail = RECEIVE_REQUESTS.record(params)
        result = original(self)
        if fail:
            raise InjectedFault("fault injected by the test server")
        return result

    SQSResponse.receive_message = receive_message


class MotoServer:
    """A threaded moto server on a free loopback port."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        serialise_moto_sqs()
        # Loopback only: nothing outside this machine can reach the embedded server.
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.stop()


class ReceiveGate:
    """Server-side fault injection: let ``allowed`` ReceiveMessage calls through, then hold
    every further call inside moto until ``release()``. Reaches every process (executors too),
    because it acts in the server."""

    def __init__(self) -> None:
        self._allowed: int | None = None
        self._calls = 0
        self._open = threading.Event()
        self._open.set()
        self.blocked = threading.Event()
        self._guard = threading.Lock()

    def hold_after(self, allowed: int) -> None:
        with self._guard:
            self._allowed = allowed
            self._calls = 0
            self.blocked.clear()
            self._open.clear()

    def release(self) -> None:
        with self._guard:
            self._allowed = None
        self._open.set()

    def enter(self) -> None:
        with self._guard:
            if self._allowed is None:
                return
            self._calls += 1
            if self._calls <= self._allowed:
                return
            self.blocked.set()
        self._open.wait(300)


RECEIVE_GATE = ReceiveGate()
