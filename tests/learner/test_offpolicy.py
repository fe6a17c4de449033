"""OffPolicyLearner in-process: real torchrl losses (DQN, SAC, TD3, DDPG), real replay buffers."""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torchrl.data import (
    Bounded,
    LazyTensorStorage,
    OneHot,
    PrioritizedSampler,
    TensorDictReplayBuffer,
)
from torchrl.modules import MLP, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator
from torchrl.modules.tensordict_module import AdditiveGaussianModule, EGreedyModule
from torchrl.objectives import DDPGLoss, DQNLoss, SACLoss, TD3Loss

from tdscheme.learner import Learner, OffPolicyLearner, make_target_updater
from tdscheme.replay.prioritized import prioritized_buffer

OBS, ACT = 3, 2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def frames(n: int, *, discrete: bool) -> TensorDict:
    action = (
        torch.nn.functional.one_hot(torch.randint(ACT, (n,)), ACT).bool()
        if discrete
        else torch.rand(n, ACT) * 2 - 1
    )
    return TensorDict(
        observation=torch.randn(n, OBS),
        action=action,
        next=TensorDict(
            observation=torch.randn(n, OBS),
            reward=torch.randn(n, 1),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
            batch_size=[n],
        ),
        batch_size=[n],
    )


def dqn(kind: str = "hard", interval: int = 3) -> tuple[OffPolicyLearner, torch.nn.Module]:
    qnet = QValueActor(
        MLP(in_features=OBS, out_features=ACT, num_cells=[16]),
        in_keys=["observation"],
        spec=OneHot(ACT),
    )
    policy = TensorDictSequential(qnet, EGreedyModule(OneHot(ACT), annealing_num_steps=100))
    loss = DQNLoss(qnet, action_space="one-hot", delay_value=True)
    learner = OffPolicyLearner(
        loss,
        target_updater=functools.partial(
            make_target_updater, kind=kind, tau=0.5, hard_update_interval=interval
        ),
        policy=policy,
    )
    return learner, policy


def continuous(loss_name: str) -> OffPolicyLearner:
    spec = Bounded(-1.0, 1.0, shape=(ACT,))
    qvalue = ValueOperator(
        MLP(in_features=OBS + ACT, out_features=1, num_cells=[16]),
        in_keys=["observation", "action"],
    )
    if loss_name == "sac":
        net = torch.nn.Sequential(
            MLP(in_features=OBS, out_features=2 * ACT, num_cells=[16]), NormalParamExtractor()
        )
        actor = ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            spec=spec,
        )
        loss = SACLoss(actor, qvalue, action_spec=spec)
        return OffPolicyLearner(loss, target_updater=make_target_updater(loss, tau=0.5))
    actor = TensorDictModule(
        MLP(in_features=OBS, out_features=ACT, num_cells=[16], activate_last_layer=True,
            activation_class=torch.nn.Tanh),
        ["observation"], ["action"],
    )  # fmt: skip
    if loss_name == "td3":
        loss = TD3Loss(actor, qvalue, action_spec=spec)
    else:
        loss = DDPGLoss(actor, qvalue)
    policy = TensorDictSequential(actor, AdditiveGaussianModule(spec, annealing_num_steps=10))
    return OffPolicyLearner(loss, target_updater=make_target_updater(loss, tau=0.5), policy=policy)


def targets(learner: Learner) -> dict[str, torch.Tensor]:
    return {
        k: v.clone() for k, v in learner.loss_module.state_dict().items() if k.startswith("target_")
    }


def buffer(n: int = 64, *, discrete: bool, batch_size: int = 16) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=batch_size)
    rb.extend(frames(n, discrete=discrete))
    return rb


def test_hard_update_copies_targets_every_interval():
    learner, _ = dqn(kind="hard", interval=3)
    rb = buffer(discrete=True)
    start = targets(learner)
    for step in range(1, 5):  # torchrl's HardUpdate copies when its counter reaches 3
        metrics = learner.replay_update(rb)
        assert torch.isfinite(metrics["loss"])
        now = targets(learner)
        if step < 4:
            assert all(torch.equal(now[k], start[k]) for k in start)
    src = {k: v for k, v in learner.loss_module.state_dict().items() if not k.startswith("target")}
    for key, value in targets(learner).items():
        assert torch.equal(value, src[key.removeprefix("target_")])
    assert learner.version == 4
    assert learner.state_dict()["target_updater"] == {"kind": "hard", "counter": 0}


@pytest.mark.parametrize("loss_name", ["sac", "td3", "ddpg"])
def test_continuous_losses_train_and_soft_update_targets(loss_name):
    learner = continuous(loss_name)
    rb = buffer(discrete=False)
    before = targets(learner)
    metrics = learner.replay_update(rb)
    assert torch.isfinite(metrics["loss"]) and metrics["num_frames"] == 16
    assert metrics["sample_ms"] >= 0
    after = targets(learner)
    assert any(not torch.equal(after[k], before[k]) for k in before)  # moved towards sources
    assert learner.version == 1


def spy_priorities(rb) -> dict:
    recorded = {}
    original = rb.update_tensordict_priority

    def spy(data):
        recorded["index"] = data["index"].clone()
        recorded["td_error"] = data["td_error"].clone()
        return original(data)

    rb.update_tensordict_priority = spy
    return recorded


def test_priorities_written_back_are_the_loss_td_errors():
    """The write-back path with a real buffer and loss (any sampler; the sum tree below)."""
    learner, _ = dqn()
    rb = buffer(discrete=True)
    recorded = spy_priorities(rb)
    learner.replay_update(rb)  # a RandomSampler: nothing to write unless asked
    assert not recorded
    learner.replay_update(rb, write_priorities=True)
    index, td_error = recorded["index"], recorded["td_error"].reshape(-1)
    assert index.shape == td_error.shape == (16,) and (td_error > 0).all()


def test_prioritized_sampler_gets_the_loss_priorities():
    learner, _ = dqn()
    rb = prioritized_buffer(size=1000, alpha=0.7, beta=0.5, batch_size=16)
    rb.extend(frames(64, discrete=True))
    sampler = rb.sampler
    assert isinstance(sampler, PrioritizedSampler)
    recorded = spy_priorities(rb)
    learner.replay_update(rb)  # auto-detects the PrioritizedSampler
    index, td_error = recorded["index"], recorded["td_error"].reshape(-1)
    expected = (td_error.abs() + sampler._eps).pow(sampler._alpha)
    stored = torch.tensor([sampler._sum_tree[int(i)] for i in index])
    torch.testing.assert_close(stored, expected.float(), rtol=1e-4, atol=1e-5)


def test_state_roundtrip_restores_targets_updater_and_exploration():
    learner, policy = dqn(kind="hard", interval=5)
    rb = buffer(discrete=True)
    for _ in range(2):
        learner.replay_update(rb)
    learner.anneal_exploration_(40)
    state = learner.state_dict()
    fresh, fresh_policy = dqn(kind="hard", interval=5)
    fresh.load_state_dict(state)
    assert fresh.version == 2
    assert fresh.state_dict()["target_updater"] == {"kind": "hard", "counter": 2}
    assert float(fresh_policy[1].eps) == pytest.approx(float(policy[1].eps))
    for key, value in targets(learner).items():
        assert torch.equal(targets(fresh)[key], value)
    # the same next steps: hard copy on the fifth
    for _ in range(3):
        torch.manual_seed(0)
        learner.replay_update(rb)
        torch.manual_seed(0)
        fresh.replay_update(rb)
    for key, value in targets(learner).items():
        torch.testing.assert_close(targets(fresh)[key], value)


def test_bad_updaters_are_clear_errors():
    learner, _ = dqn()
    with pytest.raises(TypeError, match="target_updater=3 is invalid"):
        OffPolicyLearner(learner.loss_module, target_updater=3)
    no_targets = DQNLoss(
        QValueActor(MLP(in_features=OBS, out_features=ACT, num_cells=[4]),
                    in_keys=["observation"], spec=OneHot(ACT)),
        action_space="one-hot", delay_value=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="loss_module='DQNLoss' is invalid"):
        make_target_updater(no_targets)
    with pytest.raises(ValueError, match="tau=2 is invalid"):
        make_target_updater(learner.loss_module, tau=2)
    fresh, _ = dqn(kind="soft")
    with pytest.raises(ValueError, match="target_updater"):
        fresh.load_state_dict(learner.state_dict())


def test_a_non_finite_sample_is_skipped_and_counted_then_stops_the_run():
    """As Learner.update: NaN rewards skip the step (no update, no target copy), K in a row stop."""
    from tdscheme.errors import NonFiniteUpdateError
    from tdscheme.learner import LearnerConfig

    qnet = QValueActor(
        MLP(in_features=OBS, out_features=ACT, num_cells=[16]),
        in_keys=["observation"],
        spec=OneHot(ACT),
    )
    learner = OffPolicyLearner(
        DQNLoss(qnet, action_space="one-hot", delay_value=True),
        config=LearnerConfig(max_nonfinite_updates=3),
        target_updater=functools.partial(make_target_updater, kind="hard", hard_update_interval=1),
    )
    good = buffer(discrete=True)
    assert float(learner.replay_update(good)["nonfinite_skipped"]) == 0
    bad = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=16)
    poisoned = frames(64, discrete=True)
    poisoned["next", "reward"][:] = float("nan")
    bad.extend(poisoned)
    weights = {k: v.clone() for k, v in qnet.state_dict().items()}
    version = learner.version
    for skipped_total in (1, 2):
        metrics = learner.replay_update(bad)
        assert float(metrics["nonfinite_skipped"]) == 1
        assert float(metrics["nonfinite_skipped_total"]) == skipped_total
    assert learner.version == version  # no step, no new version
    assert all(torch.equal(weights[k], v) for k, v in qnet.state_dict().items())
    assert float(learner.replay_update(good)["nonfinite_skipped"]) == 0  # the run of skips ends
    for _ in range(2):
        learner.replay_update(bad)
    with pytest.raises(NonFiniteUpdateError, match="reward"):
        learner.replay_update(bad)
