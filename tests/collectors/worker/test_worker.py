"""CollectorWorker runs in-process, unchanged, without Ray."""

from __future__ import annotations

import functools
import warnings

import torch
from tensordict import TensorDict

from tdscheme.collectors import POLICY_VERSION_KEY, WORKER_ID_KEY, CollectorWorker, WorkerSpec
from tdscheme.collectors.worker.actor import WORKER_STATE_KEY
from tdscheme.rollout.torchrl_names import Collector, MultiSyncCollector, default_collector_kwargs
from tdscheme.testing import bias_policy, make_env
from tdscheme.transport import TensorDictCodec

pendulum = functools.partial(make_env, "Pendulum-v1")


def decode(batch):
    return TensorDictCodec().decode(batch.payload)


def test_batches_are_stamped_and_follow_pushed_weights():
    worker = CollectorWorker(
        3, WorkerSpec(pendulum, bias_policy(3, 1, bias=0.5), frames_per_batch=20)
    )
    try:
        first = worker.collect(batch_id=1)
        td = decode(first)
        assert (first.worker_id, first.frames, first.policy_version) == (3, 20, 0)
        assert (td[WORKER_ID_KEY] == 3).all() and (td[POLICY_VERSION_KEY] == 0).all()
        assert torch.allclose(td["action"], torch.full((20, 1), 0.5))

        weights = TensorDictCodec().encode(TensorDict.from_module(bias_policy(3, 1, bias=-1.5)))
        assert worker.set_weights(weights, policy_version=4) == 4
        td = decode(worker.collect(batch_id=2))
        assert (td[POLICY_VERSION_KEY] == 4).all()
        assert torch.allclose(td["action"], torch.full((20, 1), -1.5))
    finally:
        worker.shutdown()
        worker.shutdown()


def test_preempted_batch_stops_at_a_step_boundary():
    spec = WorkerSpec(pendulum, bias_policy(3, 1), frames_per_batch=50, preemptible=True)
    worker = CollectorWorker(0, spec)
    try:
        full = worker.collect(batch_id=1)
        assert (full.frames, full.preempted) == (50, False)
        worker.preempt(2)  # arrives before batch 2 starts: one step is kept
        cut = worker.collect(batch_id=2)
        assert (cut.frames, cut.preempted) == (1, True)
        assert worker.collect(batch_id=3).frames == 50  # later batches are not affected
    finally:
        worker.shutdown()


def test_seeded_workers_reproduce_and_state_round_trips():
    def observations(seed):
        worker = CollectorWorker(
            0, WorkerSpec(make_env, bias_policy(4, 2), frames_per_batch=30), seed=seed
        )
        try:
            return decode(worker.collect(1))["observation"], worker.state_dict()
        finally:
            worker.shutdown()

    (a, state), (b, _), (c, _) = observations(5), observations(5), observations(6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # torchrl's collector state, plus the worker's own entry
    assert state["tdscheme"] == {"policy_version": 0, "env_config": None}
    assert "env_state_dict" in state


def test_a_module_policy_collects_without_torchrl_future_warning_nor_new_keys():
    # torchrl 0.14 warns that 0.15 will append InitTracker to the env of any nn.Module
    # policy unless told; the worker opts out, so the env and its frames stay as built.
    spec = WorkerSpec(pendulum, bias_policy(3, 1, bias=0.5), frames_per_batch=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = CollectorWorker(0, spec)
        try:
            td = decode(worker.collect(0))
        finally:
            worker.shutdown()
    assert not [w for w in caught if "auto_register_policy_transforms" in str(w.message)]
    assert "is_init" not in td.keys()


def test_a_users_collector_kwargs_win_over_the_workers_defaults():
    spec = WorkerSpec(
        pendulum, bias_policy(3, 1, bias=0.5), frames_per_batch=10,
        collector_kwargs={"auto_register_policy_transforms": True},
    )  # fmt: skip
    worker = CollectorWorker(0, spec)
    try:
        td = decode(worker.collect(0))
    finally:
        worker.shutdown()
    assert "is_init" in td.keys()  # torchrl appended InitTracker, as asked


def test_default_collector_kwargs_only_for_collectors_that_take_them():
    assert default_collector_kwargs(Collector) == {"auto_register_policy_transforms": False}
    assert default_collector_kwargs(MultiSyncCollector) == {
        "auto_register_policy_transforms": False
    }

    class OwnCollector(Collector):
        def __init__(self, env, policy, **kwargs):
            super().__init__(env, policy, **kwargs)

    assert default_collector_kwargs(OwnCollector) == {}
    default_collector_kwargs(Collector)["auto_register_policy_transforms"] = True
    assert default_collector_kwargs(Collector)["auto_register_policy_transforms"] is False


def test_state_round_trips_with_an_env_that_has_buffers():
    """torchrl's Collector.state_dict leaves a plain env's buffers out; loading still works."""
    from torchrl.testing.mocking_classes import CountingEnv

    from tdscheme.testing import CountingPolicy

    worker = CollectorWorker(0, WorkerSpec(CountingEnv, CountingPolicy(), frames_per_batch=4))
    other = CollectorWorker(0, WorkerSpec(CountingEnv, CountingPolicy(), frames_per_batch=4))
    try:
        worker.collect(batch_id=1)
        state = worker.state_dict()
        state[WORKER_STATE_KEY]["policy_version"] = 2
        other.load_state_dict(state)  # raised "Missing key(s) in state_dict: count" before
        assert other.policy_version == 2
        assert other.state_dict()["frames"] == 4
    finally:
        worker.shutdown()
        other.shutdown()


def test_progress_counts_the_env_steps_of_the_lean_loop_and_of_torchrls():
    """The stall monitor reads progress(); the lean loop steps the env without torchrl's call."""
    from tdscheme.envs import make_env as make_batched

    env_fn = functools.partial(make_batched, "CartPole-v1", num_envs=4)
    for collector_class in (None, Collector):
        chosen = {} if collector_class is None else {"collector_class": collector_class}
        spec = WorkerSpec(env_fn, None, frames_per_batch=40, **chosen)
        worker = CollectorWorker(0, spec)
        try:
            assert (worker.started()["fast_path"] is True) is (collector_class is None)
            worker.collect(0)
            worker.collect(1)
            assert worker.progress() == 80, collector_class
        finally:
            worker.shutdown()
