"""The driver's side of a micro-batch. Runs on: driver.

Spark calls the stream reader (``spark_sqs.source``) on the driver; it forwards to the
``coordinator``, which owns the protocol and the journal's state and uses, per micro-batch:
``offsets`` (``{"batch": N}``), ``queues`` (backlog polling, receivers per queue),
``flow_control`` (how much the next batch may take), ``planning`` (one input partition per
receiver, pickled to the executors), ``heartbeat`` (keeps unacknowledged messages invisible),
``poison`` (narrows and quarantines batches that keep failing; also ``spark-sqs release``) and
the acknowledgement of committed batches, a package of its own (``spark_sqs.acknowledgement``).
"""
