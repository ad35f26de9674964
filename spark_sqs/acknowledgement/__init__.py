"""Acknowledgement: deleting the messages of committed micro-batches from SQS. Runs on: both.

Everything a change to how batches are acknowledged reads is here:

- ``rule`` (driver): which committed batches are due, and whether the next batch's receivers or
  the driver deletes them, as pure functions;
- ``deletes`` (both): the one delete routine every deleter calls: the duplicate window's segment
  first, then the delete, the ids whose delete may not have taken effect;
- ``acknowledger`` (driver): the driver's bookkeeping: assigning deletes to the next batch's
  receivers, settling batches from their reports, deleting a batch itself when no receivers
  will (or a report cannot be read), recording uncertain deletes, the acknowledged marker;
- ``assigned`` (executors): a receiver deleting the committed entries its plan assigns to it;
- ``reports`` (both): the reports those receivers write (``acks/<N>/<receiver>.json``), read
  by the driver, and the per-batch counters made from them.

The assignments themselves travel in the batch's plan (``spark_sqs.journal.AckAssignment``).
"""
