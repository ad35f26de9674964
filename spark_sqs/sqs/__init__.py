"""Talking to SQS. Runs on: driver and executors.

``client`` builds boto3 clients (lazily, per process), resolves queues and maps AWS errors to the
source's error classes; ``batching`` runs the 10-entry ``DeleteMessageBatch`` /
``ChangeMessageVisibilityBatch`` calls over any number of entries, entry by entry.
"""
