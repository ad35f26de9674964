#!/usr/bin/env bash
# EMR Serverless and EMR on EKS have no bootstrap actions: ship a packed virtualenv in
# spark.archives instead. Run this on Amazon Linux 2023 (for example in a container of the
# release's own image) with the Python of the EMR release, so that compiled wheels (pyarrow)
# match the nodes.
# Usage: pack-venv.sh spark_sqs-<version>-py3-none-any.whl [out.tar.gz]
# Then, for EMR Serverless (sparkSubmitParameters):
#   --conf spark.archives=s3://bucket/path/spark_sqs_venv.tar.gz#environment
#   --conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python
#   --conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python
#   --conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python
# and for EMR on EKS: the same spark.archives with
#   --conf spark.pyspark.driver.python=./environment/bin/python
#   --conf spark.pyspark.python=./environment/bin/python
# Not run on EMR Serverless or EMR on EKS. Run once on a development machine (Debian, Python
# 3.11): the archive unpacked and its Python imported spark_sqs; the tests check `bash -n` only.
set -euo pipefail
WHEEL="${1:?usage: pack-venv.sh spark_sqs-<version>-py3-none-any.whl [out.tar.gz]}"
OUT="${2:-spark_sqs_venv.tar.gz}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
    echo "pack-venv: needs Python 3.10 or newer (set PYTHON=...)" >&2
    exit 1
}
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv --copies "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet "$WHEEL" venv-pack
"$WORK/venv/bin/venv-pack" -p "$WORK/venv" -o "$OUT" -f
echo "packed $OUT"
