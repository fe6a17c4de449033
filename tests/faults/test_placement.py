"""Placement: actors Ray cannot place are a clear error at construction, never a hang."""

from __future__ import annotations

import pytest
import ray

from tdscheme import RayCollector
from tdscheme.errors import PlacementError
from tdscheme.testing import make_env


@pytest.mark.fast
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"num_collectors": 4}, "CPU: 4 asked in all, the cluster has 2"),
        ({"remote_configs": {"num_cpus": 8}}, "CPU: 8 asked by one actor"),
        ({"remote_configs": {"num_gpus": 1}}, "GPU: 1 asked by one actor"),
    ],
)
def test_impossible_request_is_an_error_at_construction(ray_clean, kwargs, shown):
    with pytest.raises(PlacementError) as info:
        RayCollector(make_env, frames_per_batch=20, total_frames=40, **kwargs)
    message = str(info.value)
    assert shown in message
    assert "remote_configs" in message and "--num-collectors" in message
    assert "CPU=2" in message  # the cluster's resources


@ray.remote(num_cpus=2)
class _Placeholder:
    def ping(self) -> int:
        return 1


@pytest.mark.timeout(240)
def test_pending_request_is_an_error_after_actor_start_timeout_s(ray_clean):
    holder = _Placeholder.remote()
    try:
        ray.get(holder.ping.remote(), timeout=150)  # a new worker process: slow on a loaded machine
        with pytest.raises(PlacementError, match=r"did not start within actor_start_timeout_s=1"):
            RayCollector(make_env, frames_per_batch=20, total_frames=40, actor_start_timeout_s=1)
    finally:
        ray.kill(holder)


@pytest.mark.timeout(120)
def test_placement_wait_lets_a_request_beyond_the_cluster_wait_for_an_autoscaler(ray_clean):
    """placement="wait": no refusal at construction; pending workers wait actor_start_timeout_s."""
    with pytest.raises(PlacementError, match=r"did not start within actor_start_timeout_s=2"):
        RayCollector(
            make_env, frames_per_batch=20, total_frames=40, num_collectors=4,
            placement="wait", actor_start_timeout_s=2,
        )  # fmt: skip
    with pytest.raises(
        ValueError, match=r"placement='later' is invalid; accepted: 'check', 'wait'"
    ):
        RayCollector(make_env, frames_per_batch=20, placement="later")


def test_placement_reaches_both_kinds_of_worker_from_the_scheme_config():
    from tdscheme import SchemeConfig

    config = SchemeConfig(placement="wait", num_collectors=2, frames_per_batch=64)
    assert config.collector_config(make_env, None).placement == "wait"
    grads = SchemeConfig(placement="wait", num_grad_workers=2, frames_per_batch=64)
    assert grads.grad_workers_config().placement == "wait"
    with pytest.raises(ValueError, match=r"placement='soon' is invalid; accepted: 'check', 'wait'"):
        SchemeConfig(placement="soon")
