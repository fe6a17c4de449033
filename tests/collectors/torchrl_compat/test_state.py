"""RayCollector.state_dict / load_state_dict in torchrl's format, loaded non-strictly."""

from __future__ import annotations

import collections

import pytest
import torch
from torchrl.testing.mocking_classes import CountingEnv

from tdscheme import RayCollector
from tdscheme.errors import WorkerError
from tdscheme.testing import CountingPolicy, kill_and_wait

SMALL = {"num_cpus": 0.5}


def counting_collector(num_workers: int = 2) -> RayCollector:
    return RayCollector(
        [CountingEnv] * num_workers, CountingPolicy(), frames_per_batch=10, total_frames=-1,
        remote_configs=SMALL,
    )  # fmt: skip


def test_state_is_torchrls_per_worker_list_and_round_trips_and_other_states_load(ray_clean):
    """Our own state round trips; torchrl's load non-strictly; tdscheme's former form loads."""
    with counting_collector() as collector:
        it = iter(collector)
        next(it), next(it)
        collector.update_policy_weights_()
        state = collector.state_dict()
        # torchrl's format: one torchrl collector state_dict per worker
        assert isinstance(state, list) and len(state) == 2
        for worker in state:
            assert isinstance(worker, collections.OrderedDict)
            assert {"env_state_dict", "policy_state_dict", "frames", "iter"} <= set(worker)
        assert sum(w["frames"] for w in state) >= 20  # and the batches prefetched
        driver = state[0]["tdscheme"]["driver"]
        assert driver == {"frames": 20, "batches": 2, "policy_version": 1, "env_config_version": 0}
        # our own round trip on torchrl's CountingEnv (strict loading used to fail here)
        collector.load_state_dict(state)
        assert collector.policy_version == 1 and collector.collected_frames == 20
        del it

        # torchrl's states, loaded non-strictly
        plain = collections.OrderedDict(frames=7, iter=3)  # no env nor policy state
        collector.load_state_dict(plain)  # torchrl: one OrderedDict for every worker
        assert collector.get_distant_attr("_frames") == [7, 7]
        assert collector.collected_frames == 20  # a torchrl state has no driver counters
        collector.load_state_dict([plain, collections.OrderedDict(frames=9, iter=1)])
        assert collector.get_distant_attr("_frames") == [7, 9]
        with pytest.raises(ValueError, match="3 worker states"):
            collector.load_state_dict([plain] * 3)

        # tdscheme's former state, from old checkpoints
        old_workers = []
        for weight, current in zip((3.0, 4.0), state, strict=True):
            collector_state = {k: v for k, v in current.items() if k != "tdscheme"}
            collector_state["policy_state_dict"] = {"weight": torch.tensor(weight)}
            old_workers.append({"collector": collector_state, "policy_version": 4})
        old = {"frames": 50, "batches": 5, "policy_version": 4, "workers": old_workers}
        collector.load_state_dict(old)
        assert collector.policy_version == 4 and collector.collected_frames == 50
        loaded = collector.get_distant_attr("policy.weight")
        assert loaded == [torch.tensor(3.0), torch.tensor(4.0)]
    with counting_collector() as fresh:  # exact resume: counters and versions come back
        fresh.load_state_dict(state)
        assert fresh.policy_version == 1 and fresh.collected_frames == 20
        assert sorted(fresh.get_distant_attr("_frames")) == sorted(w["frames"] for w in state)


def test_a_worker_killed_during_a_checkpoint_is_rebuilt_not_the_end_of_the_run(ray_clean):
    """Found by the off-policy soak: a collector killed as the Trainer saved stopped the run."""
    with counting_collector(num_workers=1) as collector:
        it = iter(collector)
        next(it)
        kill_and_wait(collector.workers[0])  # ray.kill returns before the actor is dead
        state = collector.state_dict()  # before: WorkerError "died during state_dict"
        assert len(state) == 1 and collector.stats(timeout=10)["restarts"] == 1
        next(it)  # iteration goes on with the rebuilt worker
        del it
        # the other calls that may be asked again
        kill_and_wait(collector.workers[0])
        collector.load_state_dict(state)  # before: "died during load_state_dict"
        kill_and_wait(collector.workers[0])
        assert isinstance(collector.set_seed(7), int)  # before: "died during set_seed"
        assert collector.stats(timeout=10)["restarts"] == 3
        assert next(iter(collector)).numel() == 10  # the rebuilt worker collects
        collector._pool.max_restarts = 0  # a death past max_restarts is still an error
        kill_and_wait(collector.workers[0])
        with pytest.raises(WorkerError, match=r"died 4 times \(max_restarts=0\)"):
            collector.state_dict()
