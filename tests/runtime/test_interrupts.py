"""The stop request of tdscheme's signal handlers and its grace period."""

from __future__ import annotations

import logging
import signal
import time

import pytest

from tdscheme.runtime import interrupts


@pytest.fixture
def handlers():
    interrupts.install(grace_s=0.5)
    yield
    interrupts.uninstall()


def test_the_grace_period_outlasts_the_longest_recent_step(handlers, caplog):
    assert interrupts.grace_period_s() == 0.5  # no step yet: grace_s
    for seconds in (0.1, 0.4, 0.2):
        interrupts.note_step(seconds)
    assert interrupts.grace_period_s() == pytest.approx(1.2)  # 3 x the longest
    for _ in range(interrupts.RECENT_STEPS):  # the long step ages out of the window
        interrupts.note_step(0.01)
    assert interrupts.grace_period_s() == 0.5
    interrupts.note_step(0.4)
    with caplog.at_level(logging.WARNING, logger=interrupts.__name__):
        signal.raise_signal(signal.SIGINT)
        assert interrupts.stop_requested() == "SIGINT" and not interrupts.forced()
        assert "within 1 s" in caplog.text  # the message states the period it set
        with pytest.raises(KeyboardInterrupt):  # a step that outlasts it is forced to stop
            time.sleep(30)
    assert interrupts.forced() and "did not end within 1 s; forcing" in caplog.text


def test_a_second_signal_forces_the_stop_at_once(handlers):
    interrupts.note_step(100.0)  # a long grace period: only the second signal forces
    signal.raise_signal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM: stop forced"):
        signal.raise_signal(signal.SIGTERM)
    assert interrupts.forced() and interrupts.exit_status() == 143
