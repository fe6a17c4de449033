"""torchrl RayCollector's attribute names on tdscheme's RayCollector, on a real Ray."""

from __future__ import annotations

import pytest
import torch
from torchrl.testing.mocking_classes import CountingEnv

from tdscheme import RayCollector
from tdscheme.rollout.torchrl_names import Collector
from tdscheme.testing import CountingPolicy

SMALL = {"num_cpus": 0.5}


def test_torchrl_attributes_describe_the_workers_and_the_hook_runs_in_every_worker(ray_clean):
    with RayCollector(
        [CountingEnv, CountingEnv], CountingPolicy(), frames_per_batch=10, total_frames=40,
        device="cpu", storing_device=["cpu", None], update_after_each_batch=True,
        max_weight_update_interval=3, trust_policy=True, remote_configs=SMALL,
        init_random_frames=4,
        # a lambda: Ray workers get it by value (they cannot import this test module)
        post_collect_hook=lambda batch: batch.set("hooked", torch.ones(batch.batch_size)),
    ) as collector:  # fmt: skip
        assert collector.init_random_frames == 4  # torchrl's trainers wait for these frames
        assert collector.num_workers == collector.num_collectors == 2
        assert collector.remote_collectors == collector.workers
        assert len(collector.remote_collectors) == 2
        # no collector_class: tdscheme's LeanCollector, a torchrl Collector
        assert issubclass(collector.collector_class, Collector)
        assert [kw["trust_policy"] for kw in collector.collector_kwargs] == [True, True]
        assert collector.device == ["cpu", "cpu"]
        assert collector.storing_device == ["cpu", None]
        assert collector.env_device == collector.policy_device == [None, None]
        assert collector.update_after_each_batch is True
        assert collector.max_weight_update_interval == 3
        assert collector.trust_policy is True
        assert collector.requested_frames_per_batch == 10
        assert len(collector) == 4  # torchrl's __len__: batches up to total_frames
        with pytest.raises(AttributeError):
            collector.update_after_each_batch = False  # applied when the workers were built
        assert callable(collector.post_collect_hook)  # torchrl keeps it on the driver too
        batches = list(collector)  # list() calls len(): torchrl's __len__ must work
    assert len(batches) == 4
    assert all((b["hooked"] == 1).all() for b in batches)


def test_torchrl_weight_arguments_the_remaining_attributes_and_stop_remote_collectors(
    ray_clean,
):
    policy = CountingPolicy()
    collector = RayCollector(
        [CountingEnv], policy, frames_per_batch=10, total_frames=-1, no_cuda_sync=False,
        remote_configs=SMALL,
    )  # fmt: skip
    try:
        assert collector.init_random_frames == 0  # torchrl reads -1 as 0
        assert collector.no_cuda_sync is False
        assert collector.policy_factory == [None]
        assert collector.local_policy() is policy
        weights = collector.policy_weights
        assert weights.is_locked and weights["weight"].item() == 1
        with torch.no_grad():
            policy.weight += 1
        assert collector.policy_weights["weight"].item() == 2  # a view of the policy's
        collector.update_policy_weights_(weights_dict={"policy": collector.policy_weights})
        collector.update_policy_weights_(policy, model_id="policy")
        assert collector.policy_version == 2
        batch = next(iter(collector))
        assert batch.numel() == 10 and (batch["action"] == 2).all()  # the new weights run
        with pytest.raises(ValueError, match="model_id='critic' is invalid"):
            collector.update_policy_weights_(policy, model_id="critic")
        with pytest.raises(ValueError, match="model_id='critic' is invalid"):
            collector.update_policy_weights_(weights_dict={"critic": policy})
        with pytest.raises(ValueError, match="weights_dict cannot be combined"):
            collector.update_policy_weights_(policy, weights_dict={"policy": policy})
        assert collector.policy_version == 2
        # torchrl's stop_remote_collectors shuts the collector down
        collector.stop_remote_collectors()
        assert collector.remote_collectors == []
        with pytest.raises(RuntimeError, match="is shut down"):
            collector.update_policy_weights_()
    finally:
        collector.shutdown()  # still fine (idempotent); ray_clean checks that no actor is left
