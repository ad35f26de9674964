"""``make bench``'s sink section: its report states the ratio against the 0.8 target, and the
bench's quick mode shrinks the sink's runs."""

from __future__ import annotations

from typing import Any

from bench.report import sink_lines
from bench.run import _args


def _sink(baseline: float, sink: float) -> dict[str, Any]:
    return {
        "server": "localstack",
        "proxied": True,
        "delayMs": 20.0,
        "messages": 4000,
        "bodyBytes": 200,
        "concurrency": "2 tasks x 4 calls = 8 threads",
        "baselineMsgPerSec": baseline,
        "sinkMsgPerSec": sink,
        "ratio": round(sink / baseline, 3),
        "runs": {"baseline": [baseline], "sink": [sink]},
        "writeOverheadSeconds": 1.0,
    }


def test_sink_section_reports_the_ratio_and_whether_it_meets_the_target() -> None:
    text = "\n".join(sink_lines(_sink(400.0, 360.0)))
    assert "on localstack, through the delay proxy (20 ms per request)" in text
    assert "| 400 | 360 | 0.90 | >= 0.8: meets | 400; 360 |" in text
    # 4000 messages at 360/s is 11.1 s; without the 1 s write overhead, 10.1 s.
    assert "A 10-row write takes 1.00 s" in text
    assert "with that time taken out: 396." in text
    assert ">= 0.8: **misses**" in "\n".join(sink_lines(_sink(400.0, 300.0)))
    assert sink_lines(None) == []  # section skipped or failed


def test_sink_section_reports_the_like_for_like_ratio_and_cpu() -> None:
    sink = {
        **_sink(400.0, 360.0),
        "attributedBaselineMsgPerSec": 380.0,
        "ratioAttributed": round(360 / 380, 3),
        "runs": {"baseline": [400.0], "attributed": [380.0], "sink": [360.0]},
        "pairRatios": [0.9],
        "pairRatiosAttributed": [0.947],
        "cpuMicrosPerMessage": {
            "baseline": {"client": 120.0, "server": 250.0},
            "sink": {"client": 200.0, "server": 270.0},
        },
        "loadAverage": [7.5, 7.0, 6.0],
    }
    text = "\n".join(sink_lines(sink))
    assert "ran at 380 msgs/s (380): ratio 0.95" in text
    assert "0.90 / 0.95" in text
    assert "baseline 120 + 250; sink 200 + 270." in text
    assert "Load average after the runs: 7.5." in text
    # Older results without them: no such lines.
    assert "Like for like" not in "\n".join(sink_lines(_sink(400.0, 360.0)))


def test_quick_mode_shrinks_the_sink_runs() -> None:
    full, quick = _args([]), _args(["--quick"])
    assert (full.sink_messages, full.sink_repeats) == (20000, 3)
    assert (quick.sink_messages, quick.sink_repeats) == (2000, 1)
