"""spark_sqs/logs.py: a stderr handler for the ``spark_sqs`` logger in the driver's
streaming-source process only, at the ``logLevel`` option's level (the integration test
tests/integration/test_driver_logs.py reads the lines from a real driver's stderr)."""

from __future__ import annotations

import logging

import pytest

from spark_sqs import logs
from tests.factories import make_options


@pytest.fixture
def package_logger():
    logger = logging.getLogger("spark_sqs")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


def test_outside_the_streaming_runner_logging_is_left_alone(package_logger) -> None:
    before = list(package_logger.handlers)
    assert logs.in_streaming_runner() is False
    assert logs.route_to_stderr("DEBUG") is False
    assert package_logger.handlers == before


def test_in_the_runner_one_handler_at_the_chosen_level(package_logger, capsys) -> None:
    assert logs.route_to_stderr("WARNING", force=True) is True
    assert logs.route_to_stderr("INFO", force=True) is True
    ours = [h for h in package_logger.handlers if h.get_name() == logs.HANDLER]
    assert len(ours) == 1 and package_logger.level == logging.INFO
    logging.getLogger("spark_sqs.driver.metrics").info("batch %d: received %d", 3, 7)
    logging.getLogger("spark_sqs.driver.metrics").debug("not shown")
    err = capsys.readouterr().err
    assert " INFO spark_sqs.driver.metrics: batch 3: received 7" in err
    assert "not shown" not in err


def test_off_silences_the_package(package_logger) -> None:
    logs.route_to_stderr("OFF", force=True)
    assert not logging.getLogger("spark_sqs.driver").isEnabledFor(logging.CRITICAL)


def test_the_option_takes_each_level_in_any_case() -> None:
    assert make_options().log_level == "INFO"
    assert make_options(logLevel="debug").log_level == "DEBUG"
    assert make_options(logLevel="off").log_level == "OFF"
    with pytest.raises(Exception, match="logLevel"):
        make_options(logLevel="verbose")
