"""Benchmarks of the SQS source against a plain boto3 consumer (``make bench``).

Tools, not library code: nothing under ``spark_sqs`` imports this package. ``python -m bench``
runs everything and writes ``bench/results/README.md`` with PNG plots.
"""
