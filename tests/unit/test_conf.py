"""The files in conf/ are well-formed and grant what the source and the sink call."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Every SQS action the source and the sink call, by the IAM action that allows it.
ACTIONS_USED = {
    "sqs:GetQueueUrl",  # queueName
    "sqs:GetQueueAttributes",  # start check, idle polling, backlog
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",  # heartbeat, release (ChangeMessageVisibilityBatch)
    "sqs:DeleteMessage",  # acknowledgement (DeleteMessageBatch)
    "sqs:SendMessage",  # the sink (SendMessageBatch, SendMessage to oversizeDeadLetterQueueUrl)
}


def test_iam_policy_grants_exactly_the_sqs_actions_used() -> None:
    policy = json.loads((ROOT / "conf" / "iam-policy.json").read_text())
    granted = set()
    for statement in policy["Statement"]:
        actions = statement["Action"]
        granted.update([actions] if isinstance(actions, str) else actions)
    assert {a for a in granted if a.startswith("sqs:")} == ACTIONS_USED
    # SSE-KMS: receiving from an encrypted queue needs kms:Decrypt on its key; sending (the
    # sink, dead letters) and writing an SSE-KMS journal need kms:GenerateDataKey.
    assert {a for a in granted if a.startswith("kms:")} == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert not any("*" in a for a in granted), "least privilege: no wildcards"


def test_json_configurations_parse() -> None:
    for path in [*(ROOT / "conf").rglob("*.json")]:
        json.loads(path.read_text())


def test_shell_scripts_parse() -> None:
    for script in [*(ROOT / "conf" / "emr").glob("*.sh"), ROOT / "scripts" / "bootstrap.sh"]:
        subprocess.run(["bash", "-n", str(script)], check=True)


def test_databricks_notebook_is_python() -> None:
    ast.parse((ROOT / "notebooks" / "databricks_sqs_stream.py").read_text())
