"""torchrl's Ray learner (``learner_backend="ray"``) publishing weights to tdscheme's workers.

Real Ray (the session's), real CartPole, torchrl's own DQN loss, trainer, Ray learner
gang and replay buffer.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.modules import MLP, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate
from torchrl.testing.mocking_classes import CountingEnv
from torchrl.trainers.algorithms import DQNTrainer

from tdscheme import RayCollector
from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env
from tdscheme.keys import POLICY_VERSION_KEY
from tdscheme.testing import CountingPolicy, mlp_policy

SMALL = {"num_cpus": 0.5}
env = functools.partial(make_env, "CartPole-v1")


def q_actor() -> QValueActor:
    spec = env().action_spec
    return QValueActor(MLP(in_features=4, out_features=2, num_cells=[16]), spec=spec)


@pytest.fixture
def replay(ray_clean):
    rb = RayReplayBuffer(
        replay_buffer_cls=TensorDictReplayBuffer,
        storage=functools.partial(LazyTensorStorage, 1_000),
        batch_size=16,
        remote_config={"num_cpus": 0},
    )
    yield rb
    rb.shutdown()


def test_dqn_trainer_with_ray_learner_publishes_to_the_workers(replay):
    """torchrl's DQNTrainer(learner_backend="ray") runs on a tdscheme RayCollector.

    The learner publishes version 0 before collection and version k after its k-th
    step; the worker runs each from its next batch and stamps its frames with it.
    """
    actor = q_actor()
    loss = DQNLoss(actor, action_space="one-hot", delay_value=True)
    collector = RayCollector(
        env, actor, frames_per_batch=32, total_frames=96, num_collectors=1,
        prefetch_batches=0, remote_configs=SMALL, seed=0,
    )  # fmt: skip
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*experimental.*", category=UserWarning)
            trainer = DQNTrainer(
                collector=collector, total_frames=96, frame_skip=1, optim_steps_per_batch=1,
                loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
                replay_buffer=replay, batch_size=16,
                target_net_updater=HardUpdate(loss, value_network_update_interval=10),
                learner_backend="ray",
                learner_backend_options={
                    "world_size": 1, "resources_per_rank": {"num_cpus": 0.5, "num_gpus": 0},
                    "backend": "gloo", "setup_timeout": 60.0, "command_timeout": 60.0,
                },
                enable_logging=False, progress_bar=False,
            )  # fmt: skip
        trainer.train()
        assert collector.learner_publishes_weights
        assert trainer.collected_frames == 96
        assert trainer._optim_count == trainer._published_model_version == 3
        # the driver extended the buffer with the yielded batches, in order
        versions = replay[:96][POLICY_VERSION_KEY].view(3, 32)
        assert versions.eq(torch.tensor([[0], [1], [2]])).all(), versions[:, 0]
        stats = collector.stats(timeout=1.0)
        assert stats["worker_running_versions"] == [2]
        assert stats["policy_lag_max"] == 0  # against the newest version seen, never negative
    finally:
        collector.shutdown()


@pytest.mark.fast
def test_the_learner_owns_the_weights_once_it_asked_for_them(ray_clean):
    with RayCollector(
        env, mlp_policy(4, 2), frames_per_batch=16, num_collectors=1, remote_configs=SMALL
    ) as collector:
        scheme = collector._learner_weight_sync()
        assert type(scheme).__name__ == "RayWeightSyncScheme"
        assert collector._learner_weight_sync() is scheme  # the same until a new generation
        assert collector._learner_weight_sync(new_generation=True) is not scheme
        with pytest.raises(RuntimeError, match="published by the learner backend"):
            collector.update_policy_weights_()
        assert collector.workers[0] in collector._weights._learner_scheme._remote_collectors


def test_a_collector_that_pushed_weights_or_bounds_lag_refuses_the_learner(ray_clean):
    with RayCollector(
        env, mlp_policy(4, 2), frames_per_batch=16, num_collectors=1, remote_configs=SMALL,
        max_policy_lag=1,
    ) as collector:  # fmt: skip
        with pytest.raises(ValueError, match="max_policy_lag=1 is invalid"):
            collector._learner_weight_sync()
        collector.update_policy_weights_()
        with pytest.raises(RuntimeError, match="pushed weights 1 time"):  # checked first
            collector._learner_weight_sync()


def test_worker_forwards_the_receiver_calls_and_stamps_the_learner_version():
    """In-process: the receiver calls reach the torchrl collector; frames carry the version."""
    worker = CollectorWorker(3, WorkerSpec(CountingEnv, CountingPolicy(), frames_per_batch=4))
    try:
        assert worker._collector.worker_idx == 3  # torchrl's receiver rank comes from it
        signature = worker._weight_sync_signature("policy")
        assert signature == worker._collector._weight_sync_signature("policy")
        worker._set_running_version(7)
        batch = worker.collect(0)
        assert batch.policy_version == 7
        decoded = worker._codec.decode(batch.payload)
        assert decoded[POLICY_VERSION_KEY].eq(7).all()
        assert TensorDict.from_module(worker._collector.policy)["weight"] == 1.0
    finally:
        worker.shutdown()
