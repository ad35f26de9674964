"""Test doubles shared by the unit tests: a scripted SQS client, and a journal store that runs
hooks around a real one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from spark_sqs.journal import JournalStore
from tests.unit.factories import QUEUE_URL, sqs_message

Hook = Callable[[str, str], None]


class HookedStore:
    """A real store, with ``before(method, key)`` and ``after(method, key)`` run around every
    call: a hook that raises stands for a failure before or after the effect (a lost
    response), one that blocks for a race, one that records for counting."""

    def __init__(
        self, inner: JournalStore, before: Hook | None = None, after: Hook | None = None
    ) -> None:
        self.inner = inner
        self.before = before
        self.after = after
        self.calls: list[tuple[str, str]] = []

    def _run(self, method: str, key: str, *args: Any) -> Any:
        self.calls.append((method, key))
        if self.before is not None:
            self.before(method, key)
        result = getattr(self.inner, method)(key, *args)
        if self.after is not None:
            self.after(method, key)
        return result

    def create(self, key: str, data: bytes) -> bool:
        return self._run("create", key, data)

    def put(self, key: str, data: bytes) -> None:
        self._run("put", key, data)

    def read(self, key: str) -> bytes | None:
        return self._run("read", key)

    def list(self, prefix: str) -> list[str]:
        return self._run("list", prefix)

    def delete(self, key: str) -> None:
        self._run("delete", key)

    def delete_many(self, keys: list[str]) -> None:
        for key in keys:
            self._run("delete", key)


def client_error(code: str, status: int, operation: str = "ReceiveMessage") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


class FakeSqs:
    """A queue of ``available`` messages, or scripted answers (a list of messages, or an
    exception to raise) for each ReceiveMessage call. Records every call."""

    def __init__(
        self,
        available: int = 0,
        script: list[list[dict[str, Any]] | Exception] | None = None,
        on_receive: Callable[[], None] | None = None,
        queue_urls: tuple[str, ...] = (QUEUE_URL,),
    ) -> None:
        self.queue = [sqs_message(n) for n in range(available)]
        self.script = list(script) if script is not None else None
        self.on_receive = on_receive
        self.receive_calls: list[dict[str, Any]] = []
        self.batch_calls: list[tuple[str, list[dict[str, Any]]]] = []
        # The queues batch calls may name (several queues), and the one each call named.
        self.queue_urls = set(queue_urls)
        self.batch_queues: list[str] = []

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self.receive_calls.append(kwargs)
        if self.on_receive is not None:
            self.on_receive()
        wanted = kwargs["MaxNumberOfMessages"]
        assert 1 <= wanted <= 10, f"SQS rejects MaxNumberOfMessages={wanted}"
        if self.script is not None:
            answer = self.script.pop(0) if self.script else []
            if isinstance(answer, Exception):
                raise answer
            assert len(answer) <= wanted, "script answers more than was asked for"
            messages = answer
        else:
            messages, self.queue = self.queue[:wanted], self.queue[wanted:]
        return {"Messages": messages} if messages else {}

    def _batch(self, action: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.batch_calls.append((action, Entries))
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert QueueUrl in self.queue_urls, QueueUrl
        self.batch_queues.append(QueueUrl)
        return self._batch("delete", Entries)

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        assert QueueUrl in self.queue_urls, QueueUrl
        self.batch_queues.append(QueueUrl)
        return self._batch("visibility", Entries)
