"""The fault harness of issue #7: SIGKILLed queries, failing SQS calls, and a count of what was
lost, duplicated and left behind. Not part of the library; see ``chaos/run.py``."""
