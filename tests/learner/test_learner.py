"""The Learner on real torchrl losses (ClipPPOLoss, A2CLoss) and real CartPole batches."""

from __future__ import annotations

import math
import pickle
from functools import partial

import cloudpickle
import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.collectors import Collector
from torchrl.objectives import A2CLoss, ClipPPOLoss, LossModule
from torchrl.objectives.value import GAE

from tdscheme.learner import MASK_KEY, Learner, LearnerConfig, average_gradients
from tdscheme.testing import cartpole_modules, make_env, seed_collector

# float32 sums over 200 frames in a different order: agreement to a few ulps of the values.
ATOL, RTOL = 1e-6, 1e-5


def build_cartpole_agent(*, seed: int = 0, num_cells: int = 16) -> tuple[nn.Module, nn.Module]:
    """A CartPole actor (logits -> OneHotCategorical) and critic, seeded."""
    torch.manual_seed(seed)
    modules = cartpole_modules(num_cells=num_cells)
    return modules["actor"], modules["critic"]


def build_ppo_cartpole(
    *, seed: int = 0, loss: str = "ppo"
) -> tuple[nn.Module, nn.Module, LossModule, GAE]:
    """Actor, critic, ClipPPOLoss (or A2CLoss) and GAE for CartPole."""
    actor, critic = build_cartpole_agent(seed=seed)
    if loss == "ppo":
        loss_module = ClipPPOLoss(actor, critic, normalize_advantage=False)
    else:
        loss_module = A2CLoss(actor, critic)
    return actor, critic, loss_module, GAE(gamma=0.99, lmbda=0.95, value_network=critic)


def build_learner(*, seed: int = 0, loss: str = "ppo", gae: bool = True, **kwargs) -> Learner:
    _, _, loss_module, value_estimator = build_ppo_cartpole(seed=seed, loss=loss)
    return Learner(loss_module, value_estimator=value_estimator if gae else None, **kwargs)


def collect(*, num_envs: int = 1, split_trajs: bool = False) -> TensorDict:
    """One real 200-frame batch, collected by the seed-0 actor (so PPO ratios start at 1)."""
    actor, _ = build_cartpole_agent(seed=0)
    collector = Collector(
        partial(make_env, "CartPole-v1", num_envs=num_envs),
        actor,
        frames_per_batch=200,
        total_frames=-1,
        split_trajs=split_trajs,
        auto_register_policy_transforms=False,
    )
    try:
        seed_collector(collector, 0)
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    return batch.clone()


@pytest.fixture(scope="module")
def batch() -> TensorDict:
    return collect()


def assert_weights_close(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in a.items(True, True):
        torch.testing.assert_close(value, b.get(key), atol=ATOL, rtol=RTOL, msg=str(key))


def trainable_keys(learner: Learner) -> set[tuple[str, ...]]:
    params = learner.loss_module.named_parameters()
    return {tuple(name.split(".")) for name, p in params if p.requires_grad}


def leaf_keys(td: TensorDict) -> set[tuple[str, ...]]:
    return {(k,) if isinstance(k, str) else k for k in td.keys(True, True)}


# -- update -----------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["ppo", "a2c"])
def test_update_returns_finite_metrics_changes_params_and_bumps_version(batch, loss):
    learner = build_learner(loss=loss, config=LearnerConfig(num_epochs=2, minibatch_size=64))
    before = learner.weights()
    metrics = learner.update(batch)

    assert learner.version == 1
    expected = {"loss_objective", "loss_critic", "loss_entropy", "loss", "grad_norm", "lr"}
    assert expected | {"num_frames"} <= set(metrics.keys())
    for key, value in metrics.items():
        assert value.shape == () and value.dtype == torch.float32, key
        assert not value.requires_grad and value.device.type == "cpu", key
        assert math.isfinite(value.item()), key
    terms = sum(metrics[k] for k in metrics.keys() if k.startswith("loss_"))
    torch.testing.assert_close(metrics["loss"], terms, atol=1e-5, rtol=1e-5)
    assert metrics["num_frames"].item() == 200
    assert metrics["lr"].item() == pytest.approx(3e-4)
    params_changed = [
        not torch.equal(p, before.get(tuple(n.split("."))))
        for n, p in learner.loss_module.named_parameters()
    ]
    assert all(params_changed)
    learner.update(batch)
    assert learner.version == 2


@pytest.mark.parametrize(
    ("num_epochs", "minibatch_size", "sizes"),
    [
        (1, None, [200]),
        (3, 64, [64, 64, 64, 8] * 3),
        (2, 100, [100, 100] * 2),
        (2, 10_000, [200, 200]),  # larger than the batch: the whole batch
    ],
)
def test_epochs_and_minibatches_take_one_optimizer_step_each(
    batch, num_epochs, minibatch_size, sizes
):
    config = LearnerConfig(num_epochs=num_epochs, minibatch_size=minibatch_size)
    learner = build_learner(config=config)
    seen = []
    learner.loss_module.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[0]))
    steps = []
    learner.optimizer.register_step_post_hook(lambda *_: steps.append(1))

    learner.update(batch)

    assert len(steps) == num_epochs * math.ceil(200 / min(minibatch_size or 200, 200))
    assert seen == sizes


@pytest.mark.parametrize("shuffle", [True, False])
def test_shuffle_draws_minibatches_in_random_order(batch, shuffle):
    learner = build_learner(config=LearnerConfig(minibatch_size=50, shuffle=shuffle))
    first = []
    learner.loss_module.register_forward_pre_hook(
        lambda _, args: first.append(args[0]["observation"].clone()) if not first else None
    )
    learner.update(batch)
    assert torch.equal(first[0], batch["observation"][:50]) is not shuffle


def test_grad_clipping_bounds_the_applied_gradient(batch):
    sgd = lambda params: torch.optim.SGD(params, lr=1.0)  # noqa: E731 - update == -grad
    learner = build_learner(config=LearnerConfig(max_grad_norm=0.01), optimizer=sgd)
    before = learner.weights()

    metrics = learner.update(batch)

    steps = [
        (p.detach() - before.get(tuple(n.split(".")))).norm()
        for n, p in learner.loss_module.named_parameters()
    ]
    applied = torch.stack(steps).norm()
    assert metrics["grad_norm"] > 0.01  # reported before clipping
    assert applied == pytest.approx(0.01, rel=1e-4)


def test_lr_scheduler_steps_once_per_update_and_metrics_report_the_lr_used(batch):
    halve = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)  # noqa: E731
    learner = build_learner(
        config=LearnerConfig(lr=1e-3, num_epochs=2, minibatch_size=100), lr_scheduler=halve
    )
    assert learner.update(batch)["lr"].item() == pytest.approx(1e-3)
    assert learner.update(batch)["lr"].item() == pytest.approx(5e-4)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_update_leaves_the_input_batch_unchanged(batch):
    keys = set(batch.keys(True, True))
    build_learner().update(batch)
    assert set(batch.keys(True, True)) == keys  # GAE wrote into a copy


# -- batch shapes ------------------------------------------------------------------------


def test_works_on_batched_env_and_stacked_worker_batches():
    batch_2x100 = collect(num_envs=2)
    assert batch_2x100.shape == (2, 100)
    learner = build_learner(config=LearnerConfig(minibatch_size=64))
    assert learner.update(batch_2x100)["num_frames"].item() == 200

    stacked = torch.stack([batch_2x100, batch_2x100])  # [num_workers, N, T]
    metrics = learner.update(stacked)
    assert metrics["num_frames"].item() == 400
    assert all(math.isfinite(v.item()) for v in metrics.values())


def test_gae_runs_along_time_before_flattening(batch):
    """The advantages the loss sees are those of GAE on the [N, T] batch, not on [N*T]."""
    _, _, loss_module, gae = build_ppo_cartpole()
    batch_2x100 = batch.reshape(2, 100)
    seen = []
    loss_module.register_forward_pre_hook(lambda _, args: seen.append(args[0]["advantage"]))
    Learner(loss_module, value_estimator=gae).compute_gradients(batch_2x100)

    with torch.no_grad():
        expected = gae(batch_2x100.clone())["advantage"].reshape(-1, 1)
        flat_gae = gae(batch.clone())["advantage"]
    torch.testing.assert_close(seen[0], expected)
    assert not torch.allclose(seen[0], flat_gae)  # row 0's end bootstraps instead


def test_gae_of_a_padded_row_is_that_of_the_row_without_its_padding(batch):
    """A preempted row (valid frames, then zeros): its last valid frame bootstraps, no leak."""
    _, _, loss_module, gae = build_ppo_cartpole()
    rows = batch.reshape(2, 100).clone()
    rows[MASK_KEY] = torch.ones(2, 100, dtype=torch.bool)
    rows[0, 60:] = 0  # zeros, as pad_time writes them, mask included
    assert not rows["next", "done"][0, 59].any()  # the cut falls inside an episode
    seen = []
    loss_module.register_forward_pre_hook(lambda _, args: seen.append(args[0]["advantage"]))
    Learner(loss_module, value_estimator=gae).compute_gradients(rows)

    with torch.no_grad():
        short = gae(batch.reshape(2, 100)[0, :60].clone())["advantage"]
        full = gae(batch.reshape(2, 100)[1].clone())["advantage"]
    torch.testing.assert_close(seen[0], torch.cat([short, full]))
    assert not rows["next", "done"][0, 59].any()  # the caller's batch is not written to


def test_mask_drops_padded_frames():
    split = collect(split_trajs=True)
    mask = split["collector", "mask"]
    assert mask.ndim == 2 and not mask.all()
    learner = build_learner(config=LearnerConfig(minibatch_size=64))
    seen = []
    learner.loss_module.register_forward_pre_hook(lambda _, args: seen.append(args[0]))

    metrics = learner.update(split)

    assert metrics["num_frames"].item() == mask.sum().item() == 200
    assert all(mb["collector", "mask"].all() for mb in seen)


# -- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["ppo", "a2c"])
def test_compute_then_apply_gradients_equals_update(batch, loss):
    config = LearnerConfig(num_epochs=1, minibatch_size=None, shuffle=False, max_grad_norm=0.5)
    updated = build_learner(loss=loss, config=config)
    applied = build_learner(loss=loss, config=config)

    update_metrics = updated.update(batch)
    grads, metrics = applied.compute_gradients(batch)
    assert applied.version == 0
    apply_metrics = applied.apply_gradients(grads)

    assert applied.version == updated.version == 1
    assert_weights_close(applied.weights(), updated.weights())
    torch.testing.assert_close(metrics["loss"], update_metrics["loss"])
    torch.testing.assert_close(apply_metrics["grad_norm"], update_metrics["grad_norm"])
    # grads: one detached CPU tensor per trainable parameter, keyed like from_module(loss)
    assert leaf_keys(grads) == trainable_keys(applied)
    assert all(g.device.type == "cpu" and not g.requires_grad for g in grads.values(True, True))
    assert set(grads.keys(True, True)) <= set(
        TensorDict.from_module(applied.loss_module).keys(True, True)
    )


def test_apply_gradients_does_not_modify_the_given_gradients(batch):
    learner = build_learner(config=LearnerConfig(max_grad_norm=1e-3))
    grads, _ = learner.compute_gradients(batch)
    kept = grads.clone()
    learner.apply_gradients(grads)
    assert_weights_close(grads, kept)


@pytest.mark.parametrize("loss", ["ppo", "a2c"])
def test_frame_weighted_average_of_half_batch_gradients_is_the_full_batch_gradient(batch, loss):
    """Holds for losses that are means over frames; ClipPPOLoss with normalize_advantage=False.

    GAE runs once on the whole trajectory batch first (on halves it would cut the
    trajectories), so the Learners here have no value estimator.
    """
    _, _, _, gae = build_ppo_cartpole(loss=loss)
    with torch.no_grad():
        data = gae(batch.clone())
    learner = build_learner(loss=loss, gae=False)

    full, _ = learner.compute_gradients(data)
    grads_a, metrics_a = learner.compute_gradients(data[:120])
    grads_b, metrics_b = learner.compute_gradients(data[120:])
    weights = [metrics_a["num_frames"].item(), metrics_b["num_frames"].item()]
    assert weights == [120, 80]

    assert_weights_close(average_gradients([grads_a, grads_b], weights), full)
    unweighted = average_gradients([grads_a, grads_b])  # the weights matter
    assert any(not torch.allclose(unweighted.get(k), g) for k, g in full.items(True, True))


def test_params_without_gradient_get_zeros_and_grads_are_cleared(batch):
    _, _, loss_module, gae = build_ppo_cartpole()
    loss_module.register_parameter("unused", nn.Parameter(torch.ones(3)))  # not in the graph
    learner = Learner(loss_module, value_estimator=gae)
    grads, _ = learner.compute_gradients(batch)
    assert leaf_keys(grads) == trainable_keys(learner)
    assert torch.equal(grads["unused"], torch.zeros(3))
    assert all(p.grad is None for p in learner.loss_module.parameters())
    learner.apply_gradients(grads)
    assert torch.equal(loss_module.unused.detach(), torch.ones(3))


def test_average_gradients_rejects_bad_input():
    g = TensorDict(w=torch.ones(2))
    with pytest.raises(ValueError, match="at least one"):
        average_gradients([])
    with pytest.raises(ValueError, match="one entry per gradient"):
        average_gradients([g, g], [1.0])
    with pytest.raises(ValueError, match="non-negative"):
        average_gradients([g, g], [1.0, -1.0])
    with pytest.raises(ValueError, match="keys"):
        average_gradients([g, TensorDict(v=torch.ones(2))])


# -- weights and state ------------------------------------------------------------------


def test_policy_weights_load_into_a_fresh_actor(batch):
    actor, _, loss_module, gae = build_ppo_cartpole()
    learner = Learner(loss_module, value_estimator=gae, config=LearnerConfig(minibatch_size=50))
    learner.update(batch)
    weights = learner.policy_weights()

    fresh, _ = build_cartpole_agent(seed=123)
    weights.to_module(fresh)
    obs = TensorDict(observation=batch["observation"], batch_size=[200])
    torch.testing.assert_close(fresh(obs.clone())["logits"], actor(obs.clone())["logits"])
    # a copy: changing it leaves the learner's policy alone
    weights.apply_(lambda t: t.zero_())
    assert not torch.equal(actor(obs.clone())["logits"], torch.zeros(200, 2))


def test_weights_sync_a_second_learner(batch):
    trained = build_learner(config=LearnerConfig(minibatch_size=50))
    trained.update(batch)
    follower = build_learner(seed=7)
    follower.load_weights(trained.weights())
    assert_weights_close(follower.weights(), trained.weights())
    with pytest.raises(ValueError, match="keys of Learner.weights"):
        follower.load_weights(trained.policy_weights())


def test_state_dict_round_trips_through_torch_save_weights_only(batch, tmp_path):
    def step_lr(opt):
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)

    config = LearnerConfig(minibatch_size=64, shuffle=False)
    learner = build_learner(config=config, lr_scheduler=step_lr)
    learner.update(batch)
    learner.update(batch)
    torch.save(learner.state_dict(), tmp_path / "learner.pt")

    restored = build_learner(seed=3, config=config, lr_scheduler=step_lr)
    restored.load_state_dict(torch.load(tmp_path / "learner.pt", weights_only=True))

    assert restored.version == 2
    assert_weights_close(restored.weights(), learner.weights())
    assert restored.lr_scheduler.state_dict() == learner.lr_scheduler.state_dict()
    for mine, theirs in zip(
        restored.optimizer.state.values(), learner.optimizer.state.values(), strict=True
    ):
        torch.testing.assert_close(mine["exp_avg_sq"], theirs["exp_avg_sq"])
    # the same next update: optimizer moments and lr were restored, not just params
    torch.testing.assert_close(restored.update(batch)["lr"], learner.update(batch)["lr"])
    assert_weights_close(restored.weights(), learner.weights())


def test_state_dict_and_scheduler_must_match():
    state = build_learner().state_dict()
    with_scheduler = build_learner(lr_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 1))
    with pytest.raises(ValueError, match="lr_scheduler"):
        with_scheduler.load_state_dict(state)
    with pytest.raises(ValueError, match="missing"):
        with_scheduler.load_state_dict({"version": 1})


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_learner_pickles_with_its_shared_critic(batch, dumps):
    scheduler = None
    if dumps is cloudpickle.dumps:  # what Ray uses: lambdas travel too
        scheduler = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 0.5**n)  # noqa: E731
    learner = build_learner(config=LearnerConfig(minibatch_size=100), lr_scheduler=scheduler)
    learner.update(batch)
    copy = pickle.loads(dumps(learner))

    assert copy.version == 1
    assert_weights_close(copy.weights(), learner.weights())
    loss_params = {id(p) for p in copy.loss_module.parameters()}
    assert all(id(p) in loss_params for p in copy.value_estimator.value_network.parameters())
    assert all(id(p) in loss_params for g in copy.optimizer.param_groups for p in g["params"])
    assert all(id(p) in loss_params for p in copy.policy.parameters())
    copy.update(batch)
    assert copy.version == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_learner_trains_and_hands_out_cpu_weights(batch):
    learner = build_learner(config=LearnerConfig(device="cuda", minibatch_size=64))
    assert all(p.is_cuda for p in learner.value_estimator.value_network.parameters())
    metrics = learner.update(batch)
    assert all(v.device.type == "cpu" and math.isfinite(v.item()) for v in metrics.values())
    grads, _ = learner.compute_gradients(batch)
    assert all(g.device.type == "cpu" for g in grads.values(True, True))
    learner.apply_gradients(grads)
    assert all(w.device.type == "cpu" for w in learner.policy_weights().values(True, True))
    state = learner.state_dict()
    assert all(t.device.type == "cpu" for t in state["loss_module"].values())


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_epochs": 0}, "num_epochs must be an int >= 1, got 0"),
        ({"num_epochs": 1.5}, "num_epochs"),
        ({"minibatch_size": 0}, "minibatch_size must be None .* got 0"),
        ({"minibatch_size": -4}, "minibatch_size"),
        ({"max_grad_norm": 0.0}, "max_grad_norm must be None .* got 0.0"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"lr": -1.0}, "lr must be"),
        ({"device": "gpu0"}, "device must be a torch device"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LearnerConfig(**kwargs)


def test_constructor_rejects_bad_arguments():
    actor, critic, loss_module, _ = build_ppo_cartpole()
    with pytest.raises(TypeError, match="loss_module must be a torchrl LossModule.*Sequential"):
        Learner(nn.Sequential(nn.Linear(4, 2)))
    with pytest.raises(TypeError, match="optimizer must be"):
        Learner(loss_module, optimizer="adam")
    with pytest.raises(TypeError, match="config must be a LearnerConfig"):
        Learner(loss_module, config={"num_epochs": 2})
    with pytest.raises(ValueError, match="shares no parameter"):
        Learner(loss_module, policy=build_cartpole_agent(seed=1)[0])
    assert Learner(loss_module, policy=actor).policy is actor
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            Learner(loss_module, config=LearnerConfig(device="cuda"))


def test_warns_when_the_value_estimator_critic_is_not_the_trained_one(caplog):
    _, _, loss_module, _ = build_ppo_cartpole()
    _, other_critic = build_cartpole_agent(seed=1)
    Learner(loss_module, value_estimator=GAE(gamma=0.99, lmbda=0.95, value_network=other_critic))
    assert "shares no parameter with the loss module" in caplog.text


def test_bad_batches_and_gradients_are_rejected(batch):
    learner = build_learner()
    with pytest.raises(TypeError, match="batch must be a TensorDict"):
        learner.update({"observation": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match="at least one batch dimension"):
        learner.update(batch[0])
    no_valid = batch.clone()
    no_valid["collector", "mask"] = torch.zeros(200, dtype=torch.bool)
    with pytest.raises(ValueError, match="no valid frame"):
        learner.update(no_valid)
    grads, _ = learner.compute_gradients(batch)
    with pytest.raises(ValueError, match="missing"):
        learner.apply_gradients(grads.exclude("critic_network_params"))
    assert learner.version == 0
