"""The executors' side of a micro-batch. Runs on: executors.

``receiver`` reads one input partition: it replays the receiver's journal entry, or receives from
SQS, prepares the messages (``envelopes``: SNS unwrapping, Extended Client payloads), journals them
and only then yields them, after deleting the committed entries of earlier batches that the
batch's plan assigned to the receiver (``spark_sqs.acknowledgement.assigned``); ``poison``
counts each read of a replayed batch and refuses or narrows a batch that keeps failing.
"""
