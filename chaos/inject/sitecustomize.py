"""Loaded by every Python interpreter whose PYTHONPATH starts with this directory: the chaos
harness puts it there for the query process, so that the driver, Spark's Python streaming-source
runner and the executors' Python workers (all started with that environment) inject faults on
their real SQS and S3 clients. Does nothing unless ``SPARK_SQS_CHAOS`` is set."""

import os
import sys

if os.environ.get("SPARK_SQS_CHAOS"):
    try:
        from chaos.faults import install

        install()
    except Exception as exc:  # pragma: no cover - must never stop an interpreter from starting
        sys.stderr.write(f"chaos: fault injection not installed: {exc!r}\n")
