"""The Pong presets' learner update, as shipped and with each of its speed-ups taken out.

One process, no Ray. A real batch of the preset's frames (its env, its workers' collector,
``frames_per_batch`` frames of EnvPool Pong envs, uint8 4x84x84) is collected once; then
learners built from the preset with the same initial weights train on it in alternating
repeats (``--repeats``, default 5), the preset's torch threads (``num_threads``):

* ``shipped``: the preset as it is: the critic (``SharedTrunkValue``) reuses the trunk output
  the loss's actor call has just computed; the estimator's values come from one pass of the
  critic (``OnePassValues``); the conv weights are channels-last;
* ``trunk twice``: torchrl's plain path for the critic (a ``TensorDictSequential`` of the
  trunk and the value head), so every loss call runs the CNN twice, as torchrl's
  ``ActorValueOperator.get_value_operator()`` does;
* ``two-pass values``: torchrl's estimator running the critic itself (on the observations,
  then on every ``("next", ...)`` observation);
* ``NCHW weights``: the conv weights in torch's default (contiguous) layout;
* ``before``: both of the last two (the learner before they landed).

Each repeat times one ``learner.update(batch)`` (value estimator + every minibatch step);
speed-ups are paired against ``shipped``. Run from the repository root::

    .venv/bin/python benchmarks/pixel_learner.py       # ppo-pong, appo-pong and impala-pong
    .venv/bin/python benchmarks/pixel_learner.py --presets appo-pong --repeats 2
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch
from harness import in_turn, json_line, paired_ratios, seconds
from report import machine_info
from tensordict.nn import TensorDictSequential

from tdscheme.presets import get_preset
from tdscheme.rollout.lean import LeanCollector

VARIANTS = ("shipped", "trunk twice", "two-pass values", "NCHW weights", "before")


def learners(name: str, variants: tuple[str, ...] = VARIANTS) -> dict[str, object]:
    """Preset ``name``'s learner per variant (of :data:`VARIANTS`), the same initial weights."""
    preset = get_preset(name)
    factories = preset.factories()
    out = {}
    for kind in variants:
        torch.manual_seed(0)
        modules = factories["policy_factory"]()
        if kind == "trunk twice":
            trunk, head = modules["critic"].module
            modules = {**modules, "critic": TensorDictSequential(trunk, head)}
        learner = factories["learner_factory"](**modules)
        if kind in ("two-pass values", "before"):  # torchrl's estimator runs the critic
            estimator = learner.value_estimator.estimator
            estimator.value_network = learner.value_estimator.value_network
            learner.value_estimator = estimator
        if kind in ("NCHW weights", "before"):
            learner.loss_module.to(memory_format=torch.contiguous_format)
        out[kind] = learner
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
    parser.add_argument("--presets", default="ppo-pong,appo-pong,impala-pong")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS[1:]), help="besides shipped")
    args = parser.parse_args()
    chosen = ("shipped", *(v for v in args.variants.split(",") if v and v != "shipped"))
    if unknown := sorted(set(chosen) - set(VARIANTS)):
        parser.error(f"--variants: unknown {unknown}; accepted: {', '.join(VARIANTS[1:])}")
    json_line({"machine": machine_info()})
    rows = []
    for name in args.presets.split(","):
        torch.set_num_threads(get_preset(name).trainer.num_threads or 1)
        variants = learners(name, chosen)
        batch = real_batch(name, variants["shipped"].policy)
        times = in_turn({kind: functools.partial(seconds, learner.update, batch)
                         for kind, learner in variants.items()}, repeats=args.repeats)  # fmt: skip
        for kind in chosen[1:]:
            speedup = paired_ratios(times[kind], times["shipped"])
            row = {
                "preset": name, "frames": batch.numel(), "threads": torch.get_num_threads(),
                "variant": kind, "shipped_s": statistics.median(times["shipped"]),
                "variant_s": statistics.median(times[kind]),
                "speedup_ratio_of_medians": speedup.ratio_of_medians,
                "speedup_median_of_ratios": speedup.median_of_ratios,
                "speedup_range": [speedup.low, speedup.high], "repeats": args.repeats,
            }  # fmt: skip
            json_line(row)
            rows.append(row)
    print("\n| preset | frames per update | threads | without | its update s | shipped s | "
          "speed-up (ratio of medians) | median of ratios (range) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["speedup_range"]
        print(f"| {r['preset']} | {r['frames']} | {r['threads']} | {r['variant']} | "
              f"{r['variant_s']:.3f} | {r['shipped_s']:.3f} | "
              f"{r['speedup_ratio_of_medians']:.2f}x | {r['speedup_median_of_ratios']:.2f}x "
              f"({low:.2f}-{high:.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
