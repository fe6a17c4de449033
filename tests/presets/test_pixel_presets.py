"""The Atari presets (impala-pong, appo-pong, apex-dqn-pong): pixels through the whole run, API and CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torchrl.modules
from tensordict import TensorDict
from torch import nn

from tdscheme.cli import main
from tdscheme.engine.run_log import read_metrics
from tdscheme.presets import get_preset
from tdscheme.presets.offpolicy_modules import pixel_qnet
from tdscheme.presets.pixel_networks import PIXEL_NETWORKS, conv_settings, pixel_actor_critic

pytest.importorskip("envpool", reason="EnvPool is not installed (pip install 'tdscheme[envpool]')")

#: A few hundred frames: 2 envs x 20 steps per batch, one short evaluation.
TINY = {"num_collectors": 1, "num_envs": 2, "frames_per_batch": 40, "minibatch_size": 20,
        "collector_resources": {"num_cpus": 0.5}, "eval_num_envs": 1, "eval_episodes": 1,
        "eval_max_steps": 5000, "total_frames": 160, "eval_every_frames": 0,
        "checkpoint_every_frames": 0, "target_return": None, "progress": False}  # fmt: skip


def test_impala_pong_trains_on_uint8_frames_through_the_api(ray_clean, tmp_path):
    preset = get_preset("impala-pong").override({**TINY, "run_dir": str(tmp_path)})
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["frames"] == 160
    metrics = read_metrics(tmp_path)
    for key in ("learner/loss", "learner/grad_norm", "policy_lag/mean", "collector/fps"):
        assert metrics[key] and all(math.isfinite(v) for _, v in metrics[key]), key
    assert -21 <= summary["eval_return"] <= 21  # the game's own score, not clipped


def test_appo_pong_through_the_cli(ray_clean, tmp_path, capsys):
    options = []
    for key, value in {**TINY, "run_dir": str(tmp_path)}.items():
        flag = "--" + key.replace("_", "-")
        options += [flag, json.dumps(value) if isinstance(value, dict) else str(value).lower()
                    if isinstance(value, bool) or value is None else str(value)]  # fmt: skip
    assert main(["train", "appo-pong", *options]) == 0
    out = capsys.readouterr().out
    summary = json.loads(next(x for x in out.splitlines() if x.startswith("summary: "))[9:])
    assert summary["frames"] == 160 and summary["checkpoint"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["algo"]["env_id"] == "ALE/Pong-v5" and config["scheme"]["async_learner"]


@pytest.mark.timeout(300)
def test_apex_dqn_pong_trains_a_dueling_cnn_on_worker_prioritized_shards(ray_clean, tmp_path):
    import numpy as np
    import ray

    def held_leaves(rb):  # in a shard's actor: the sum-tree leaves of the frames it holds
        return np.asarray(rb.sampler._sum_tree[np.arange(len(rb))], dtype=np.float64)

    tiny = {key: TINY[key] for key in TINY if key != "minibatch_size"}
    tiny.update(num_collectors=2, frames_per_batch=40, init_random_frames=80, total_frames=240)
    preset = get_preset("apex-dqn-pong").override(
        {**tiny, "batch_size": 8, "run_dir": str(tmp_path)}
    )
    with preset.build_trainer() as trainer:
        buffer = trainer.scheme.replay_buffer
        qnet = trainer.scheme.learner.loss_module.value_network
        assert type(buffer).__name__ == "ShardedReplayBuffer"
        assert type(qnet.module[0].module[-1]).__name__ == "DuelingCnnDQNet"
        summary = trainer.run()
        sample = buffer.sample()
        stats = buffer.stats()
        leaves = [
            ray.get(shard._rb.__ray_call__.remote(held_leaves), timeout=60)
            for shard in buffer.shards
        ]
        epsilons = [
            float(
                ray.get(actor.__ray_call__.remote(lambda w: w._collector.policy[1].eps), timeout=60)
            )
            for actor in trainer.scheme.collector.remote_collectors
        ]
    assert summary["frames"] == 240 and -21 <= summary["eval_return"] <= 21
    obs = sample["observation"]
    assert obs.dtype == torch.uint8 and obs.shape[-3:] == (4, 84, 84)  # frames stay uint8
    assert sample["action"].dtype == torch.int64 and sample["action"].ndim == 1  # index actions
    np.testing.assert_allclose(epsilons, [0.4, 0.4**8], rtol=1e-5)
    assert min(stats["writes_per_shard"]) > 0 and stats["priority_updates"] > 0
    # the workers' own TD errors: the priorities held differ from frame to frame
    assert all(len(leaf) > 0 and len(np.unique(np.round(leaf, 6))) > 1 for leaf in leaves)
    metrics = read_metrics(tmp_path)
    assert metrics["learner/loss"] and all(math.isfinite(v) for _, v in metrics["learner/loss"])


@pytest.mark.parametrize("frame_shape", [(4, 84, 84), (3, 64, 64), (1, 96, 72)])
@pytest.mark.parametrize("network", sorted(PIXEL_NETWORKS))
def test_the_conv_settings_size_the_layer_after_them_without_running_them(frame_shape, network):
    """One place says each trunk's convolutions (ReLU) and the size they give, for the actor-
    critic's trunk and the dueling Q-network (torchrl's DuelingCnnDQNet defaults to ELU)."""
    convs, flat = conv_settings(frame_shape, network)
    out = torchrl.modules.ConvNet(**convs)(torch.zeros(2, *frame_shape))
    assert out.shape == (2, flat)
    if network == "nature":
        qnet = pixel_qnet(6, frame_shape, dueling=True)
        assert qnet(torch.zeros(2, *frame_shape, dtype=torch.uint8)).shape == (2, 6)
        activations = {type(m) for m in qnet.modules() if isinstance(m, (nn.ReLU, nn.ELU))}
        assert activations == {nn.ReLU}


def test_the_shared_trunk_is_trained_once_by_both_heads():
    modules = pixel_actor_critic(num_actions=6)
    preset = get_preset("impala-pong")
    learner = preset.learner_factory()(**modules)
    names = [name for name, _ in learner.loss_module.named_parameters()]
    trunk = list(modules["actor"].parameters())
    # one copy of each parameter in the optimizer: the trunk is not trained twice
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    assert len({id(p) for p in params}) == len(params), names
    assert all(any(p is q for p in params) for q in trunk)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU learner)")
def test_cuda_learner_trains_on_cpu_uint8_batches_and_hands_out_cpu_weights():
    preset = get_preset("impala-pong").override({"device": "cuda"})
    learner = preset.learner_factory()(**pixel_actor_critic(num_actions=6))
    n, t = 4, 20
    frames = torch.randint(0, 255, (n, t, 4, 84, 84), dtype=torch.uint8)
    batch = TensorDict(observation=frames, batch_size=[n, t])
    batch["action"] = torch.randint(0, 6, (n, t))
    batch["action_log_prob"] = torch.full((n, t), -math.log(6))
    batch["next"] = TensorDict(
        observation=frames, reward=torch.zeros(n, t, 1), done=torch.zeros(n, t, 1, dtype=bool),
        terminated=torch.zeros(n, t, 1, dtype=bool), batch_size=[n, t],
    )  # fmt: skip
    metrics = learner.update(batch)  # the batch is on the CPU, as the workers send it
    assert math.isfinite(float(metrics["loss"]))
    assert all(p.is_cuda for p in learner.loss_module.parameters())
    assert all(not w.is_cuda for w in learner.policy_weights().values(True, True))


def _pixel_batch(n=4, t=8):
    torch.manual_seed(1)
    frames = torch.randint(0, 255, (n, t, 4, 84, 84), dtype=torch.uint8)
    return TensorDict(
        observation=frames,
        action=torch.randint(0, 6, (n, t)),
        action_log_prob=torch.full((n, t), -math.log(6)),
        advantage=torch.randn(n, t, 1),
        value_target=torch.randn(n, t, 1),
        hidden=torch.full((n, t, 256), 7.0),  # the workers' stale trunk output, as batches carry
        batch_size=[n, t],
    )


@pytest.mark.parametrize("loss_name", ["ClipPPOLoss", "A2CLoss"])
def test_the_critic_reuses_the_actors_trunk_with_the_same_gradients(loss_name):
    """One CNN pass per loss call instead of two (actor, then critic), same values and grads."""
    from tensordict.nn import TensorDictSequential
    from torchrl import objectives

    torch.manual_seed(0)
    modules = pixel_actor_critic(num_actions=6)
    critic = modules["critic"]
    trunk, head = critic.module
    twice = TensorDictSequential(trunk, head)  # torchrl's value operator's path
    calls = []
    trunk.register_forward_hook(lambda *_: calls.append(1))
    grads, losses = [], []
    for value_net in (twice, critic):
        loss = getattr(objectives, loss_name)(modules["actor"], value_net)
        calls.clear()
        out = loss(_pixel_batch())
        total = sum(v for k, v in out.items() if k.startswith("loss_"))
        params = [*modules["actor"].parameters(), *head.parameters()]
        grads.append(torch.autograd.grad(total, params))
        losses.append({k: v.detach() for k, v in out.items() if k.startswith("loss_")})
        runs = len(calls)
    assert runs == 1  # the shared critic ran no trunk of its own (the actor's one run)
    for key, value in losses[0].items():
        torch.testing.assert_close(losses[1][key], value, msg=key)
    for want, got in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_critic_runs_the_trunk_unless_the_actor_just_ran_it_on_the_same_frames():
    import pickle

    modules = pixel_actor_critic(num_actions=6)
    actor, critic = modules["actor"], modules["critic"]
    trunk, head = critic.module
    batch = _pixel_batch()
    fresh = head(trunk(batch.exclude("hidden")))["state_value"].detach()
    # the workers' stale "hidden" in the batch is never read
    assert torch.allclose(critic(batch.clone())["state_value"], fresh)
    actor(batch.clone())
    with torch.no_grad():  # the value estimator's call
        assert torch.allclose(critic(batch.clone())["state_value"], fresh)
    actor(batch)
    with torch.no_grad():
        for p in trunk.parameters():
            p.mul_(0.5)  # an optimizer step between: the recorded output is stale
    halved = head(trunk(batch.exclude("hidden")))["state_value"].detach()
    assert torch.allclose(critic(batch)["state_value"], halved)
    actor(batch)
    assert critic._record is not None and pickle.loads(pickle.dumps(critic))._record is None
    critic(batch)
    assert critic._record is None  # used once
