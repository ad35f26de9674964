"""How much a micro-batch may take and when it starts (pure logic, fake clock)."""

from __future__ import annotations

import pytest

from spark_sqs.driver import flow_control
from spark_sqs.driver.flow_control import AvailableNow, FlowControl, default_read_limit
from spark_sqs.options import SqsOptions
from tests.factories import make_options
from tests.fakes import Clock

needs_limits = pytest.mark.skipif(
    flow_control.ReadMaxRows is None, reason="read limits exist from Spark 4.2"
)


def flow(**options: object) -> tuple[FlowControl, Clock]:
    clock = Clock(1000.0)
    parsed: SqsOptions = make_options(**options)
    return FlowControl(parsed, clock=clock), clock


def test_without_a_read_limit_the_option_applies() -> None:
    control, _ = flow(maxMessagesPerTrigger="250")
    assert control.batch_limit(None, in_flight=0) == 250


@needs_limits
def test_read_max_rows_from_spark_is_honoured() -> None:
    control, _ = flow(maxMessagesPerTrigger="250")
    assert default_read_limit(make_options(maxMessagesPerTrigger="250")).max_rows == 250
    assert control.batch_limit(flow_control.ReadMaxRows(40), in_flight=0) == 40


@needs_limits
def test_read_all_available_ignores_the_option_but_not_the_in_flight_ceiling() -> None:
    control, _ = flow(maxMessagesPerTrigger="250", maxInFlightMessages="5000")
    assert control.batch_limit(flow_control.ReadAllAvailable(), in_flight=0) == 5000
    assert control.batch_limit(flow_control.ReadAllAvailable(), in_flight=4900) == 100


def test_in_flight_ceiling_caps_and_stops_batches(caplog: pytest.LogCaptureFixture) -> None:
    control, _ = flow(maxMessagesPerTrigger="1000", maxInFlightMessages="1200")
    assert control.batch_limit(None, in_flight=500) == 700
    assert control.batch_limit(None, in_flight=1200) == 0
    assert "maxInFlightMessages=1200" in caplog.text


def test_min_messages_waits_until_the_delay_is_over() -> None:
    control, clock = flow(minMessagesPerTrigger="100", maxTriggerDelay="30")
    assert control.wait_for_more(visible=10)
    clock.now += 29.9
    assert control.wait_for_more(visible=10)
    clock.now += 0.2
    assert not control.wait_for_more(visible=10), "never longer than maxTriggerDelay"
    control.started_batch()
    assert control.wait_for_more(visible=10), "the delay counts from the last batch"
    assert not control.wait_for_more(visible=100), "enough messages start a batch at once"


def test_no_minimum_never_waits() -> None:
    control, _ = flow()
    assert not control.wait_for_more(visible=1)


def test_available_now_counts_down_what_was_visible_at_the_start() -> None:
    control, _ = flow(minMessagesPerTrigger="100")
    assert control.remaining_available_now(delivered=7) is None
    control.available_now = AvailableNow(target=300, delivered_at_start=50)
    assert control.remaining_available_now(delivered=50) == 300
    assert control.remaining_available_now(delivered=290) == 60
    assert control.remaining_available_now(delivered=400) == 0
    assert not control.wait_for_more(visible=1), "AvailableNow never waits for a fuller batch"


def test_min_above_max_is_rejected() -> None:
    from spark_sqs.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="minMessagesPerTrigger"):
        make_options(minMessagesPerTrigger="500", maxMessagesPerTrigger="100")


def test_batches_above_half_the_in_flight_limit_are_warned_about_with_the_fix() -> None:
    """Two batches count against maxInFlightMessages at once (the committed one until the next
    batch's receivers delete it): a user whose batches exceed half of it is told so at start."""
    warning = flow_control.batch_size_warning
    assert warning(make_options(maxMessagesPerTrigger="30000")) is None  # exactly half
    smaller = warning(make_options(maxMessagesPerTrigger="40000"))
    assert smaller is not None
    assert "maxMessagesPerTrigger=40000" in smaller and "maxInFlightMessages=60000" in smaller
    assert "fewer rows" in smaller and "at most 30000" in smaller
    empty = warning(make_options(maxMessagesPerTrigger="100", maxInFlightMessages="100"))
    assert empty is not None and "delivers no rows" in empty
    assert "deleteAfterJournal=true" in empty
    # Neither mode counts a committed batch against the limit.
    assert (
        warning(
            make_options(
                maxMessagesPerTrigger="100", maxInFlightMessages="100", deleteAfterJournal="true"
            )
        )
        is None
    )
    assert (
        warning(
            make_options(
                maxMessagesPerTrigger="100", maxInFlightMessages="100", deleteOnCommit="false"
            )
        )
        is None
    )
