"""The Pong presets' learner update: the critic reusing the actor's CNN pass vs running its own.

One process, no Ray. A real batch of the preset's frames (its env, its workers' collector,
``frames_per_batch`` frames of 16 EnvPool Pong envs, uint8 4x84x84) is collected once;
then two learners built from the preset with the same initial weights train on it in
alternating repeats (``--repeats``, default 5):

* ``shared``: the preset as shipped: its critic (``SharedTrunkValue``) reuses the trunk
  output the loss's actor call has just computed on the same frames;
* ``twice``: the same modules with torchrl's plain path for the critic (a
  ``TensorDictSequential`` of the trunk and the value head), so every loss call runs the
  CNN twice (actor, then critic), as torchrl's ``ActorValueOperator.get_value_operator()``
  does.

Each repeat times one ``learner.update(batch)`` (value estimator + every minibatch step)
and, separately, the value estimator alone (``V-trace``, the same in both). One torch
thread (the presets' ``num_threads``). Run from the repository root::

    .venv/bin/python benchmarks/pixel_learner.py                 # appo-pong and impala-pong
    .venv/bin/python benchmarks/pixel_learner.py --presets appo-pong --repeats 2
"""

from __future__ import annotations

import argparse
import statistics

import torch
from harness import json_line, paired_ratios, seconds
from report import machine_info
from tensordict.nn import TensorDictSequential

from tdscheme.presets import get_preset
from tdscheme.rollout.lean import LeanCollector


def learners(name: str) -> dict[str, object]:
    """``{"shared": learner, "twice": learner}`` of preset ``name``, the same initial weights."""
    preset = get_preset(name)
    factories = preset.factories()
    out = {}
    for kind in ("shared", "twice"):
        torch.manual_seed(0)
        modules = factories["policy_factory"]()
        if kind == "twice":
            trunk, head = modules["critic"].module
            modules = {**modules, "critic": TensorDictSequential(trunk, head)}
        out[kind] = factories["learner_factory"](**modules)
    return out


def real_batch(name: str, policy: object) -> object:
    preset = get_preset(name)
    env = preset.factories()["env_factory"]()
    collector = LeanCollector(
        env, policy, frames_per_batch=preset.scheme.frames_per_batch,
        auto_register_policy_transforms=False,
    )  # fmt: skip
    try:
        return next(iter(collector)).clone()
    finally:
        collector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="appo-pong,impala-pong")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    json_line({"machine": machine_info()})
    rows = []
    for name in args.presets.split(","):
        pair = learners(name)
        batch = real_batch(name, pair["shared"].policy)
        for learner in pair.values():
            learner.update(batch)  # warm-up
        times = {kind: [] for kind in pair}
        prepare = []
        for _ in range(args.repeats):
            for kind, learner in pair.items():
                times[kind].append(seconds(learner.update, batch))
            prepare.append(seconds(pair["shared"]._prepare, batch))
        speedup = paired_ratios(times["twice"], times["shared"])
        row = {
            "preset": name, "frames": batch.numel(),
            "shared_s": statistics.median(times["shared"]),
            "twice_s": statistics.median(times["twice"]),
            "estimator_s": statistics.median(prepare),
            "speedup_ratio_of_medians": speedup.ratio_of_medians,
            "speedup_median_of_ratios": speedup.median_of_ratios,
            "speedup_range": [speedup.low, speedup.high],
        }  # fmt: skip
        json_line(row)
        rows.append(row)
    print("\n| preset | frames per update | shared trunk s | trunk twice s | speed-up (ratio of "
          "medians) | median of ratios (range) | of which V-trace s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["speedup_range"]
        print(f"| {r['preset']} | {r['frames']} | {r['shared_s']:.3f} | {r['twice_s']:.3f} | "
              f"{r['speedup_ratio_of_medians']:.2f}x | {r['speedup_median_of_ratios']:.2f}x "
              f"({low:.2f}-{high:.2f}) | {r['estimator_s']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
