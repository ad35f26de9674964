"""Aliases: batches of another journal that this one absorbed. Runs on: driver.

Keys::

    aliases/<journalId>-<N>.json     another journal's batch N, logged by Spark while this
                                     checkpoint ran on that journal, stands for the batch it
                                     names here (driver/offsets.py ``CheckpointGuard.absorbs``)
"""

from __future__ import annotations

import json

from .stores import Record

PREFIX = "aliases"


def _key(journal_id: str, batch: int) -> str:
    return f"{PREFIX}/{journal_id}-{batch:012d}.json"


class Aliases(Record):
    def write(self, journal_id: str, batch: int, target: int) -> None:
        """Record that batch ``batch`` of journal ``journal_id``, logged by Spark while this
        checkpoint ran on that journal and was refused, stands for batch ``target`` of this
        one (driver/offsets.py, ``CheckpointGuard.absorbs``)."""
        body = json.dumps({"batch": target}).encode()
        self.store.create(_key(journal_id, batch), body)

    def read(self, journal_id: str, batch: int) -> int | None:
        data = self.store.read(_key(journal_id, batch))
        return None if data is None else int(json.loads(data)["batch"])

    def collect(self, acked: int) -> None:
        """Remove aliases Spark can no longer hand back: once the batch after the one an alias
        stands for is acknowledged, its start (the aliased offset) is behind the checkpoint."""
        for key in self.store.list(PREFIX):
            data = self.store.read(key)
            if data is not None and int(json.loads(data)["batch"]) < acked:
                self.store.delete(key)
