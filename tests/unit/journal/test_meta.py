"""The journal's identity, ownership, format and the store probe (journal/meta.py)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from spark_sqs.errors import JournalError, UnsafeStoreError
from spark_sqs.journal import Journal, open_store
from spark_sqs.journal.meta import FORMAT_VERSION
from tests.factories import OTHER_QUEUE_URL, QUEUE_URL, make_options
from tests.fakes import CreateIgnoresExistenceStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_check_owner_binds_the_journal_to_the_first_queue(journal: Journal, location: str) -> None:
    journal.meta.check_owner(QUEUE_URL)
    journal.meta.check_owner(QUEUE_URL)  # same queue: fine, also after a restart
    Journal(location, make_options(location)).meta.check_owner(QUEUE_URL)

    meta = json.loads((Path(location) / "_meta.json").read_text())
    assert meta["queueUrl"] == QUEUE_URL

    with pytest.raises(JournalError) as info:
        Journal(location, make_options(location)).meta.check_owner(OTHER_QUEUE_URL)
    message = str(info.value)
    assert QUEUE_URL in message
    assert OTHER_QUEUE_URL in message
    assert "Fix: give each query its own 'journalLocation'" in message
    assert info.value.retriable is False


def test_probe_writable_accepts_a_writable_location_and_cleans_up(
    journal: Journal, location: str
) -> None:
    journal.meta.probe_writable()
    assert os.listdir(location) == []


def test_probe_writable_rejects_a_path_under_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("I am not a directory")
    location = str(blocker / "journal")
    journal = Journal(location, make_options(location))

    with pytest.raises(JournalError) as info:
        journal.meta.probe_writable()
    message = str(info.value)
    assert "is not writable" in message
    assert location in message
    assert "Fix:" in message


def test_probe_writable_removes_probes_a_dead_driver_left(journal: Journal, location: str) -> None:
    journal.store.create("_probe/0123456789abcdef", b"ok")  # the driver died before its delete
    journal.meta.probe_writable()
    assert journal.store.list("_probe") == []
    assert os.listdir(location) == []


def test_identity_is_fixed_when_the_journal_is_bound_and_stable_across_journal_objects(
    tmp_path: Path,
) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    assert journal.meta.identity() is None, "no journal there yet"

    journal.meta.check_owner(QUEUE_URL)
    identity = journal.meta.identity()
    assert isinstance(identity, str) and len(identity) >= 8
    meta = json.loads((Path(location) / "_meta.json").read_text())
    assert meta["journalId"] == identity and meta["format"] == FORMAT_VERSION

    # Another process, a restart, a pickled copy: the same identity; binding again keeps it.
    again = Journal(location, make_options(location))
    assert again.meta.identity() == identity
    again.meta.check_owner(QUEUE_URL)
    assert again.meta.identity() == identity
    assert pickle.loads(pickle.dumps(Journal(location))).meta.identity() == identity
    # Another journal of the same queue is another journal.
    other_location = str(tmp_path / "other")
    other = Journal(other_location, make_options(other_location))
    other.meta.check_owner(QUEUE_URL)
    assert other.meta.identity() not in (None, identity)


def test_a_journal_of_an_earlier_format_gets_a_stable_derived_identity(tmp_path: Path) -> None:
    """A journal created before journals had an identity (no journalId in ``_meta.json``): its
    identity is derived from ``_meta.json``, which is written once and never changed."""

    def legacy(name: str, queue: str) -> str:
        location = str(tmp_path / name)
        Journal(location).store.create(
            "_meta.json", json.dumps({"format": 2, "queueUrl": queue}).encode()
        )
        return location

    location = legacy("old", QUEUE_URL)
    identity = Journal(location).meta.identity()
    assert isinstance(identity, str) and identity
    assert Journal(location, make_options(location)).meta.identity() == identity
    # Binding the journal to its queue again does not rewrite its _meta.json.
    bound = Journal(location, make_options(location))
    bound.meta.check_owner(QUEUE_URL)
    assert bound.meta.identity() == identity
    assert "journalId" not in json.loads((Path(location) / "_meta.json").read_text())
    # Another legacy journal has another identity.
    assert Journal(legacy("older", OTHER_QUEUE_URL)).meta.identity() not in (None, identity)


def test_a_journal_of_a_newer_format_is_refused(journal: Journal, location: str) -> None:
    newer = FORMAT_VERSION + 1
    doc = {"format": newer, "queueUrl": QUEUE_URL, "journalId": "0123456789abcdef"}
    journal.store.create("_meta.json", json.dumps(doc).encode())

    for call in (
        lambda j: j.meta.read(),
        lambda j: j.meta.identity(),
        lambda j: j.meta.check_owner(QUEUE_URL),
    ):
        with pytest.raises(JournalError) as info:
            call(Journal(location, make_options(location)))
        message = str(info.value)
        assert f"journal format {newer}" in message and location in message
        assert "Fix:" in message
        assert info.value.retriable is False
    # The journal is left as the newer version wrote it.
    assert json.loads((Path(location) / "_meta.json").read_text()) == doc


def test_a_journal_this_version_wrote_is_refused_once_its_format_number_is_raised(
    journal_location: str,
) -> None:
    """A journal this version created, with the format number in its ``_meta.json`` raised
    above ``FORMAT_VERSION`` (what a journal a newer version created looks like): refused, on
    both stores. The number this version writes itself is accepted (``>``, not ``>=``)."""
    options = make_options(journal_location, region="us-east-1")
    Journal(journal_location, options).meta.check_owner(QUEUE_URL)
    store = Journal(journal_location, options).store
    written = json.loads(store.read("_meta.json") or b"")
    assert written["format"] == FORMAT_VERSION
    assert Journal(journal_location, options).meta.identity() == written["journalId"]

    raised = {**written, "format": FORMAT_VERSION + 1}
    store.delete("_meta.json")
    assert store.create("_meta.json", json.dumps(raised).encode())
    for call in (lambda j: j.meta.identity(), lambda j: j.meta.check_owner(QUEUE_URL)):
        with pytest.raises(JournalError) as info:
            call(Journal(journal_location, options))
        message = str(info.value)
        assert f"journal format {FORMAT_VERSION + 1}" in message, message
        assert f"reads formats up to {FORMAT_VERSION}" in message and "Fix:" in message
    assert json.loads(store.read("_meta.json") or b"") == raised


def test_probe_writable_refuses_a_store_whose_second_create_of_one_key_succeeds(
    journal_location: str,
) -> None:
    """Two attempts of one task must never both believe they journaled a receiver's messages:
    a store that answers a second create of one key with success (an S3-compatible store that
    accepts ``If-None-Match: *`` and ignores it) is refused at query start."""
    options = make_options(journal_location, region="us-east-1")
    Journal(journal_location, options).meta.probe_writable()  # the store itself honours it

    unsafe = CreateIgnoresExistenceStore(open_store(journal_location, options.connection))
    journal = Journal(journal_location, options, store=unsafe)
    with pytest.raises(UnsafeStoreError) as info:
        journal.meta.probe_writable()

    message = str(info.value)
    assert journal_location in message
    assert "create-if-absent" in message and "Fix:" in message
    probes = [k for m, k in unsafe.calls if m == "create"]
    assert len(probes) == 2 and probes[0] == probes[1], "two creates of one key"
    assert unsafe.inner.list("_probe") == [], "the probe object is removed"


def test_a_journal_taken_over_in_place_records_its_format_apart_from_its_meta(
    journal_location: str,
) -> None:
    """``_meta.json`` is never rewritten (a legacy journal's identity is derived from its
    bytes): a version that takes over a journal of an earlier format creates ``format/<F>``
    markers, and a version that reads up to an older format refuses the journal once it sees
    them."""
    options = make_options(journal_location, region="us-east-1")
    store = Journal(journal_location, options).store
    legacy = {"format": FORMAT_VERSION - 1, "queueUrl": QUEUE_URL}
    store.create("_meta.json", json.dumps(legacy).encode())
    identity = Journal(journal_location, options).meta.identity()

    Journal(journal_location, options).meta.check_owner(QUEUE_URL)

    assert store.read(f"format/{FORMAT_VERSION}") is not None
    assert json.loads(store.read("_meta.json") or b"") == legacy
    assert Journal(journal_location, options).meta.identity() == identity
    # A later version took it over in place the same way: this one refuses it.
    store.create(f"format/{FORMAT_VERSION + 1}", b"")
    with pytest.raises(JournalError, match=f"journal format {FORMAT_VERSION + 1}"):
        Journal(journal_location, options).meta.check_owner(QUEUE_URL)
