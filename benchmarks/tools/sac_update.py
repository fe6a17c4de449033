"""Milliseconds per SAC gradient step at HalfCheetah-v5's sizes: tdscheme, torchrl's loss alone, SB3.

At one gradient step per agent step (sac-halfcheetah, SB3's zoo entry) a SAC run is
bound by its updates, so the wall-clock target of issue 35 (tdscheme <= 0.7x SB3's
seconds to SB3's final return) rests on this cost. Three rows, in one process, one
torch thread each (as the runs have it), 256x256 networks, minibatches of 256 sampled
from 20,000 random transitions (17-dim observations, 6-dim actions), alternating
``--repeats`` times after a warm-up:

* ``tdscheme``: the ``sac-halfcheetah`` preset's learner, ``replay_updates`` on a
  local torchrl buffer (the update a run makes: sample, torchrl's ``SACLoss``, one
  backward, Adam, the target update, the non-finite guard, metrics);
* ``torchrl SACLoss``: the same loss module built the same way, bare: sample, loss,
  backward, Adam step (what tdscheme wraps: the floor of its update);
* ``SB3``: stable-baselines3's ``SAC("MlpPolicy", "HalfCheetah-v5")`` (256x256, batch
  256, its defaults: the zoo's entry sets only ``learning_starts``), ``model.train``
  on a replay buffer filled the same way (the `peers` extra).

Run from the repository root::

    .venv/bin/python benchmarks/tools/sac_update.py --updates 300 --repeats 5

Output: one JSON line per row (median and spread of the repeats), then a table with each
row's cost over SB3's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import numpy as np
import torch
from harness import in_turn, json_line, seconds

OBS, ACT, FRAMES, BATCH = 17, 6, 20_000, 256


def random_transitions():
    from tensordict import TensorDict

    flags = {
        k: torch.zeros(FRAMES, 1, dtype=torch.bool) for k in ("done", "terminated", "truncated")
    }
    return TensorDict(
        {
            "observation": torch.randn(FRAMES, OBS),
            "action": torch.rand(FRAMES, ACT) * 2 - 1,
            "next": {
                "observation": torch.randn(FRAMES, OBS),
                "reward": torch.randn(FRAMES, 1),
                **flags,
            },
        },
        [FRAMES],
    )


def local_buffer():
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(FRAMES), batch_size=BATCH)
    buffer.extend(random_transitions())
    return buffer


def tdscheme_rows(updates: int) -> dict[str, Callable[[], float]]:
    """The preset's learner, and its loss module bare (see the module)."""
    from tdscheme.presets import get_preset

    factories = get_preset("sac-halfcheetah").factories()
    torch.manual_seed(0)
    learner = factories["learner_factory"](**factories["policy_factory"]())
    buffer = local_buffer()
    torch.manual_seed(0)
    bare = factories["learner_factory"](**factories["policy_factory"]()).loss_module
    optimizer = torch.optim.Adam(bare.parameters(), lr=3e-4)

    def tdscheme() -> float:
        return seconds(learner.replay_updates, buffer, updates) / updates

    def torchrl_updates() -> None:
        for _ in range(updates):
            out = bare(buffer.sample())
            sum(v for k, v in out.items() if k.startswith("loss_")).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def torchrl_loss() -> float:
        return seconds(torchrl_updates) / updates

    return {"tdscheme": tdscheme, "torchrl SACLoss": torchrl_loss}


def sb3_row(updates: int) -> Callable[[], float]:
    import gymnasium as gym
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", gym.make("HalfCheetah-v5"), learning_starts=0, batch_size=BATCH,
                seed=0, device="cpu")  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(FRAMES):
        model.replay_buffer.add(
            rng.standard_normal((1, OBS), dtype=np.float32), rng.standard_normal((1, OBS), dtype=np.float32),
            rng.uniform(-1, 1, (1, ACT)).astype(np.float32), rng.standard_normal(1), np.zeros(1), [{}],
        )  # fmt: skip
    model._setup_learn(1, None)

    def sb3() -> float:
        return seconds(lambda: model.train(gradient_steps=updates, batch_size=BATCH)) / updates

    return sb3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=300, help="gradient steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = {**tdscheme_rows(args.updates), "SB3": sb3_row(args.updates)}
    ms = {name: [1e3 * s for s in values]
          for name, values in in_turn(rows, repeats=args.repeats, warmup=1).items()}  # fmt: skip
    sb3 = statistics.median(ms["SB3"])
    print("\n| row | ms per gradient step (median) | min-max | x SB3's |\n|---|---|---|---|")
    for name, values in ms.items():
        median = statistics.median(values)
        json_line({"row": name, "ms_median": median, "ms": values, "vs_sb3": median / sb3})
        print(
            f"| {name} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | {median / sb3:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
