"""The executors' side of a micro-batch. Runs on: executors.

``receiver`` reads one input partition through the receive pipeline: it replays the receiver's
journal entry, or, after deleting the committed entries of earlier batches that the batch's plan
assigned to the receiver (``spark_sqs.acknowledgement.assigned``), receives from SQS
(``receiving``), filters out what other records hold (``filtering``), prepares the messages
(``envelopes``: SNS unwrapping, Extended Client payloads) and journals them (``journaling``;
``parts`` under deleteAfterJournal), and only then yields them; ``poison`` counts each read of a
replayed batch and refuses or narrows a batch that keeps failing.
"""
