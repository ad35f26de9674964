"""Checks that this Python has what the source needs, where the source is used: PySpark's
streaming Python Data Source API (when ``spark_sqs.source`` is imported, i.e. on first use of
``SqsDataSource``; ``import spark_sqs`` and the ``spark-sqs`` command need no PySpark), and a
botocore that sends S3 conditional writes (when an ``s3://`` journal is given). Runs on: driver
and executors (wherever the source is imported).

The check looks for the API itself, never at the version number: some Databricks Runtime
versions report PySpark 3.5 yet ship ``DataSourceStreamReader`` (Databricks documents streaming
Python data sources from Runtime 15.3), while open-source PySpark 3.5 lacks it. PySpark is not a
hard dependency of the wheel (clusters bring their own; ``spark-sqs[spark]`` installs it for
local use), so a missing or too old PySpark has to be reported here, with the fix, before any
other module of the package imports from it.
"""

from __future__ import annotations

import functools
import importlib
import sys

from .errors import SqsSourceError

#: What spark_sqs needs from ``pyspark.sql.datasource``.
REQUIRED = ("DataSource", "DataSourceStreamReader", "InputPartition")

FIX = (
    "Fix: on your own machine, pip install 'spark-sqs[spark]' (PySpark 4.0 or newer); on a "
    "cluster, keep its PySpark and use a runtime that ships the streaming Python Data Source "
    "API: Databricks Runtime 15.3+ or PySpark 4.0+ (e.g. EMR with Spark 4)."
)


class StreamingApiMissingError(SqsSourceError, ImportError):
    """PySpark is missing, or lacks the streaming Python Data Source API."""


def require_streaming_data_source_api() -> None:
    """Raise ``StreamingApiMissingError`` naming what is missing and the fix; else return."""
    try:
        import pyspark
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        raise StreamingApiMissingError(
            f"spark-sqs needs PySpark, but this Python ({sys.executable}) has no module "
            f"'pyspark'. {FIX}"
        ) from None
    where = f"PySpark {getattr(pyspark, '__version__', '(version unknown)')} at " + str(
        getattr(pyspark, "__file__", "?")
    )
    try:
        datasource = importlib.import_module("pyspark.sql.datasource")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pyspark.sql", "pyspark.sql.datasource"):
            raise
        raise StreamingApiMissingError(
            f"spark-sqs needs the Python Data Source API, but {where} has no module "
            f"'pyspark.sql.datasource' (missing: {', '.join(REQUIRED)}). {FIX}"
        ) from None
    missing = [name for name in REQUIRED if not hasattr(datasource, name)]
    if missing:
        raise StreamingApiMissingError(
            f"spark-sqs needs the streaming Python Data Source API, but "
            f"pyspark.sql.datasource of {where} lacks {', '.join(missing)}. {FIX}"
        )


#: The first botocore whose S3 PutObject takes IfNoneMatch (S3 conditional writes).
BOTOCORE_IF_NONE_MATCH = "1.35.2"


class OldBotocoreError(SqsSourceError):
    """botocore cannot send S3 conditional writes, which the s3:// journal relies on."""


@functools.lru_cache(maxsize=1)
def _put_object_takes_if_none_match() -> bool:
    import botocore.session

    model = botocore.session.get_session().get_service_model("s3")
    return "IfNoneMatch" in model.operation_model("PutObject").input_shape.members


def require_s3_conditional_writes() -> None:
    """Raise ``OldBotocoreError`` naming this botocore where its S3 model lacks PutObject's
    ``IfNoneMatch``. Looks at the feature, not the version: a cluster's preinstalled botocore is
    not upgraded by ``pip install spark-sqs`` when something pins it."""
    if _put_object_takes_if_none_match():
        return
    import botocore

    raise OldBotocoreError(
        f"The s3:// journal needs S3 conditional writes (PutObject with IfNoneMatch), which "
        f"botocore sends from {BOTOCORE_IF_NONE_MATCH}; this Python ({sys.executable}) has "
        f"botocore {botocore.__version__} at {botocore.__file__}, whose S3 model lacks it. "
        f"Fix: install botocore>={BOTOCORE_IF_NONE_MATCH} and boto3>={BOTOCORE_IF_NONE_MATCH} "
        "on the driver and every executor (Databricks: %pip install in the notebook or a "
        "cluster library, then restart Python; EMR: in the bootstrap action), or use a journal "
        "on a local or shared POSIX path"
    )
