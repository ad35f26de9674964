"""The durable record of what each receiver got. Runs on: driver and executors.

Layout under ``journalLocation``::

    _meta.json                       queue the journal belongs to
    _state.json                      highest batch planned, highest batch acknowledged
    batches/<batch>/<receiver>.arrow messages one receiver got for one batch (Arrow IPC file)

A receiver writes its entry before ``read()`` yields a row; a replay of the batch reads the entry
back. Entries are written whole or not at all (local: temp file, fsync, rename; object stores:
a single PUT), and an existing entry is never overwritten, so a retried task sees exactly what the
first attempt journaled. The driver removes a batch's entries once its messages are deleted.

Entries hold receipt handles, so local files are created readable by the owner only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from .errors import JournalError
from .options import SqsOptions
from .schema import RECEIPT_HANDLE as RECEIPT

logger = logging.getLogger(__name__)

_ENTRY = re.compile(r"^(\d{5})\.arrow$")
_BATCH = re.compile(r"^\d{12}$")
FORMAT_VERSION = 1


# Schema metadata key of an entry: wall-clock time (epoch seconds) at which its receiver started
# receiving, so the driver knows when the entry's receipt handles expire at the latest.
RECEIVED_AT = b"spark_sqs.receivedAt"
EXPIRES_AT = b"spark_sqs.expiresAt"
# With deleteAfterJournal: JSON list of the entry's message ids that still await deletion.
PENDING_DELETE = b"spark_sqs.pendingDelete"
# Number of redeliveries the receiver dropped (for the batch's counters).
DROPPED = b"spark_sqs.dropped"
_PART = re.compile(r"^(\d{5})\.part-(\d{5})\.arrow$")


@dataclass(frozen=True)
class EntryReceipts:
    batch: int
    receiver: int
    received_at: float
    message_ids: tuple[str, ...]
    receipt_handles: tuple[str, ...] = field(repr=False)
    rows: int = 0  # rows in the entry (with deleteAfterJournal, also those already deleted)
    dropped: int = 0  # redeliveries the receiver dropped
    # The entry's schema metadata (lag, extended payload pointers: see lag.py, envelopes.py).
    metadata: dict[bytes, bytes] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class JournalState:
    planned_batch: int = 0
    acked_batch: int = 0
    # The offset first handed to Spark as initialOffset. Spark asks for it again when it
    # restarts a query whose first batch never committed, and must get the same answer.
    initial_batch: int | None = None


class Journal:
    """Reads and writes journal entries; cheap to pickle (the filesystem is opened lazily)."""

    def __init__(self, location: str, options: SqsOptions | None = None) -> None:
        self.location = location
        self._options = options
        self._fs: pafs.FileSystem | None = None
        self._root = ""
        self._local = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"] = None
        return state

    # -- filesystem ---------------------------------------------------------------------------

    def _filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs, self._root, self._local = _open(self.location, self._options)
        return self._fs

    def _path(self, *parts: str) -> str:
        self._filesystem()
        return "/".join([self._root.rstrip("/"), *parts]) if self._root else "/".join(parts)

    @staticmethod
    def batch_dir(batch: int) -> str:
        return f"batches/{batch:012d}"

    @staticmethod
    def entry_name(receiver: int) -> str:
        return f"{receiver:05d}.arrow"

    # -- entries ------------------------------------------------------------------------------

    def read_entry(self, batch: int, receiver: int) -> pa.Table | None:
        path = self._path(self.batch_dir(batch), self.entry_name(receiver))
        data = self._read_bytes(path)
        if data is None:
            return None
        try:
            return pa.ipc.open_file(pa.BufferReader(data)).read_all()
        except pa.ArrowInvalid as exc:
            raise JournalError(
                f"Journal entry {path} is corrupt ({exc}). It was written by an interrupted "
                "writer on a store without atomic writes. Fix: move it away; its messages "
                "reappear in SQS after their visibility timeout"
            ) from None

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        """Message ids, receipt handles and receive time of an entry, without the bodies."""
        path = self._path(self.batch_dir(batch), self.entry_name(receiver))
        fs = self._filesystem()
        try:
            with fs.open_input_file(path) as source:
                schema = pa.ipc.open_file(source).schema
                wanted = [schema.get_field_index("messageId"), schema.get_field_index(RECEIPT)]
                options = pa.ipc.IpcReadOptions(included_fields=wanted)
                table = pa.ipc.open_file(source, options=options).read_all()
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowInvalid) as exc:
            raise JournalError(f"Cannot read journal file {path}: {exc}") from None
        metadata = schema.metadata or {}
        ids = table.column("messageId").to_pylist()
        handles = table.column(RECEIPT).to_pylist()
        if PENDING_DELETE in metadata:
            # The receiver already deleted the rest (deleteAfterJournal).
            pending = set(json.loads(metadata[PENDING_DELETE]))
            pairs = [(i, h) for i, h in zip(ids, handles, strict=True) if i in pending]
            ids, handles = [i for i, _ in pairs], [h for _, h in pairs]
        return EntryReceipts(
            batch=batch,
            receiver=receiver,
            received_at=float(metadata.get(RECEIVED_AT, b"0")),
            message_ids=tuple(ids),
            receipt_handles=tuple(handles),
            rows=table.num_rows,
            dropped=int(metadata.get(DROPPED, b"0")),
            metadata=dict(metadata),
        )

    def batch_receipts(self, batch: int) -> list[EntryReceipts]:
        out = []
        for receiver in self.receivers(batch):
            receipts = self.read_receipts(batch, receiver)
            if receipts is not None:
                out.append(receipts)
        return out

    def write_entry(self, batch: int, receiver: int, table: pa.Table) -> bool:
        """Write an entry; returns False (and writes nothing) if one already exists."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        path = self._path(self.batch_dir(batch), self.entry_name(receiver))
        return self._write_bytes(path, sink.getvalue().to_pybytes(), overwrite=False)

    def write_part(self, batch: int, receiver: int, part: int, table: pa.Table) -> bool:
        """One receive call's messages (deleteAfterJournal); never overwritten."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        path = self._path(self.batch_dir(batch), f"{receiver:05d}.part-{part:05d}.arrow")
        return self._write_bytes(path, sink.getvalue().to_pybytes(), overwrite=False)

    def read_parts(self, batch: int, receiver: int) -> list[tuple[int, pa.Table]]:
        parts = []
        for info in self._list(self._path(self.batch_dir(batch))):
            match = _PART.match(info.base_name)
            if match and int(match.group(1)) == receiver:
                data = self._read_bytes(info.path)
                if data is not None:
                    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
                    parts.append((int(match.group(2)), table))
        return sorted(parts, key=lambda p: p[0])

    def unfinished_parts(self, batch: int) -> dict[int, set[str]]:
        """Receivers of ``batch`` with parts but no entry (``deleteAfterJournal``: an attempt
        that died mid-loop), with the message ids of their parts. Those messages belong to
        that receiver's rows; the ones it could not delete yet come back once their visibility
        times out, and any receiver of the batch must then drop them."""
        infos = self._list(self._path(self.batch_dir(batch)))
        finished = {int(m.group(1)) for i in infos if (m := _ENTRY.match(i.base_name))}
        out: dict[int, set[str]] = {}
        for info in infos:
            match = _PART.match(info.base_name)
            if not match or int(match.group(1)) in finished:
                continue
            data = self._read_bytes(info.path)
            if data is None:
                continue
            ids = pa.ipc.open_file(pa.BufferReader(data)).read_all().column("messageId")
            out.setdefault(int(match.group(1)), set()).update(ids.to_pylist())
        return out

    def receivers(self, batch: int) -> list[int]:
        out = []
        for info in self._list(self._path(self.batch_dir(batch))):
            match = _ENTRY.match(info.base_name)
            if match and info.type == pafs.FileType.File:
                out.append(int(match.group(1)))
        return sorted(out)

    def batches(self) -> list[int]:
        return sorted(
            int(info.base_name)
            for info in self._list(self._path("batches"))
            if _BATCH.match(info.base_name)
        )

    def adopt(self, orphan: int, batch: int, first_receiver: int) -> int:
        """Move the entries of ``orphan`` (a batch no Spark offset log knows) into ``batch`` as
        receivers ``first_receiver``, ``first_receiver + 1``, ...; returns how many. Receivers
        that journaled parts but no entry (deleteAfterJournal, killed mid-loop) are adopted as
        one entry of their parts, all awaiting deletion."""
        adopted = 0
        for receiver in self.receivers(orphan):
            table = self.read_entry(orphan, receiver)
            if table is not None:
                self.write_entry(batch, first_receiver + adopted, table)
                adopted += 1
        entries = set(self.receivers(orphan))
        parts: dict[int, list[pa.Table]] = {}
        for info in self._list(self._path(self.batch_dir(orphan))):
            match = _PART.match(info.base_name)
            if match and int(match.group(1)) not in entries:
                parts.setdefault(int(match.group(1)), [])
        for receiver in sorted(parts):
            tables = [t for _, t in self.read_parts(orphan, receiver)]
            if not tables:
                continue
            combined = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
            received = min(float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for t in tables)
            ids = combined.column("messageId").to_pylist()
            combined = combined.replace_schema_metadata(
                {RECEIVED_AT: repr(received), PENDING_DELETE: json.dumps(sorted(ids))}
            )
            self.write_entry(batch, first_receiver + adopted, combined)
            adopted += 1
        self.remove_batch(orphan)
        return adopted

    def remove_batch(self, batch: int) -> None:
        fs = self._filesystem()
        path = self._path(self.batch_dir(batch))
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise JournalError(f"Cannot remove journal batch {path}: {exc}") from None

    # -- redelivery dedupe ----------------------------------------------------------------------

    def write_dedupe(self, batch: int, message_ids: list[str], expires_at: float) -> None:
        """Remember ids whose acknowledgement may not have taken effect until ``expires_at``."""
        table = pa.table({"messageId": pa.array(message_ids, pa.string())})
        table = table.replace_schema_metadata({EXPIRES_AT: repr(expires_at)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        path = self._path("dedupe", f"{batch:012d}.arrow")
        self._write_bytes(path, sink.getvalue().to_pybytes(), overwrite=True)

    def read_dedupe(self, now: float) -> dict[str, float]:
        """Unexpired dedupe ids with their expiry; expired files are removed."""
        out: dict[str, float] = {}
        for info in self._list(self._path("dedupe")):
            if not info.base_name.endswith(".arrow"):
                continue
            data = self._read_bytes(info.path)
            if data is None:
                continue
            reader = pa.ipc.open_file(pa.BufferReader(data))
            expires = float((reader.schema.metadata or {}).get(EXPIRES_AT, b"0"))
            if expires <= now:
                try:
                    self._filesystem().delete_file(info.path)
                except OSError:
                    pass
                continue
            for message_id in reader.read_all().column("messageId").to_pylist():
                out[message_id] = max(expires, out.get(message_id, 0.0))
        return out

    # -- metrics ---------------------------------------------------------------------------------

    def write_metrics(self, batch: int, metrics: dict[str, Any], keep: int = 100) -> None:
        """Counters of an acknowledged batch, as ``metrics/<batch>.json``; the newest ``keep``
        batches are kept."""
        path = self._path("metrics", f"{batch:012d}.json")
        self._write_bytes(path, json.dumps(metrics, sort_keys=True).encode(), overwrite=True)
        old = sorted(i.path for i in self._list(self._path("metrics")) if i.path.endswith(".json"))
        for stale in old[:-keep]:
            try:
                self._filesystem().delete_file(stale)
            except OSError:
                pass

    def read_metrics(self) -> list[dict[str, Any]]:
        out = []
        for info in sorted(self._list(self._path("metrics")), key=lambda i: i.path):
            data = self._read_bytes(info.path) if info.path.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data))
        return out

    # -- state --------------------------------------------------------------------------------

    def read_state(self) -> JournalState:
        data = self._read_bytes(self._path("_state.json"))
        if data is None:
            return JournalState()
        doc = json.loads(data)
        initial = doc.get("initialBatch")
        return JournalState(
            int(doc.get("plannedBatch", 0)),
            int(doc.get("ackedBatch", 0)),
            None if initial is None else int(initial),
        )

    def write_state(self, state: JournalState) -> None:
        doc = {
            "plannedBatch": state.planned_batch,
            "ackedBatch": state.acked_batch,
            "initialBatch": state.initial_batch,
        }
        self._write_bytes(self._path("_state.json"), json.dumps(doc).encode(), overwrite=True)

    def check_owner(self, queue_url: str) -> None:
        """Bind the journal to one queue; refuse a journal that belongs to another."""
        path = self._path("_meta.json")
        data = self._read_bytes(path)
        if data is None:
            doc = {"format": FORMAT_VERSION, "queueUrl": queue_url}
            self._write_bytes(path, json.dumps(doc).encode(), overwrite=True)
            return
        doc = json.loads(data)
        if doc.get("queueUrl") != queue_url:
            raise JournalError(
                f"journalLocation {self.location} belongs to queue {doc.get('queueUrl')}, not "
                f"{queue_url}. Fix: give each query its own 'journalLocation'"
            )

    def probe_writable(self) -> None:
        path = self._path(f"_probe-{uuid.uuid4().hex}")
        try:
            self._write_bytes(path, b"ok", overwrite=True)
            self._filesystem().delete_file(path)
        except (OSError, JournalError) as exc:
            raise JournalError(
                f"journalLocation {self.location} is not writable ({exc}). Fix: point "
                "'journalLocation' at a directory this cluster can create and write files in"
            ) from None

    # -- bytes --------------------------------------------------------------------------------

    def _list(self, path: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        try:
            return self._filesystem().get_file_info(selector)
        except OSError as exc:
            raise JournalError(f"Cannot list journal directory {path}: {exc}") from None

    def _read_bytes(self, path: str) -> bytes | None:
        fs = self._filesystem()
        try:
            with fs.open_input_stream(path) as stream:
                return stream.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                return None
            raise JournalError(f"Cannot read journal file {path}: {exc}") from None

    def _write_bytes(self, path: str, data: bytes, *, overwrite: bool) -> bool:
        if self._local:
            return _write_local(path, data, overwrite=overwrite)
        fs = self._filesystem()
        if not overwrite and fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        try:
            # An object store PUT is atomic: the object appears whole or not at all.
            with fs.open_output_stream(path) as out:
                out.write(data)
        except OSError as exc:
            raise JournalError(f"Cannot write journal file {path}: {exc}") from None
        return True


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


def _write_local(path: str, data: bytes, *, overwrite: bool) -> bool:
    directory = os.path.dirname(path)
    try:
        _make_private_dirs(directory)
        if not overwrite and os.path.exists(path):
            return False
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                # link() fails if the target exists: the first writer wins, atomically.
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise JournalError(f"Cannot write journal file {path}: {exc}") from None
    return True


def _open(location: str, options: SqsOptions | None) -> tuple[pafs.FileSystem, str, bool]:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or re.match(r"^[A-Za-z]:[\\/]", location):
        path = parsed.path if parsed.scheme == "file" else location
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path)), True
    try:
        if parsed.scheme in ("s3", "s3a") and options is not None:
            return _open_s3(parsed, options), f"{parsed.netloc}{parsed.path}".rstrip("/"), False
        fs, root = pafs.FileSystem.from_uri(location)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise JournalError(
            f"Cannot open journalLocation {location!r}: {exc}. Fix: use a local path or a URI "
            "that pyarrow.fs supports (s3://bucket/prefix, gs://..., hdfs://...)"
        ) from None
    return fs, root.rstrip("/"), isinstance(fs, pafs.LocalFileSystem)


def _open_s3(parsed: Any, options: SqsOptions) -> pafs.FileSystem:
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    # Delayed open sends an entry smaller than one multipart part as a single PutObject: one
    # request instead of three, and atomic on every S3 implementation.
    kwargs: dict[str, Any] = {
        "region": query.pop("region", options.region),
        "allow_delayed_open": True,
    }
    if "endpoint_override" in query:
        kwargs["endpoint_override"] = query.pop("endpoint_override")
    if "scheme" in query:
        kwargs["scheme"] = query.pop("scheme")
    if query:
        raise ValueError(f"unsupported journalLocation parameters {sorted(query)}")
    creds = options.credentials
    if creds is not None:
        kwargs.update(
            access_key=creds.access_key_id,
            secret_key=creds.secret_access_key,
            session_token=creds.session_token,
        )
    if options.assume_role is not None:
        # pyarrow assumes the role itself (and refreshes it) on top of the base credentials.
        kwargs.update(
            role_arn=options.assume_role.role_arn,
            session_name=options.assume_role.session_name,
        )
        if options.assume_role.external_id:
            kwargs["external_id"] = options.assume_role.external_id
    return pafs.S3FileSystem(**kwargs)
