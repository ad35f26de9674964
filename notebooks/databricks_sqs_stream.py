# Databricks notebook source
# MAGIC %md
# MAGIC # Stream an SQS queue into a Delta table, exactly once
# MAGIC
# MAGIC - **Credentials**: the cluster's instance profile (see `conf/databricks/cluster.json`) or,
# MAGIC   on Unity Catalog, a service credential: set `ROLE_ARN` below to the role it grants.
# MAGIC - **Checkpoint and journal** live on S3 next to each other, one pair per query.
# MAGIC - Install the `spark-sqs` wheel on the cluster (`conf/databricks/libraries.json`).

# COMMAND ----------

dbutils.widgets.text("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders")
dbutils.widgets.text("base", "s3://my-bucket/streams/orders")
dbutils.widgets.text("table", "main.default.orders_raw")
dbutils.widgets.text("role_arn", "")

QUEUE_URL = dbutils.widgets.get("queue_url")
BASE = dbutils.widgets.get("base").rstrip("/")
TABLE = dbutils.widgets.get("table")
ROLE_ARN = dbutils.widgets.get("role_arn")

# COMMAND ----------

import logging

from spark_sqs import SqsDataSource

logging.basicConfig(level=logging.INFO)
logging.getLogger("spark_sqs").setLevel(logging.INFO)  # one line per acknowledged batch
spark.dataSource.register(SqsDataSource)

reader = (
    spark.readStream.format("sqs")
    .option("queueUrl", QUEUE_URL)
    .option("journalLocation", f"{BASE}/journal")
    .option("numPartitions", "8")
    .option("maxMessagesPerTrigger", "20000")
)
if ROLE_ARN:
    reader = reader.option("roleArn", ROLE_ARN)

query = (
    reader.load()
    .selectExpr("messageId", "sentTimestamp", "messageAttributes", "body")
    .writeStream.format("delta")
    .option("checkpointLocation", f"{BASE}/checkpoint")
    .trigger(processingTime="10 seconds")
    .toTable(TABLE)
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Dashboard: backlog and per-batch counters

# COMMAND ----------

import json

progress = query.lastProgress
if progress:
    backlog = json.loads(progress["sources"][0]["latestOffset"] or "{}")
    display(spark.createDataFrame([backlog]))

# COMMAND ----------

# Counters of the last 100 acknowledged batches (written by the driver to the journal).
display(
    spark.read.json(f"{BASE}/journal/metrics/")
    .orderBy("batch")
    .select(
        "batch",
        "received",
        "journaled",
        "deleted",
        "deleteFailures",
        "duplicatesDropped",
        "visibilityExtensions",
        "visibilityExtensionFailures",
        "replayedReceivers",
    )
)
