"""The simulated journal store: the JournalStore interface, faults before and after the effect,
request counts, determinism."""

from __future__ import annotations

import pickle

import pytest

from sim import JournalOutcomeUnknown, SimJournalStore, StoreFaultRates
from sim.clock import SimClock
from sim.store import StoreFault
from spark_sqs.errors import JournalError, SqsSourceError
from spark_sqs.journal.stores import JournalStore


def test_it_implements_the_journal_store_interface() -> None:
    store = SimJournalStore()
    assert isinstance(store, JournalStore)


def test_create_is_create_if_absent() -> None:
    store = SimJournalStore()
    assert store.create("q/batch/1/r0", b"first") is True
    assert store.create("q/batch/1/r0", b"second") is False
    assert store.read("q/batch/1/r0") == b"first"


def test_put_creates_and_overwrites() -> None:
    store = SimJournalStore()
    store.put("state", b"a")
    store.put("state", b"b")
    assert store.read("state") == b"b"


def test_read_of_an_absent_key_is_none() -> None:
    assert SimJournalStore().read("nothing/here") is None


def test_list_is_sorted_recursive_and_by_directory() -> None:
    store = SimJournalStore()
    for key in ("b/2", "b/1/x", "b/10", "bc/1", "a/1"):
        store.create(key, b"")
    assert store.list("b") == ["b/1/x", "b/10", "b/2"]
    assert store.list("b/") == ["b/1/x", "b/10", "b/2"]
    assert store.list("") == ["a/1", "b/1/x", "b/10", "b/2", "bc/1"]
    assert store.list("missing") == []


def test_delete_is_idempotent() -> None:
    store = SimJournalStore()
    store.create("k", b"v")
    store.delete("k")
    store.delete("k")
    assert store.read("k") is None
    assert store.create("k", b"again") is True


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "a/./b", "a/"])
def test_keys_are_relative_slash_paths(key: str) -> None:
    with pytest.raises(ValueError):
        SimJournalStore().create(key, b"")


def test_stored_bytes_are_a_copy() -> None:
    store = SimJournalStore()
    data = bytearray(b"abc")
    store.create("k", data)
    data[0] = ord("z")
    assert store.read("k") == b"abc"


@pytest.mark.parametrize("method", ["create", "put", "delete"])
def test_a_fault_before_the_effect_changes_nothing(method: str) -> None:
    store = SimJournalStore()
    store.create("k", b"old")
    store.inject(StoreFault(method, "before"))
    with pytest.raises(JournalError) as raised:
        if method == "delete":
            store.delete("k")
        else:
            getattr(store, method)("k" if method == "put" else "new", b"new")
    assert raised.value.retriable
    assert not isinstance(raised.value, JournalOutcomeUnknown)
    assert store.snapshot() == {"k": b"old"}


def test_a_create_whose_answer_was_lost_happened_and_says_the_outcome_is_unknown() -> None:
    store = SimJournalStore()
    store.inject(StoreFault("create", "after"))
    with pytest.raises(JournalOutcomeUnknown) as raised:
        store.create("entry", b"mine")
    assert raised.value.retriable
    assert store.peek("entry") == b"mine"
    # The retry finds the key: only reading it tells the caller the write was its own.
    assert store.create("entry", b"mine") is False
    assert store.read("entry") == b"mine"


def test_put_and_delete_whose_answers_were_lost_happened() -> None:
    store = SimJournalStore()
    store.inject(StoreFault("put", "after"))
    with pytest.raises(JournalOutcomeUnknown):
        store.put("state", b"v")
    assert store.peek("state") == b"v"
    store.inject(StoreFault("delete", "after"))
    with pytest.raises(JournalOutcomeUnknown):
        store.delete("state")
    assert store.peek("state") is None


@pytest.mark.parametrize("when", ["before", "after"])
def test_read_and_list_faults_raise_a_plain_retriable_journal_error(when: str) -> None:
    store = SimJournalStore(faults=[StoreFault("read", when), StoreFault("list", when)])
    store.create("a/k", b"v")
    for call in (lambda: store.read("a/k"), lambda: store.list("a")):
        with pytest.raises(JournalError) as raised:
            call()
        assert raised.value.retriable
        assert not isinstance(raised.value, JournalOutcomeUnknown)
    assert store.read("a/k") == b"v"


def test_scripted_faults_match_a_key_prefix_and_a_count() -> None:
    store = SimJournalStore(faults=[StoreFault("create", "before", key_prefix="journal/", count=2)])
    assert store.create("metrics/x", b"") is True
    for _ in range(2):
        with pytest.raises(JournalError):
            store.create("journal/1", b"")
    assert store.create("journal/1", b"") is True


def test_requests_are_counted_per_method_faults_included() -> None:
    store = SimJournalStore(faults=[StoreFault("read", "before")])
    store.create("a", b"")
    store.create("a", b"")
    store.put("b", b"")
    with pytest.raises(JournalError):
        store.read("a")
    store.read("a")
    store.list("")
    store.delete("a")
    assert store.requests == {"create": 2, "put": 1, "read": 2, "list": 1, "delete": 1}
    assert store.total_requests == 7
    # Inspection is free.
    store.keys(), store.snapshot(), store.peek("b")
    assert store.total_requests == 7


def run_with_rates(seed: int) -> tuple[list[str], dict[str, bytes]]:
    store = SimJournalStore(seed, fault_rates=StoreFaultRates(before=0.2, after=0.2))
    outcomes = []
    for i in range(200):
        try:
            outcomes.append(str(store.create(f"k/{i % 50}", str(i).encode())))
        except JournalOutcomeUnknown:
            outcomes.append("unknown")
        except JournalError:
            outcomes.append("failed")
    return outcomes, store.snapshot()


def test_fault_rates_are_deterministic_per_seed() -> None:
    first, second, other = run_with_rates(7), run_with_rates(7), run_with_rates(8)
    assert first == second
    assert first != other
    assert set(first[0]) == {"True", "False", "unknown", "failed"}


def test_fault_rates_respect_the_chosen_methods() -> None:
    store = SimJournalStore(1, fault_rates=StoreFaultRates(before=1.0, methods=frozenset({"put"})))
    assert store.create("k", b"") is True
    with pytest.raises(JournalError):
        store.put("k", b"")


def test_trace_records_every_call_with_its_outcome_and_time() -> None:
    clock = SimClock()
    store = SimJournalStore(clock=clock, faults=[StoreFault("create", "after")])
    with pytest.raises(JournalOutcomeUnknown):
        store.create("k", b"")
    clock.advance(2.5)
    store.create("k", b"")
    lines = store.format_trace().splitlines()
    assert "store.create k -> created; answer lost" in lines[0]
    assert "t=      2.500 store.create k -> exists" in lines[1]
    assert store.writes == [(0.0, "create", "k")]


def test_outcome_unknown_is_a_journal_error_that_survives_pickling() -> None:
    err = JournalOutcomeUnknown("lost")
    assert isinstance(err, JournalError) and isinstance(err, SqsSourceError)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is JournalOutcomeUnknown
    assert copy.retriable and str(copy) == "lost"
