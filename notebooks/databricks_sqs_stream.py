# Databricks notebook source
# MAGIC %md
# MAGIC # Stream an SQS queue into a Delta table, exactly once
# MAGIC
# MAGIC Written for a cluster in **dedicated (single user) access mode** on Databricks Runtime 17.x
# MAGIC (Spark 4.0) with the `spark-sqs` wheel installed (`conf/databricks/libraries.json`, or
# MAGIC `%pip install` below). This notebook has not been run on Databricks.
# MAGIC
# MAGIC **Credentials**, in the order to try them:
# MAGIC - the cluster's **instance profile** (`conf/databricks/cluster.json`): leave both widgets
# MAGIC   below empty;
# MAGIC - a **role the cluster may assume** (its trust policy names the instance profile's role):
# MAGIC   `role_arn`;
# MAGIC - a Unity Catalog **service credential** by name: `service_credential`. Databricks
# MAGIC   documents its provider in notebooks and UDFs, not inside a Python data source: if the
# MAGIC   query fails at start naming the runtime, use one of the two above. Do not put the service
# MAGIC   credential's own role in `role_arn`: that role trusts Databricks, not your cluster.
# MAGIC
# MAGIC **Checkpoint and journal** live on S3 next to each other, one pair per query.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libs/spark_sqs-0.1.0-py3-none-any.whl

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

dbutils.widgets.text("queue_url", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders")
dbutils.widgets.text("base", "s3://my-bucket/streams/orders")
dbutils.widgets.text("table", "main.default.orders_raw")
dbutils.widgets.text("role_arn", "")
dbutils.widgets.text("service_credential", "")

QUEUE_URL = dbutils.widgets.get("queue_url")
BASE = dbutils.widgets.get("base").rstrip("/")
TABLE = dbutils.widgets.get("table")
ROLE_ARN = dbutils.widgets.get("role_arn")
SERVICE_CREDENTIAL = dbutils.widgets.get("service_credential")

# COMMAND ----------

import spark_sqs

spark_sqs.register(spark)

reader = (
    spark.readStream.format("sqs")
    .option("queueUrl", QUEUE_URL)
    .option("journalLocation", f"{BASE}/journal")
    .option("numPartitions", "8")
    .option("maxMessagesPerTrigger", "20000")
    # One line per acknowledged batch in the driver log (Compute > Driver logs > stderr).
    .option("logLevel", "INFO")
)
if ROLE_ARN:
    reader = reader.option("roleArn", ROLE_ARN)
if SERVICE_CREDENTIAL:
    reader = reader.option("serviceCredential", SERVICE_CREDENTIAL)

query = (
    spark_sqs.observe_lag(reader.load())  # rows and message ages in every progress report
    .selectExpr("messageId", "sentTimestamp", "messageAttributes", "body")
    .writeStream.format("delta")
    .option("checkpointLocation", f"{BASE}/checkpoint")
    .trigger(processingTime="10 seconds")
    .toTable(TABLE)
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Dashboard: lag, backlog and per-batch counters

# COMMAND ----------

import json

progress = query.lastProgress
if progress:
    # Every Spark 4 runtime: rows and message ages of the newest batch.
    print(spark_sqs.observed_lag(progress))
    # Spark 4.2 and newer only: the queue's backlog and the newest settled batch's counters.
    print(json.loads(progress["sources"][0]["latestOffset"] or "{}"))

# COMMAND ----------

# Counters of the last 100 acknowledged batches (each batch's acknowledged marker holds them).
display(
    spark.read.json(f"{BASE}/journal/state/acked-*")
    .select("metrics.*")
    .orderBy("batch")
    .select(
        "batch",
        "received",
        "journaled",
        "deleted",
        "deleteFailures",
        "duplicatesDropped",
        "oldestMessageAgeMs",
        "medianMessageAgeMs",
        "visibilityExtensions",
        "visibilityExtensionFailures",
        "replayedReceivers",
    )
)
