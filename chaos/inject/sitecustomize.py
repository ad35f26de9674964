"""Loaded by every Python interpreter whose PYTHONPATH starts with this directory: the chaos
harness puts it there for the query process, so that the driver, Spark's Python streaming-source
runner and the executors' Python workers (all started with that environment) inject faults on
their real SQS and S3 clients. Does nothing unless ``SPARK_SQS_CHAOS`` is set.

``SPARK_SQS_CHAOS_LOG_LEVEL`` (``--log-level``) makes the source's own loggers write at that
level to stderr, which lands in the run's log: the receivers' and planner's INFO lines are what
a diagnosis of a lost or duplicated message needs."""

import os
import sys

if os.environ.get("SPARK_SQS_CHAOS"):
    try:
        from chaos.faults import install

        install()
    except Exception as exc:  # pragma: no cover - must never stop an interpreter from starting
        sys.stderr.write(f"chaos: fault injection not installed: {exc!r}\n")

if os.environ.get("SPARK_SQS_CHAOS_LOG_LEVEL"):
    try:
        import logging

        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(
            logging.Formatter("%(asctime)s pid %(process)d %(name)s %(levelname)s: %(message)s")
        )
        _logger = logging.getLogger("spark_sqs")
        _logger.setLevel(os.environ["SPARK_SQS_CHAOS_LOG_LEVEL"].upper())
        _logger.addHandler(_handler)
        _logger.propagate = False
    except Exception as exc:  # pragma: no cover
        sys.stderr.write(f"chaos: logging not configured: {exc!r}\n")
