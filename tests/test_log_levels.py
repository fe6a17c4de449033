"""tdscheme.log_levels: the driver's level, handed to Ray and to worker actors."""

from __future__ import annotations

import doctest
import logging

import pytest

import tdscheme.log_levels
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.gradient_workers import GradientWorker, GradientWorkerSpec
from tdscheme.log_levels import (
    WORKER_LOGGERS,
    configure_driver_logging,
    configure_worker_logging,
    driver_log_level,
)
from tdscheme.testing import bias_policy, cartpole_learner, cartpole_modules, make_env


@pytest.fixture
def restore_levels():
    """Puts back the levels of the loggers these tests set, and the root logger's handlers."""
    names = (*WORKER_LOGGERS, "")
    levels = {name: logging.getLogger(name).level for name in names}
    handlers = list(logging.getLogger().handlers)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    for handler in set(logging.getLogger().handlers) - set(handlers):
        logging.getLogger().removeHandler(handler)


def levels() -> dict[str, int]:
    return {name: logging.getLogger(name).level for name in WORKER_LOGGERS}


def test_doctests():
    assert doctest.testmod(tdscheme.log_levels, optionflags=doctest.ELLIPSIS).failed == 0


def test_the_driver_level_is_the_tdscheme_loggers(restore_levels):
    logging.getLogger("tdscheme").setLevel(logging.INFO)
    assert driver_log_level() == logging.INFO
    logging.getLogger("tdscheme").setLevel(logging.NOTSET)  # inherits the root logger's
    logging.getLogger().setLevel(logging.ERROR)
    assert driver_log_level() == logging.ERROR


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO])
def test_worker_logging_sets_tdscheme_torchrl_and_ray(restore_levels, level):
    configure_worker_logging(level)
    assert levels() == dict.fromkeys(WORKER_LOGGERS, level)


@pytest.mark.parametrize("level", [None, 20.0, True])
def test_worker_logging_rejects_a_level_that_is_not_an_int(level):
    with pytest.raises(ValueError, match=rf"level={level!r} is invalid; accepted: an int"):
        configure_worker_logging(level)


def test_driver_logging_sets_tdscheme_and_torchrl(restore_levels):
    configure_driver_logging(logging.INFO)
    assert logging.getLogger("tdscheme").level == logging.INFO
    assert logging.getLogger("torchrl").level == logging.INFO
    configure_driver_logging(logging.WARNING)  # again: only the levels change
    assert logging.getLogger("torchrl").level == logging.WARNING


def test_workers_set_the_level_they_are_given_and_leave_logging_alone_without(restore_levels):
    configure_worker_logging(logging.ERROR)
    spec = WorkerSpec(make_env, bias_policy(4, 2), frames_per_batch=10)
    CollectorWorker(0, spec).shutdown()
    assert levels() == dict.fromkeys(WORKER_LOGGERS, logging.ERROR)  # in-process: untouched
    CollectorWorker(0, spec, log_level=logging.WARNING).shutdown()
    assert levels() == dict.fromkeys(WORKER_LOGGERS, logging.WARNING)
    grad_spec = GradientWorkerSpec(
        make_env, cartpole_modules, cartpole_learner, frames_per_batch=10
    )
    GradientWorker(0, grad_spec, log_level=logging.INFO).shutdown()
    assert levels() == dict.fromkeys(WORKER_LOGGERS, logging.INFO)
