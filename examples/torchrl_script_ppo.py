"""A plain torchrl PPO script, made distributed by changing its collector line.

Everything here is torchrl: a ``GymEnv`` with transforms, a ``ProbabilisticActor`` and a
``ValueOperator``, GAE, ``ClipPPOLoss``, a replay buffer that hands out each batch's
frames once per epoch. The one tdscheme line is the collector: ``RayCollector`` takes the
arguments torchrl's ``Collector`` takes (``create_env_fn``, ``policy``,
``frames_per_batch``, ``total_frames``) and collects in Ray worker processes. Run it
both ways and compare:

    python examples/torchrl_script_ppo.py --collector torchrl   # one process
    python examples/torchrl_script_ppo.py                       # Ray workers (tdscheme)
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from torchrl.envs import Compose, GymEnv, RewardSum, StepCounter, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from tdscheme import RayCollector


def make_env():
    """CartPole with its episode return and length recorded (a module-level function:
    Ray workers build their own env from it)."""
    return TransformedEnv(GymEnv("CartPole-v1"), Compose(RewardSum(), StepCounter()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collector", choices=["tdscheme", "torchrl"], default="tdscheme")
    parser.add_argument("--total-frames", type=int, default=102_400)  # 50 batches
    parser.add_argument("--frames-per-batch", type=int, default=2048)
    args = parser.parse_args()

    env = make_env()
    n_obs = env.observation_spec["observation"].shape[-1]
    n_actions = env.action_spec.shape[-1]
    logits = MLP(in_features=n_obs, out_features=n_actions, num_cells=[64, 64],
                 activation_class=nn.Tanh)  # fmt: skip
    policy = ProbabilisticActor(
        TensorDictModule(logits, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"], distribution_class=OneHotCategorical, spec=env.action_spec,
        return_log_prob=True,
    )  # fmt: skip
    value = ValueOperator(
        MLP(in_features=n_obs, out_features=1, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    env.close()

    fpb, total = args.frames_per_batch, args.total_frames
    if args.collector == "torchrl":
        collector = Collector(make_env, policy, frames_per_batch=fpb, total_frames=total)
    else:  # the line that changes: the same arguments, collected by Ray workers
        collector = RayCollector(make_env, policy, frames_per_batch=fpb, total_frames=total)

    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=value)
    loss_module = ClipPPOLoss(policy, value, clip_epsilon=0.2, entropy_coeff=0.0)
    optim = torch.optim.Adam(loss_module.parameters(), lr=3e-4)
    buffer = ReplayBuffer(storage=LazyTensorStorage(fpb), sampler=SamplerWithoutReplacement(),
                          batch_size=256)  # fmt: skip
    frames = 0
    try:
        for batch in collector:
            frames += batch.numel()
            for _ in range(10):  # epochs: fresh advantages, then minibatches of 256 frames
                with torch.no_grad():
                    advantage(batch)
                buffer.extend(batch.reshape(-1))
                for _ in range(fpb // 256):
                    out = loss_module(buffer.sample())
                    loss = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                    loss.backward()
                    nn.utils.clip_grad_norm_(loss_module.parameters(), 0.5)
                    optim.step()
                    optim.zero_grad()
            collector.update_policy_weights_()  # the new weights to the collector
            done = batch["next", "done"]
            ended = batch["next", "episode_reward"][done]
            mean = f"{ended.mean().item():.1f}" if ended.numel() else "-"
            print(f"{args.collector}: {frames} frames, mean return of episodes that ended: {mean}")
    finally:
        collector.shutdown()


if __name__ == "__main__":
    main()
