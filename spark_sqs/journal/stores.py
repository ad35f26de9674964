"""Where the journal's bytes live: local POSIX files or S3. Runs on: driver and executors.

Every store offers the same five operations on keys (``/``-separated paths relative to the
journal's root). The protocol's safety rests on one of them: ``create`` is create-if-absent *on
the store itself* (``link()`` locally, a conditional ``PutObject`` with ``If-None-Match: *`` on
S3), so two attempts that race for one key never both believe they wrote it. ``put`` overwrites;
the journal writes nothing with it any more (an earlier version wrote its metrics files so).
Only stores with such a primitive and a test are supported; any other scheme is refused when
the DataFrame is created.

A write whose outcome is unknown (timeout, lost response, 5xx after retries) raises
``JournalOutcomeUnknown``: the caller must assume the write may have happened.

Two more operations bound the memory a journal object costs (journal/entries.py uses them when
a store has them, and ``read``/``create`` otherwise): ``create_stream`` creates a key from a
writer callback (a local file is written as it is produced; an S3 body is sent from the one
buffer it was written to, never copied), and ``open_random`` opens an object for random access
(a memory map locally; ranged GETs on S3), so that a reader that needs a few columns of an
Arrow file reads those and not the bodies.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar, runtime_checkable
from urllib.parse import parse_qs, urlparse

import pyarrow as pa

from ..errors import InvalidOptionError, JournalError, JournalOutcomeUnknown
from ..per_process import PerProcess

if TYPE_CHECKING:
    from collections.abc import Callable

    import boto3.session
    from botocore.paginate import Paginator

    from ..connection import Connection

logger = logging.getLogger(__name__)

_TMP = ".tmp-"
# S3 random access (``S3Store.open_random``): the first GET reads this much of the object's end,
# which holds an Arrow file's footer and its last columns (receipt handles, queue URLs), and is
# the whole object when it is smaller; a later read fetches at least READ_AHEAD bytes.
TAIL_BYTES = 1 << 20
READ_AHEAD = 256 << 10
# Databricks FUSE mounts: no documented link()/O_EXCL semantics across nodes.
_FUSE_PREFIXES = ("/dbfs/", "dbfs:/", "/Volumes/", "/Workspace/")
_S3_PARAMETERS = ("endpoint_override", "scheme", "region")
# S3Store.delete_many: removals of up to this many keys go as single DeleteObject requests (free
# on S3), sent from at most DELETE_THREADS threads; larger ones as DeleteObjects (billed as a PUT).
SINGLE_DELETES_UP_TO = 16
DELETE_THREADS = 8


@runtime_checkable
class JournalStore(Protocol):
    """The store interface every record kind is written against (keys relative to the
    journal root); the simulator's in-memory store (sim/store.py) implements it too."""

    def create(self, key: str, data: bytes) -> bool:
        """Create ``key`` if absent, atomically; True if this call created it."""

    def put(self, key: str, data: bytes) -> None:
        """Create or overwrite ``key`` (files no protocol decision depends on; unused by the
        journal's records now)."""

    def read(self, key: str) -> bytes | None:
        """The bytes of ``key``, or None if it does not exist."""

    def list(self, prefix: str) -> list[str]:
        """Sorted keys under the directory ``prefix``, recursively."""

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is fine."""

    def delete_many(self, keys: list[str]) -> None:
        """Remove ``keys`` at the store's lowest price (``S3Store.delete_many``: single deletes
        for a few keys, one request per 1,000 for more); missing keys are fine, and every key
        is tried before an error is raised."""


class JournalRoot(Protocol):
    """What a record kind needs of the journal (``entries.Journal``): its store, opened
    lazily, and its location (named in errors)."""

    @property
    def store(self) -> JournalStore: ...

    @property
    def location(self) -> str: ...


class Record:
    """Base of the record kinds (journal/plans.py, entries.py, ...): each reads and writes its
    own keys through the journal's store, and builds those keys itself."""

    def __init__(self, journal: JournalRoot) -> None:
        self._journal = journal

    @property
    def store(self) -> JournalStore:
        return self._journal.store

    @property
    def location(self) -> str:
        return self._journal.location


def ipc_bytes(table: pa.Table) -> bytes:
    """A small table (drop sets, dedupe records, window segments) as an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def corrupt(where: str, exc: Exception) -> JournalError:
    return JournalError(
        f"Journal entry {where} is corrupt ({exc}). It was written by an interrupted "
        "writer on a store without atomic writes. Fix: move it away; its messages "
        "reappear in SQS after their visibility timeout"
    )


def ipc_table(data: bytes, where: str) -> pa.Table:
    """The table of an Arrow IPC file's bytes (``where``: its key, for the error)."""
    try:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise corrupt(where, exc) from None


class ObjectVanished(JournalError):
    """An object opened for random access was removed while it was being read (a batch
    removed meanwhile): for the reader, as if it had not existed."""


def check_location(location: str) -> None:
    """Refuse, when the DataFrame is created, a ``journalLocation`` without a tested
    create-if-absent primitive."""
    if location.startswith(_FUSE_PREFIXES):
        raise InvalidOptionError.for_option(
            "journalLocation",
            location,
            "Databricks DBFS and Unity Catalog volume paths are FUSE mounts without the atomic "
            "create-if-absent the journal relies on across nodes",
            "give the s3:// location behind the volume or mount instead "
            "(e.g. s3://bucket/prefix/journal)",
        )
    scheme = urlparse(location).scheme
    if scheme in ("", "file", "s3", "s3a") or re.match(r"^[A-Za-z]:[\\/]", location):
        return
    raise InvalidOptionError.for_option(
        "journalLocation",
        location,
        f"the '{scheme}' scheme has no tested create-if-absent write, which exactly-once needs",
        "use a local path (single machine, or a POSIX file system every node shares) or an "
        "s3://bucket/prefix location",
    )


def open_store(
    location: str, connection: Connection | None = None, *, kms_key_id: str | None = None
) -> JournalStore:
    """The store for ``location`` (already checked by ``check_location``); an S3 one reaches
    S3 with ``connection``'s credentials and region (the default chain without one) and
    encrypts with ``kms_key_id``."""
    parsed = urlparse(location)
    if parsed.scheme in ("s3", "s3a"):
        return S3Store.from_location(location, connection, kms_key_id=kms_key_id)
    path = parsed.path if parsed.scheme == "file" else location
    return LocalStore(os.path.abspath(os.path.expanduser(path)))


# -- local files ---------------------------------------------------------------------------------


class LocalStore:
    """POSIX files: temp file, fsync, then ``link()`` (fails if the target exists) for
    ``create``. Files are 0600 and directories 0700: entries hold receipt handles."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def create(self, key: str, data: bytes) -> bool:
        return self.create_stream(key, lambda out: out.write(data))

    def create_stream(self, key: str, fill: Callable[[BinaryIO], object]) -> bool:
        """``create`` of what ``fill`` writes, streamed to the temp file as it is written."""
        path = self._path(key)
        tmp = self._write_tmp(path, fill)
        try:
            # link() fails if the target exists: the first writer wins, atomically.
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise JournalError(f"Cannot write journal file {path}: {exc}") from None
        finally:
            _unlink_quietly(tmp)
        try:
            _fsync_dir(os.path.dirname(path))
        except OSError as exc:
            raise JournalOutcomeUnknown(
                f"Journal file {path} was linked but its directory could not be synced: {exc}"
            ) from None
        return True

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, lambda out: out.write(data))
        try:
            os.replace(tmp, path)
        except OSError as exc:
            _unlink_quietly(tmp)
            raise JournalError(f"Cannot write journal file {path}: {exc}") from None

    def read(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise JournalError(f"Cannot read journal file {path}: {exc}") from None

    def open_random(self, key: str) -> pa.NativeFile | None:
        """The file, memory-mapped: only the pages a reader touches are read. Journal files
        are never modified once linked into place, and a removal leaves a mapping valid."""
        path = self._path(key)
        try:
            return pa.memory_map(path, "r")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise JournalError(f"Cannot read journal file {path}: {exc}") from None

    def list(self, prefix: str) -> list[str]:
        top = self._path(prefix.rstrip("/"))
        out = []
        try:
            for directory, _, files in os.walk(top):
                rel = os.path.relpath(directory, self.root).replace(os.sep, "/")
                out.extend(f"{rel}/{name}" for name in files if _TMP not in name)
        except OSError as exc:
            raise JournalError(f"Cannot list journal directory {top}: {exc}") from None
        return sorted(out)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalError(f"Cannot remove journal file {path}: {exc}") from None
        # Empty directories of removed batches would otherwise pile up.
        directory = os.path.dirname(path)
        while directory != self.root and directory.startswith(self.root):
            try:
                os.rmdir(directory)
            except OSError:
                break
            directory = os.path.dirname(directory)

    def delete_many(self, keys: list[str]) -> None:
        errors = []
        for key in keys:
            try:
                self.delete(key)
            except JournalError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _write_tmp(self, path: str, fill: Callable[[BinaryIO], object]) -> str:
        tmp = f"{path}{_TMP}{uuid.uuid4().hex}"
        try:
            _make_private_dirs(os.path.dirname(path))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            _unlink_quietly(tmp)
            raise JournalError(f"Cannot write journal file {path}: {exc}") from None
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return tmp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_private_dirs(directory: str) -> None:
    """Create missing directories readable by the owner only (makedirs' mode applies to the
    last one alone, and is subject to the umask)."""
    missing = []
    current = directory
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)


# -- S3 ------------------------------------------------------------------------------------------

# S3 answers a conditional write that lost the race with 412; 409 means a concurrent write to
# the same key was still in progress (retry).
_EXISTS = {"PreconditionFailed", "412"}
_CONFLICT = {"ConditionalRequestConflict", "409"}
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3Client(Protocol):
    """The calls the journal and the extended-payload code make on a boto3 S3 client (boto3
    builds its class at run time); keyword arguments and parsed responses as in the S3 API."""

    def put_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_object(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_objects(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


_T = TypeVar("_T")


class S3Store:
    """S3 through boto3, because pyarrow.fs cannot send ``If-None-Match: *``.

    One request per operation (``list`` pages by 1,000 keys; ``delete_many`` sends single
    deletes for a few keys, ``DeleteObjects`` for more). Objects are written with the
    bucket's default encryption, or SSE-KMS with ``journalSseKmsKeyId``.

    Reads, listings and removals repeat safely: one that still fails transiently after
    botocore's retries is tried again, ``rounds`` times in all, before it reaches the caller. A
    failed read while planning fails the query (Spark does not retry ``planInputPartitions``),
    and five failed attempts in a row are rare but not rare enough over a long-running stream.
    Writes are not repeated here: their callers handle an unknown outcome.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        client_factory: Callable[[], S3Client],
        kms_key_id: str | None = None,
        rounds: int = 3,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client_factory = client_factory
        self._client: S3Client | None = None
        self._kms = kms_key_id
        self._rounds = max(1, rounds)
        self._sleep = sleep

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @classmethod
    def from_location(
        cls, location: str, connection: Connection | None, *, kms_key_id: str | None = None
    ) -> S3Store:
        parsed = urlparse(location)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        unknown = sorted(set(query) - set(_S3_PARAMETERS))
        if unknown:
            raise JournalError(
                f"Cannot open journalLocation {location!r}: unsupported parameters {unknown}. "
                f"Fix: use only {', '.join(_S3_PARAMETERS)}"
            )
        endpoint = query.get("endpoint_override")
        if endpoint and "://" not in endpoint:
            endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
        region = query.get("region") or (connection.region if connection else None)
        return cls(
            parsed.netloc,
            parsed.path,
            client_factory=_S3ClientFactory(connection, endpoint, region),
            kms_key_id=kms_key_id,
        )

    @property
    def client(self) -> S3Client:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _encryption(self) -> dict[str, str]:
        if self._kms:
            return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self._kms}
        return {}

    def create(self, key: str, data: bytes) -> bool:
        return self._create(key, lambda: data)

    def create_stream(self, key: str, fill: Callable[[BinaryIO], object]) -> bool:
        """``create`` of what ``fill`` writes: S3 needs the whole body, so it is written to one
        Arrow buffer and sent from it (botocore reads a file-like body in chunks), never copied
        into a ``bytes`` object."""
        # The system allocator: its large reallocations move pages instead of copying them,
        # and keep nothing (Arrow's default pool keeps what the buffer's growth freed: about
        # 2.5 times the body).
        sink = pa.BufferOutputStream(memory_pool=pa.system_memory_pool())
        fill(sink)  # type: ignore[arg-type]
        body = sink.getvalue()
        return self._create(key, lambda: pa.BufferReader(body))

    def _create(self, key: str, body: Callable[[], Any]) -> bool:
        for _ in range(5):
            try:
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self._key(key),
                    Body=body(),
                    IfNoneMatch="*",
                    **self._encryption(),
                )
                return True
            except Exception as exc:
                code = _code(exc)
                if code in _EXISTS:
                    # Also what a retried PUT whose first response was lost sees: callers
                    # compare with what is stored rather than assume another writer.
                    return False
                if code in _CONFLICT:
                    continue
                raise self._error("write", key, exc) from None
        raise JournalOutcomeUnknown(
            f"Journal object s3://{self.bucket}/{self._key(key)}: concurrent writes kept "
            "conflicting"
        )

    def put(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, **self._encryption()
            )
        except Exception as exc:
            raise self._error("write", key, exc) from None

    def _again(self, verb: str, key: str, call: Callable[[], _T]) -> _T:
        """``call`` (idempotent), repeated after a transient failure; a permanent one (access
        denied, no such bucket) is raised at once."""
        for round_ in range(self._rounds):
            try:
                return call()
            except Exception as exc:
                error = self._error(verb, key, exc)
                if not error.retriable or round_ == self._rounds - 1:
                    raise error from None
                logger.warning("%s; trying again (round %d of %d)", error, round_ + 2, self._rounds)
                self._sleep(2.0**round_)
        raise AssertionError("unreachable")

    def read(self, key: str) -> bytes | None:
        def get() -> bytes | None:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except Exception as exc:
                if _code(exc) in _MISSING:
                    return None
                raise
            # The body streams after the answer's headers: botocore does not retry a failure
            # here, this loop does.
            return response["Body"].read()

        return self._again("read", key, get)

    def open_random(self, key: str) -> pa.NativeFile | None:
        """The object for random access by ranged GETs (``RangedObject``): one GET of its last
        ``TAIL_BYTES`` (the whole object when smaller), then a GET per range read outside what
        was fetched. None if the object does not exist."""
        first = self._get_range(key, f"bytes=-{TAIL_BYTES}")
        if first is None:
            return None
        data, size = first

        def fetch(start: int, end: int) -> bytes:
            found = self._get_range(key, f"bytes={start}-{end - 1}")
            if found is None:
                raise ObjectVanished(f"s3://{self.bucket}/{self._key(key)} was removed")
            return found[0]

        return pa.PythonFile(RangedObject(fetch, size, data), mode="r")

    def _get_range(self, key: str, byte_range: str) -> tuple[bytes, int] | None:
        """(bytes of ``byte_range``, size of the object), or None if it does not exist."""

        def get() -> tuple[bytes, int] | None:
            try:
                response = self.client.get_object(
                    Bucket=self.bucket, Key=self._key(key), Range=byte_range
                )
            except Exception as exc:
                code = _code(exc)
                if code in _MISSING:
                    return None
                if code in ("InvalidRange", "416"):
                    # An empty object has no byte to name.
                    return b"", 0
                raise
            data = response["Body"].read()
            # "bytes <first>-<last>/<size>"; absent when S3 answered with the whole object.
            total = str(response.get("ContentRange") or "").rpartition("/")[2]
            return data, int(total) if total.isdigit() else len(data)

        return self._again("read", key, get)

    def list(self, prefix: str) -> list[str]:
        base = self._key(prefix.rstrip("/")) + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0

        def listing() -> list[str]:
            out: list[str] = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            ):
                out.extend(item["Key"][strip:] for item in page.get("Contents", ()))
            return sorted(out)

        return self._again("list", prefix, listing)

    def delete(self, key: str) -> None:
        def remove() -> None:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
            except Exception as exc:
                if _code(exc) not in _MISSING:
                    raise

        self._again("remove", key, remove)

    def delete_many(self, keys: list[str]) -> None:
        """Remove ``keys`` at the lowest price: S3 bills a ``DeleteObject`` nothing and a
        ``DeleteObjects`` like a PUT. So up to ``SINGLE_DELETES_UP_TO`` keys (a settled batch's
        files and reports: a handful per receiver) go as single deletes, sent at once from at
        most ``DELETE_THREADS`` threads; more (the sweep's findings) as ``DeleteObjects`` of
        1,000 keys a request. Missing keys are fine either way; every key is tried before an
        error is raised."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        if len(keys) <= SINGLE_DELETES_UP_TO:
            self._delete_each(keys)
            return
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            response = self._again(
                "remove",
                chunk[0],
                lambda chunk=chunk: self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._key(k)} for k in chunk], "Quiet": True},
                ),
            )
            failed = [e for e in response.get("Errors", []) if e.get("Code") not in _MISSING]
            if failed:
                raise JournalError(
                    f"Cannot remove {len(failed)} journal objects under s3://{self.bucket}/"
                    f"{self.prefix}: {sorted({e.get('Code') for e in failed})}",
                    retriable=True,
                )

    def _delete_each(self, keys: list[str]) -> None:
        if len(keys) == 1:
            self.delete(keys[0])
            return
        self.client  # noqa: B018 - made once, before the threads share it (boto3 clients are)
        with ThreadPoolExecutor(
            max_workers=min(len(keys), DELETE_THREADS), thread_name_prefix="spark-sqs-delete"
        ) as pool:
            futures = [pool.submit(self.delete, key) for key in keys]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    def _error(self, verb: str, key: str, exc: BaseException) -> JournalError:
        from botocore.exceptions import ClientError

        where = f"s3://{self.bucket}/{self._key(key)}"
        code = _code(exc)
        if isinstance(exc, ClientError) and code in ("AccessDenied", "NoSuchBucket", "403"):
            return JournalError(
                f"Cannot {verb} journal object {where}: {code}. Fix: create the bucket and "
                "allow s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket on the "
                "'journalLocation' prefix to the driver's and executors' credentials"
            )
        message = f"Cannot {verb} journal object {where}: {code or type(exc).__name__}"
        if verb == "write":
            # Throttling, 5xx or a network error after botocore's retries: the PUT may have
            # been applied.
            return JournalOutcomeUnknown(message)
        return JournalError(message, retriable=True)


class RangedObject(io.RawIOBase):
    """A read-only, seekable file over an object read by ranges: ``tail`` is the object's last
    bytes, already fetched; ``fetch(start, end)`` returns bytes ``[start, end)``. A read outside
    what was fetched fetches at least ``READ_AHEAD`` bytes from there, so the small reads of an
    Arrow file's neighbouring buffers cost one request; fetched ranges are kept while the file
    is open (a reader of a few columns fetches little). ``requests`` and ``fetched`` count the
    GETs and their bytes (the first one included)."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, tail: bytes) -> None:
        super().__init__()
        self._fetch = fetch
        self._size = size
        self._pos = 0
        # (start, bytes) of each fetched range.
        self._ranges: list[tuple[int, bytes]] = [(size - len(tail), tail)]
        self.requests = 1
        self.fetched = len(tail)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        start = self._pos
        end = self._size if n is None or n < 0 else min(self._size, start + n)
        if end <= start:
            return b""
        out = self._cached(start, end)
        if out is None:
            stop = min(self._size, max(end, start + READ_AHEAD))
            data = self._fetch(start, stop)
            self.requests += 1
            self.fetched += len(data)
            self._ranges.append((start, data))
            out = data[: end - start]
        self._pos = start + len(out)
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _cached(self, start: int, end: int) -> bytes | None:
        for first, data in self._ranges:
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        return None


# One S3 client per (connection, endpoint, region) per process. Each task builds its own
# ``Journal`` (it travels pickled in the partition); a client of its own would cost every
# receiver task a botocore session and S3's service model read again: 50-100 ms of CPU, as
# much as receiving 200-300 messages.
_CLIENTS: PerProcess[tuple[Connection | None, str | None, str | None], S3Client] = PerProcess()


class _S3ClientFactory:
    """The S3 client of each process (clients do not pickle), built once per process."""

    def __init__(
        self, connection: Connection | None, endpoint: str | None, region: str | None
    ) -> None:
        self.connection = connection
        self.endpoint = endpoint
        self.region = region

    def __call__(self) -> S3Client:
        return _CLIENTS.get_or_build((self.connection, self.endpoint, self.region), self._build)

    def _build(self) -> S3Client:
        import boto3
        from botocore.config import Config

        from ..sqs.client import USER_AGENT, make_session

        config = Config(
            region_name=self.region,
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=32,
            user_agent=USER_AGENT,
            user_agent_extra="spark-sqs",
        )
        session = make_session(self.connection) if self.connection is not None else boto3.Session()
        _skip_timestamps(session)
        return session.client("s3", endpoint_url=self.endpoint, config=config)


def _keep_raw(value: str) -> str:
    return value


def _skip_timestamps(session: boto3.session.Session) -> None:
    """The journal reads keys and bodies, never a timestamp; botocore parses every
    ``LastModified`` of a LIST page with dateutil, about three quarters of the CPU a LIST of
    500 keys costs (measured: 40-50 ms a page; the driver lists each batch's entries, markers
    and reports every batch). Its clients keep timestamps as the strings S3 sent.
    ``set_parser_defaults`` is botocore's documented hook; the botocore session behind a
    boto3 session is ``_session``. Only this session (the journal's own) is changed."""
    core = getattr(session, "_session", None)
    if core is None:
        return
    from botocore.parsers import ResponseParserFactory

    factory = ResponseParserFactory()
    factory.set_parser_defaults(timestamp_parser=_keep_raw)
    core.register_component("response_parser_factory", factory)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        if code:
            return code
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(status or "")
    return ""
