"""map_fn and get_distant_attr reach each worker's torchrl collector, as in torchrl."""

from __future__ import annotations

import pytest
from torchrl.testing.mocking_classes import CountingEnv

from tdscheme import RayCollector
from tdscheme.errors import WorkerError
from tdscheme.testing import CountingPolicy

SMALL = {"num_cpus": 0.5}


@pytest.fixture(scope="module")
def two_workers(ray_module_clean):
    """Shared by the module's tests (in file order: the first reads the untouched counters)."""
    collector = RayCollector(
        [CountingEnv, CountingEnv], CountingPolicy(), frames_per_batch=10, total_frames=-1,
        remote_configs=SMALL,
    )  # fmt: skip
    yield collector
    collector.shutdown()


def test_get_distant_attr_reads_each_remote_collector(two_workers):
    # The driver is a RayCollector (frames_per_batch 10); each remote torchrl collector
    # has its own attributes: the worker index torchrl's collectors know is not set on
    # the driver at all.
    assert two_workers.get_distant_attr("frames_per_batch") == [10, 10]
    assert two_workers.get_distant_attr("env.__class__.__name__") == ["CountingEnv"] * 2
    assert two_workers.get_distant_attr("_frames") == [0, 0]


def test_map_fn_calls_each_remote_collector_with_its_own_arguments(two_workers):
    seeds = two_workers.map_fn("set_seed", list_of_args=[(10,), (20,)])
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    assert all(isinstance(s, int) for s in seeds)
    # keyword arguments, and a non-callable attribute returned as it is (torchrl's rule)
    assert two_workers.map_fn("set_seed", list_of_kwargs=[{"seed": 10}, {"seed": 20}]) == seeds
    assert two_workers.map_fn("frames_per_batch") == [10, 10]
    next(iter(two_workers))
    # waits behind the batches in flight (prefetch), then reads the frame counters
    assert sum(two_workers.map_fn("_frames")) >= 10


def test_remote_errors_name_the_worker_and_carry_the_traceback(two_workers):
    with pytest.raises(WorkerError, match="collector worker 0") as err:
        two_workers.get_distant_attr("no_such_attribute")
    assert "AttributeError" in str(err.value) and err.value.remote_traceback
    with pytest.raises(ValueError, match="list_of_args has 1 entries"):
        two_workers.map_fn("set_seed", list_of_args=[(1,)])
