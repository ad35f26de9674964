"""Terminal output of the ``spark-sqs`` command (and of the demo in devtools/).
Runs on: a workstation.

What the command prints is its result, not a log record, so it goes straight to the stream;
the library itself reports through ``logging``.
"""

from __future__ import annotations

import sys
from typing import TextIO


def say(text: str = "", *, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()
