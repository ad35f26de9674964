#!/usr/bin/env bash
# EMR bootstrap action: a Python 3.10+ virtualenv with spark-sqs on every node.
# Use with an EMR release that ships Spark 4.0 or newer, and conf/emr/configurations.json.
# Usage: bootstrap.sh s3://bucket/path/spark_sqs-<version>-py3-none-any.whl
set -euo pipefail
WHEEL_URI="${1:?usage: bootstrap.sh s3://.../spark_sqs-<version>-py3-none-any.whl}"
sudo mkdir -p /opt/spark-sqs
sudo chown "$(id -u)" /opt/spark-sqs
python3 -m venv /opt/spark-sqs/venv
aws s3 cp "$WHEEL_URI" /opt/spark-sqs/
# No PySpark from PyPI (the wheel requires it only in its `spark` extra): Spark puts the release's
# own PySpark on the PYTHONPATH of the driver and the Python workers.
/opt/spark-sqs/venv/bin/pip install --quiet /opt/spark-sqs/"$(basename "$WHEEL_URI")"
