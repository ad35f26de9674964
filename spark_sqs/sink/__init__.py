"""The SQS sink: ``df.write.format("sqs")`` and ``df.writeStream.format("sqs")``.

Registered by ``spark_sqs.SqsDataSource`` (``writer``/``streamWriter``). Modules: ``options``
(the sink's options), ``rows`` (input columns, rows to entries, deduplication ids), ``sending``
(the per-task ``SendMessageBatch`` engine), ``writer`` (Spark's writer classes). docs/sink.md
describes the behaviour.
"""
