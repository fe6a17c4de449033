"""One real Ray per test session (num_cpus=2, no dashboard), reused by every test; the fast tier.

``pytest -m "not slow"`` is the loop to run while working (CONTRIBUTING.md): every
in-process test and the Ray tests marked ``fast``. A test is ``slow`` when it is marked
so (learning checks, subprocess runs, the multi-node cluster) or when it uses the
session's Ray (a fixture below) without the ``fast`` mark: each Ray actor is a new
process that imports torch and torchrl, seconds of CPU on a 2-core machine.
"""

from __future__ import annotations

import logging
import os

import pytest
import ray
import torch

from tdscheme.runtime import local_ray_config
from tdscheme.testing import alive_actor_ids, assert_no_actors_left
from tdscheme.testing.ray_checks import actor_ids, prestart_workers

#: ``TDSCHEME_TEST_PRESTART=0`` turns off the worker pre-start between tests (to compare)
PRESTART = os.environ.get("TDSCHEME_TEST_PRESTART", "1") != "0"


@pytest.fixture(scope="session")
def ray_session():
    """Starts Ray once for the whole session; tdscheme joins it and never shuts it down.

    It is the local Ray tdscheme would start (worker processes preload torchrl), on 2 CPUs.
    """
    started = not ray.is_initialized()
    if started:
        ray.init(**{**local_ray_config(), "num_cpus": 2, "log_to_driver": False})
    yield ray
    if started:
        ray.shutdown()


def _replace_used_workers(created_before: set[str]) -> None:
    """Pre-starts as many idle workers (up to 2) as the actors created since took.

    Each actor takes a worker process of its own, which dies with it; a new one imports
    torch, tensordict and torchrl for 4-7 s on 2 cores before the next test's actor can
    start. Started now, they import while this test tears down and the next sets up.
    """
    used = len(actor_ids() - created_before)
    if PRESTART and used:
        prestart_workers(min(used, 2))


@pytest.fixture
def ray_clean(ray_session):
    """Like ``ray_session``, and fails the test if it leaves actors alive."""
    before, created_before = alive_actor_ids(), actor_ids()
    yield ray_session
    assert_no_actors_left(before)
    _replace_used_workers(created_before)


@pytest.fixture
def ray_replay_buffer(ray_clean):
    """torchrl's Ray-held buffer of 10,000 frames (its actor takes no CPU), shut down after."""
    import functools

    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10_000), batch_size=8,
        remote_config={"num_cpus": 0},
    )  # fmt: skip
    yield rb
    rb.shutdown()


@pytest.fixture
def by_value(request):
    """Ray's workers get the test module's classes and functions by value (it is not importable there)."""
    ray.cloudpickle.register_pickle_by_value(request.module)
    yield
    ray.cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test, as in a 1-CPU Ray worker; the count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ray_module_clean(ray_session):
    """Like ``ray_clean`` for a module's shared actors: fails the module if they outlive it."""
    before, created_before = alive_actor_ids(), actor_ids()
    yield ray_session
    assert_no_actors_left(before, what="module")
    _replace_used_workers(created_before)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def ledger_imbalances():
    """Fails any test in which a collector's frame ledger met an imbalance (unaccounted frames).

    Every collector a test runs, under whatever fault it injects, is held to its
    ledger. A test that causes imbalances on purpose clears the yielded list.
    """
    handler = _Records()
    ledger_logger = logging.getLogger("tdscheme.collectors.driver.ledger")
    ledger_logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        ledger_logger.removeHandler(handler)
    assert not handler.records, [record.getMessage() for record in handler.records]


#: The fixtures through which a test uses the session's Ray (directly or through another).
RAY_FIXTURES = {"ray_session"}


def pytest_collection_modifyitems(config, items):
    """Marks ``slow`` each test that uses the session's Ray, unless it is marked ``fast``."""
    for item in items:
        if item.get_closest_marker("fast") or item.get_closest_marker("slow"):
            continue
        if RAY_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
