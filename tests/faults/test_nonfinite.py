"""NaN / inf from an env, in a loss or a gradient: named, skipped, counted, stopped after K in a row."""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict

from tdscheme import Scheme, SchemeConfig
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.errors import NonFiniteInputError, NonFiniteUpdateError
from tdscheme.keys import WORKER_ID_KEY
from tdscheme.learner import Learner, LearnerConfig
from tdscheme.testing import cartpole_learner, cartpole_modules, make_env


def rollout_batch(frames: int = 32, *, worker_id: int = 3) -> TensorDict:
    modules = cartpole_modules(num_cells=8)
    env = make_env("CartPole-v1")
    with torch.no_grad():
        batch = env.rollout(frames, modules["actor"], break_when_any_done=False)
    env.close()
    batch.set(WORKER_ID_KEY, torch.full(batch.shape, worker_id))
    return batch


def learner(**config) -> Learner:
    modules = cartpole_modules(num_cells=8)
    built = cartpole_learner(**modules, loss="ppo")
    return Learner(
        built.loss_module, config=LearnerConfig(**config), value_estimator=built.value_estimator
    )


def snapshot(model: Learner) -> TensorDict:
    return model.weights()


def test_inf_reward_skips_the_update_counts_it_and_stops_after_k_in_a_row():
    model = learner(max_nonfinite_updates=2)
    good = rollout_batch()
    bad = good.clone()
    bad["next", "reward"][5] = float("inf")
    before = snapshot(model)
    metrics = model.update(bad)
    assert metrics["nonfinite_skipped"] == 1 and metrics["nonfinite_skipped_total"] == 1
    assert model.version == 0
    assert (model.weights() == before).all()  # no step was taken with it
    assert model.update(good)["nonfinite_skipped"] == 0  # a good one ends the run of skips
    assert model.version == 1
    model.update(bad)
    with pytest.raises(
        NonFiniteUpdateError, match=r"2 updates in a row .*'reward'.*worker\(s\) \[3\]"
    ):
        model.update(bad)


def test_nan_loss_skips_the_step_and_never_changes_the_weights():
    model = learner(max_nonfinite_updates=5)
    batch = rollout_batch()
    batch["action_log_prob"] = torch.full_like(batch["action_log_prob"], float("nan"))
    before = snapshot(model)
    metrics = model.update(batch)
    assert metrics["nonfinite_skipped"] == 1
    assert (model.weights() == before).all()


def test_drop_option_drops_and_counts_the_frames():
    model = learner(drop_nonfinite_frames=True)
    batch = rollout_batch()
    batch["next", "reward"][4] = float("nan")
    batch["next", "observation"][7, 0] = float("inf")
    metrics = model.update(batch)
    assert metrics["nonfinite_skipped"] == 0 and metrics["nonfinite_frames_dropped"] == 2
    assert metrics["num_frames"] == 30 and model.version == 1
    assert all(torch.isfinite(v).all() for v in model.weights().values(True, True))


def test_nan_gradients_are_not_applied():
    model = learner()
    grads, _ = model.compute_gradients(rollout_batch())
    key = next(iter(grads.keys(True, True)))
    grads[key] = torch.full_like(grads[key], float("nan"))
    before = snapshot(model)
    assert model.apply_gradients(grads)["nonfinite_skipped"] == 1
    assert model.version == 0 and (model.weights() == before).all()


def test_compute_gradients_gives_no_gradient_for_a_bad_batch_loss_or_norm():
    model = learner(max_nonfinite_updates=1)  # compute_gradients counts nothing: no raise
    good = rollout_batch()
    bad = good.clone()
    bad["next", "reward"][5] = float("inf")
    for _ in range(3):
        grads, metrics = model.compute_gradients(bad)
        assert grads is None and set(metrics.keys()) == {"lr", "num_frames"}
        assert "('next', 'reward')" in model.last_nonfinite
        assert "worker(s) [3]" in model.last_nonfinite
    nan_loss = good.clone()
    nan_loss["action_log_prob"] = torch.full_like(nan_loss["action_log_prob"], float("nan"))
    assert model.compute_gradients(nan_loss)[0] is None
    assert "action_log_prob" in model.last_nonfinite
    grads, metrics = model.compute_gradients(good)
    assert model.last_nonfinite is None and metrics["num_frames"] == 32
    assert all(torch.isfinite(g).all() for g in grads.values(True, True))
    zeros = model.zero_gradients()
    assert set(zeros.keys(True, True)) == set(grads.keys(True, True))
    assert not any(z.any() for z in zeros.values(True, True))
    assert model.version == 0 and all(p.grad is None for p in model.loss_module.parameters())


def test_compute_gradients_honours_drop_nonfinite_frames():
    model = learner(drop_nonfinite_frames=True)
    batch = rollout_batch()
    batch["next", "reward"][4] = float("nan")
    grads, metrics = model.compute_gradients(batch)
    assert grads is not None and model.last_nonfinite is None
    assert metrics["nonfinite_frames_dropped"] == 1 and metrics["num_frames"] == 31
    assert all(torch.isfinite(g).all() for g in grads.values(True, True))


@pytest.mark.parametrize("field", ["max_nonfinite_updates", "drop_nonfinite_frames"])
def test_config_checks_the_new_fields(field):
    with pytest.raises(ValueError, match=rf"{field}=0.5 is invalid; accepted: "):
        LearnerConfig(**{field: 0.5})


def test_nan_observation_in_a_worker_names_key_worker_and_step():
    env_fn = functools.partial(
        make_env, "CartPole-v1", nonfinite_at_step=7, nonfinite_in="observation",
        nonfinite_every=True,
    )  # fmt: skip
    actor = cartpole_modules(num_cells=8)["actor"]
    worker = CollectorWorker(2, WorkerSpec(env_fn, actor, frames_per_batch=20))
    try:
        with pytest.raises(
            NonFiniteInputError, match=r"'observation' \(first at step 8\) from worker 2"
        ):
            worker.collect(0)
    finally:
        worker.shutdown()


@pytest.mark.timeout(180)
def test_inf_rewards_in_a_run_skip_updates_push_nothing_and_stop(ray_clean):
    env_fn = functools.partial(make_env, "CartPole-v1", nonfinite_at_step=100, nonfinite_every=True)
    config = SchemeConfig(
        num_collectors=1, frames_per_batch=64, collector_resources={"num_cpus": 0.5}, seed=0
    )
    learner_fn = functools.partial(cartpole_learner, loss="ppo")
    modules_fn = functools.partial(cartpole_modules, num_cells=8)
    with Scheme(
        env_factory=env_fn, policy_factory=modules_fn, learner_factory=learner_fn, config=config
    ) as scheme:
        assert scheme.step()["learner/nonfinite_skipped"] == 0  # frames 1-64: finite until step 100
        pushes = scheme.collector.stats()["weight_pushes"]
        with pytest.raises(NonFiniteUpdateError, match=r"'reward'.*worker\(s\) \[0\]"):
            for _ in range(4):
                metrics = scheme.step()
                assert metrics["learner/nonfinite_skipped"] == 1
        assert scheme.collector.stats()["weight_pushes"] == pushes  # NaN weights never pushed
        assert scheme.learner.version == 1


def test_workers_leave_nonfinite_frames_out_of_a_ray_held_buffer(ray_clean):
    """drop_nonfinite_frames: NaN rewards from step 40 on never reach the buffer; counted, budget kept."""
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme import RayCollector
    from tdscheme.testing import mlp_policy

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 5_000), batch_size=8,
        remote_config={"num_cpus": 0},
    )  # fmt: skip
    nan_rewards = functools.partial(
        make_env, "CartPole-v1", nonfinite_at_step=40, nonfinite_every=True
    )
    clean = functools.partial(make_env, "CartPole-v1")
    try:
        with RayCollector(
            [clean, nan_rewards], mlp_policy(4, 2), frames_per_batch=100, total_frames=600,
            num_collectors=2, replay_buffer=rb, drop_nonfinite_frames=True,
            remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            for _ in collector:
                pass
            stats = collector.stats(timeout=10)
        data = rb[:]
        assert len(rb) == 600 == stats["frames"], str(
            stats["ledger"]
        )  # dropped: none of the budget
        assert torch.isfinite(data["next", "reward"]).all()
        assert stats["frames_dropped"] > 0 and stats["ledger"]["balanced"], stats["ledger"]
    finally:
        rb.shutdown()
    with pytest.raises(
        ValueError, match=r"drop_nonfinite_frames=True is invalid with replay_buffer=None"
    ):
        RayCollector(clean, frames_per_batch=20, drop_nonfinite_frames=True)


def test_a_worker_whose_frames_are_all_nonfinite_stops_instead_of_writing_nothing_for_ever(
    ray_clean,
):
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    from tdscheme import RayCollector
    from tdscheme.errors import WorkerError
    from tdscheme.testing import mlp_policy

    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 1_000), batch_size=8,
        remote_config={"num_cpus": 0},
    )  # fmt: skip
    all_nan = functools.partial(make_env, "CartPole-v1", nonfinite_at_step=1, nonfinite_every=True)
    try:
        with RayCollector(
            all_nan, mlp_policy(4, 2), frames_per_batch=20, total_frames=1_000,
            replay_buffer=rb, drop_nonfinite_frames=True, max_restarts=0,
            remote_configs={"num_cpus": 0.5},
        ) as collector:  # fmt: skip
            with pytest.raises(WorkerError, match=r"10 batches in a row held only frames with NaN"):
                for _ in collector:
                    pass
        assert len(rb) == 0
    finally:
        rb.shutdown()


def test_nonfinite_entries_names_exactly_the_tensors_holding_nan_or_inf():
    from tdscheme.finite import nonfinite_entries

    entries = [
        ("finite", torch.ones(4)),
        ("overflows", torch.full((4,), 3e38)),  # finite values whose float32 sum is inf
        ("nan", torch.tensor([1.0, float("nan")])),
        ("both_infs", torch.tensor([float("inf"), float("-inf")])),  # a NaN sum
        ("inf_half", torch.tensor([float("inf")], dtype=torch.float16)),
        ("complex", torch.tensor([1 + 1j, complex(1, float("inf"))])),
        ("empty", torch.ones(0)),
        ("ints", torch.arange(3)),  # not floating point: never checked
    ]
    assert nonfinite_entries(entries) == ["nan", "both_infs", "inf_half", "complex"]
    assert nonfinite_entries(entries[:2]) == []
