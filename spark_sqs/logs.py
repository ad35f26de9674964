"""The source's log lines in the driver's log. Runs on: driver (the streaming-source process).

PySpark runs a Python source's driver-side calls (``latestOffset``, ``partitions``, ``commit``)
in a Python process of their own (``RUNNER`` below), started by the JVM; logging configured in
a notebook or driver program never reaches it, and Python's last-resort handler there prints
WARNING and above only, without time or logger. What that process writes to stderr, Spark
copies to the driver's stderr (Databricks: the cluster's driver log, "stderr"; EMR: the step's
stderr in client mode, the driver container's stderr in cluster mode). So in that process, and
only there, the ``spark_sqs`` logger gets a stderr handler of its own at the level of the
``logLevel`` option. Anywhere else (a test, a program that embeds the coordinator) logging
stays as its owner configured it.
"""

from __future__ import annotations

import logging
import sys

#: The module PySpark runs as ``__main__`` of the driver-side streaming-source process.
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
HANDLER = "spark_sqs.stderr"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: logLevel values; OFF silences the package's lines in that process.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "OFF")


def in_streaming_runner() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == RUNNER


def route_to_stderr(level: str, *, force: bool = False) -> bool:
    """In the streaming-source process (or with ``force``): the ``spark_sqs`` logger writes
    lines of ``level`` and above to stderr, once per process. Returns whether it did."""
    if not (force or in_streaming_runner()):
        return False
    logger = logging.getLogger("spark_sqs")
    logger.setLevel(logging.CRITICAL + 1 if level == "OFF" else getattr(logging, level))
    if not any(h.get_name() == HANDLER for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(HANDLER)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        # The lines are written here; handlers a runtime may add to the root logger of this
        # process would print them twice.
        logger.propagate = False
    return True
