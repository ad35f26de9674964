#!/usr/bin/env bash
# EMR on EC2 bootstrap action: a Python 3.10+ virtualenv with spark-sqs on every node.
# Use with an EMR release that ships Spark 4.0 or newer, and conf/emr/configurations.json (which
# points the driver and the executors at /opt/spark-sqs/venv/bin/python).
# Usage: bootstrap.sh s3://bucket/path/spark_sqs-<version>-py3-none-any.whl [python]
# Not run on EMR: checked here with `bash -n` only.
set -euo pipefail
WHEEL_URI="${1:?usage: bootstrap.sh s3://.../spark_sqs-<version>-py3-none-any.whl [python]}"

# The same interpreter on every node (the driver's and the workers' Python must be the same
# minor version): the one given, else the newest python3.1x found, else python3.
PYTHON="${2:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then PYTHON="$candidate"; break; fi
    done
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    echo "spark-sqs bootstrap: needs Python 3.10 or newer; found '$PYTHON' ($("$PYTHON" --version 2>&1 || echo none)) on $(hostname)." >&2
    echo "  Use an EMR release with Spark 4.0+ and Python 3.10+, or pass the interpreter as the second argument." >&2
    exit 1
fi

sudo mkdir -p /opt/spark-sqs
sudo chown "$(id -u)" /opt/spark-sqs
"$PYTHON" -m venv /opt/spark-sqs/venv
aws s3 cp "$WHEEL_URI" /opt/spark-sqs/
# No PySpark from PyPI (the wheel requires it only in its `spark` extra): Spark puts the release's
# own PySpark on the PYTHONPATH of the driver and the Python workers. pip brings boto3/botocore
# 1.35.2 or newer into the venv (the s3:// journal needs S3 conditional writes).
/opt/spark-sqs/venv/bin/pip install --quiet /opt/spark-sqs/"$(basename "$WHEEL_URI")"
/opt/spark-sqs/venv/bin/python -c 'import spark_sqs, botocore; print("spark-sqs", spark_sqs.__version__, "botocore", botocore.__version__)'
