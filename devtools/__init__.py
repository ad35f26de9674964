"""Development tools of spark-sqs, kept out of the wheel: the embedded SQS (``local_sqs``), the
demo (``python -m devtools.demo``, i.e. ``make demo``) and the local SparkSession that the tests,
the demo, the benchmarks and the fault harness share (``spark``). Runs on: a workstation or CI,
from a checkout of the repository.
"""
