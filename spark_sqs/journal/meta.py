"""The journal's identity and ownership: which queues it belongs to, which format wrote it, and
the start-up probe of the store. Runs on: driver (and the ``spark-sqs`` command).

Keys::

    _meta.json            the queue the journal belongs to, and its identity (every offset
                          carries it), never rewritten
    format/<F>            empty: a version of journal format F took over a journal of an
                          earlier format in place
    queues/<digest>.json  a queue added to the journal's family after it was created
    _probe/<uuid>         the start-up probe of create-if-absent (removed)
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from typing import Any

from ..errors import JournalError, UnsafeStoreError
from .stores import JournalRoot, Record

logger = logging.getLogger(__name__)

# 3: _meta.json holds the journal's identity, which offsets carry. A journal of a higher
# format is refused (Meta.read).
FORMAT_VERSION = 3
META = "_meta.json"
FORMAT = "format"
QUEUES = "queues"
PROBE = "_probe"


class Meta(Record):
    def __init__(self, journal: JournalRoot) -> None:
        super().__init__(journal)
        self._meta: dict[str, Any] | None = None

    def check_owner(self, queue_url: str, *more: str) -> str:
        """Bind the journal to its queues; refuse a journal that belongs to others, or that a
        newer version of spark-sqs wrote.

        With several queues (driver/queues.py) queues may be added or removed between runs: the
        journal is refused only when none of the queues it was used with is named now. Returns
        the journal's first queue, the queue of plans that record none per receiver."""
        queues = (queue_url, *more)
        doc: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "queueUrl": queue_url,
            # The journal's identity (driver/offsets.py): offsets carry it, so a checkpoint
            # is never run against another journal.
            "journalId": uuid.uuid4().hex[:16],
        }
        if more:
            doc["queueUrls"] = list(queues)
        if self.store.create(META, json.dumps(doc).encode()):
            self._meta = doc
            return queue_url
        meta = self.read()
        for fmt in range(int(meta.get("format", 1)) + 1, FORMAT_VERSION + 1):
            # Taken over by this version: a later downgrade finds it out (``read``).
            self.store.create(f"{FORMAT}/{fmt}", b"")
        owner = meta.get("queueUrl")
        known = {owner, *meta.get("queueUrls", ()), *self.added_queues()}
        if not known.intersection(queues):
            shown = owner if len(known) == 1 else ", ".join(sorted(q for q in known if q))
            raise JournalError(
                f"journalLocation {self.location} belongs to queue {shown}, not "
                f"{', '.join(queues)}. Fix: give each query its own 'journalLocation'"
            )
        for added in queues:
            if added not in known:
                digest = hashlib.sha256(added.encode()).hexdigest()[:16]
                self.store.create(
                    f"{QUEUES}/{digest}.json", json.dumps({"queueUrl": added}).encode()
                )
        return owner or queue_url

    def read(self) -> dict[str, Any]:
        """The journal's ``_meta.json`` (empty for a journal not yet bound to a queue); a journal
        of a format newer than this version reads is refused."""
        if self._meta is None:
            data = self.store.read(META)
            if data is None:
                return {}
            doc = json.loads(data)
            doc.setdefault("journalId", _legacy_identity(data))
            fmt = int(doc.get("format", 1))
            # _meta.json is never rewritten (a journal's identity may be derived from it): a
            # version that takes over a journal of an earlier format creates format/<F> for
            # each format F above it up to its own, read here by key.
            while self.store.read(f"{FORMAT}/{fmt + 1}") is not None:
                fmt += 1
            if fmt > FORMAT_VERSION:
                raise JournalError(
                    f"journalLocation {self.location} was written by a newer version of "
                    f"spark-sqs (journal format {fmt}; this version reads formats up to "
                    f"{FORMAT_VERSION}). Fix: install the newer spark-sqs on the driver and "
                    "every executor, or use a new journalLocation with a new checkpointLocation"
                )
            self._meta = doc
        return self._meta

    def queue_url(self) -> str | None:
        """The queue ``_meta.json`` names, as stored (no format check); None for a location
        that holds no journal yet."""
        data = self.store.read(META)
        return None if data is None else json.loads(data)["queueUrl"]

    def identity(self) -> str | None:
        """The journal's identity, which offsets carry (driver/offsets.py); None for a location
        that holds no journal yet."""
        return self.read().get("journalId")

    def added_queues(self) -> list[str]:
        """Queues added to the journal's family after it was created."""
        out = []
        for key in self.store.list(QUEUES):
            data = self.store.read(key) if key.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data)["queueUrl"])
        return out

    def probe_writable(self) -> None:
        """At query start, on the store itself: a create must succeed, and a second create of
        the same key must fail. A store that answers the second with success (an S3-compatible
        store that accepts ``If-None-Match`` and ignores it) would let two attempts of one task
        both believe they journaled a receiver's messages: it is refused."""
        key = f"{PROBE}/{uuid.uuid4().hex}"
        try:
            self.store.create(key, b"first")
            again = self.store.create(key, b"second")
            self.store.delete(key)
        except UnsafeStoreError:
            raise
        except (OSError, JournalError) as exc:
            raise JournalError(
                f"journalLocation {self.location} is not writable ({exc}). Fix: point "
                "'journalLocation' at a directory this cluster can create and write files in"
            ) from None
        if again:
            raise UnsafeStoreError(
                f"journalLocation {self.location} does not honour create-if-absent: a second "
                "create of one key succeeded. Exactly-once needs an atomic create-if-absent on "
                "the store itself (S3 PutObject with If-None-Match: *, a link() of a local "
                "file). Known to have it: AWS S3 and local POSIX file systems (tested); "
                "S3-compatible stores vary by product and version, and some accept the header "
                "and ignore it. Fix: use an AWS S3 bucket (s3://bucket/prefix), a local path, "
                "or a store whose conditional writes are documented and tested "
                "(docs/operations.md says how to check one)"
            )
        try:
            # Probes of drivers that died between the create and the delete. A concurrent
            # probe removed here has already done its creates, which is all it tests.
            leftover = self.store.list(PROBE)
            if leftover:
                self.store.delete_many(leftover)
        except (OSError, JournalError):
            logger.debug("journal %s: could not remove old probe objects", self.location)


def _legacy_identity(meta: bytes) -> str:
    """The identity of a journal created before journals had one: derived from its
    ``_meta.json``, which is written once and never changed (a copy of the journal keeps it)."""
    return "m" + hashlib.sha256(meta).hexdigest()[:15]
