"""Placement: actors Ray cannot place are a clear error at construction, never a hang."""

from __future__ import annotations

import pytest
import ray

from tdscheme import RayCollector
from tdscheme.runtime.placement import PlacementError
from tdscheme.testing import make_env


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
