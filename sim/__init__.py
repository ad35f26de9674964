"""Simulated services for the deterministic simulation of the exactly-once protocol (issue 19).

Runs on: the simulator's single process only (tests, ``make sim``). Not part of the wheel: the
source never imports it. Everything here is deterministic under a seed and runs on a simulated
clock, so a failing seed replays exactly.

- :mod:`sim.clock`: the simulated clock (monotonic and wall time).
- :mod:`sim.sqs`: an in-memory SQS with the boto3 client's request and response shapes.
- :mod:`sim.store`: an in-memory journal store (create-if-absent, put, read, list, delete).
"""

from sim.clock import SimClock
from sim.sqs import Fault, FaultRates, SimSqs, SimSqsClient
from sim.store import JournalOutcomeUnknown, SimJournalStore, StoreFaultRates

__all__ = [
    "Fault",
    "FaultRates",
    "JournalOutcomeUnknown",
    "SimClock",
    "SimJournalStore",
    "SimSqs",
    "SimSqsClient",
    "StoreFaultRates",
]
