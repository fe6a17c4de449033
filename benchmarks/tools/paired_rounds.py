"""tdscheme's RayCollector against the hand-written Ray collector in rounds, in turn, in one run.

Issue 34's rates, each a ratio to a hand-written Ray collector
(``peers.MinimalRayCollector``), moved up to 60 % between runs on this 2-core
machine, so that a ratio of two rows measured once each, minutes apart, carries
±20 %. Here each workload is measured in ``--rounds`` rounds; a round runs tdscheme's
collector and the hand-written one, one after the other (tdscheme first in even
rounds, the hand-written first in odd ones, so that neither always follows the
other), each built fresh on the run's one Ray (``num_cpus=2``), 2 workers of
``{"num_cpus": 1}``, first-ready order, frames/s over ``--frames`` frames after one
warm-up batch (``harness.frames_per_s``; transitions only where a batch has a mask).
Before the rounds, ``--warmup`` warm-up rounds (default 1, the hand-written side first)
run each side once and are left out of the table: the first collector measured on a
fresh Ray runs slower, whichever it is. Per workload: each side's median rate and
range, the round's ratios (tdscheme over hand-written: >1 is tdscheme faster), their
median and their minimum, and the ratio of the medians.

Workloads (``--workloads``, default all; ``fast_paths.py``'s and ``collection.py``'s
configurations):

* ``pixels``: 16 ``PixelsLikeObs`` CartPoles per worker (uint8 4x84x84) in a
  DISABLED ``SyncVectorEnv``, 2048 frames per batch, ``peers.pixel_policy``;
  tdscheme's default layout (each frame in ``"observation"`` and ``("next",
  "observation")``). ``pixels_compact``: the same with torchrl's ``compact_obs=True``;
* ``pong``: EnvPool ``Pong-v5`` x16 per worker, 1024 frames per batch,
  ``peers.pixel_index_policy`` (needs the ``envpool`` extra);
* ``disabled``: ``make_env("CartPole-v1", num_envs=64)`` (DISABLED; the hand-written
  actors reset with ``reset_mask``), 4096 frames per batch, the 2x64 MLP;
* ``same_step``: a SAME_STEP ``SyncVectorEnv`` of 64 CartPoles in torchrl's wrapper;
* ``next_step_native``: ``gym.make_vec("CartPole-v1", 64)`` (``CartPoleVectorEnv``,
  NEXT_STEP) as the workers' factory returns it; ``next_step_index``: the same env with
  index actions and the MLP ending in an argmax (the hand-written policy's work);
* ``next_step_layout``: ``next_step_index``'s tdscheme collector against hand-written actors
  that return what its batch holds, by hand in numpy (``layout_worker.TdschemeLayoutWorker``:
  torchrl's layout, each row's transitions packed to its front, trajectory ids, the stamps,
  the finite check): what tdscheme costs beyond the layout it owes, apart from the layout's;
* ``acrobot``: ``gym.make_vec("Acrobot-v1", 64)`` as a user writes it first (gymnasium's
  default: a ``SyncVectorEnv`` in NEXT_STEP mode; the hand-written actors step it in that
  mode and mask its reset steps), 4096 frames per batch, the 2x64 MLP: a workload no
  fast path was tuned on.

Run from the repository root::

    .venv/bin/python benchmarks/tools/paired_rounds.py --workloads pixels,pong --out section.md
    .venv/bin/python benchmarks/tools/paired_rounds.py --quick
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import collection_runs  # benchmarks/ (Ray's workers too: harness.benchmarks_on_pythonpath)
import gymnasium as gym
import layout_worker
import peers
import torch
import vector_envs
from collection_runs import Measurement
from harness import benchmarks_on_pythonpath, paired_ratios, turn_order
from report import Recorder, run_sections

from tdscheme.envs import make_env

ENV_ID, NUM_ENVS, FPB = "CartPole-v1", 64, 4096
PONG, ACROBOT = "Pong-v5", "Acrobot-v1"
#: workload -> its env id where it is not ENV_ID's (the table's env column)
ENV_IDS = {"pong": PONG, "acrobot": ACROBOT}
PIXELS, PIXEL_ENVS, PIXEL_FPB = (4, 84, 84), 16, 2048
HAND = "hand-written Ray"
#: workload -> frames per measurement (``--frames`` overrides)
FRAMES = {
    "pixels": 150_000, "pixels_compact": 150_000, "pong": 30_000, "disabled": 600_000,
    "same_step": 600_000, "next_step_native": 600_000, "next_step_index": 600_000,
    "next_step_layout": 600_000, "acrobot": 200_000,
}  # fmt: skip


def workload(name: str) -> dict[str, Callable[[], Any]]:
    """``{"tdscheme": maker, HAND: maker}`` of one workload's collectors (see the module)."""
    ours = functools.partial(collection_runs.tdscheme_collector, sync=False)
    hand = functools.partial(peers.MinimalRayCollector, ENV_ID, num_envs=NUM_ENVS,
                             frames_per_batch=FPB)  # fmt: skip
    torch.manual_seed(0)
    if name in ("pixels", "pixels_compact"):
        env_fn = functools.partial(vector_envs.pixel_vector_env, ENV_ID, PIXEL_ENVS, PIXELS)
        kwargs = {"collector_kwargs": {"compact_obs": True}} if name == "pixels_compact" else {}
        return {
            "tdscheme": functools.partial(ours, env_fn, peers.pixel_policy(PIXELS, 2),
                                          frames_per_batch=PIXEL_FPB, **kwargs),
            HAND: functools.partial(hand, num_envs=PIXEL_ENVS, frames_per_batch=PIXEL_FPB,
                                    worker_kwargs={"autoreset_mode": "DISABLED", "pixels": PIXELS}),
        }  # fmt: skip
    if name == "pong":
        env_fn = functools.partial(make_env, PONG, num_envs=16, backend="envpool")
        return {
            "tdscheme": functools.partial(ours, env_fn, peers.pixel_index_policy(PIXELS, 6),
                                          frames_per_batch=1024),
            HAND: functools.partial(peers.MinimalRayCollector, PONG, num_envs=16,
                                    frames_per_batch=1024, worker_cls=peers.MinimalEnvPoolWorker),
        }  # fmt: skip
    if name == "acrobot":  # gymnasium's default vector env of an env nothing was tuned on
        return {
            "tdscheme": functools.partial(ours, functools.partial(gym.make_vec, ACROBOT, num_envs=NUM_ENVS),
                                          peers.mlp_policy(6, 3), frames_per_batch=FPB),
            HAND: functools.partial(peers.MinimalRayCollector, ACROBOT, num_envs=NUM_ENVS,
                                    frames_per_batch=FPB, worker_kwargs={"autoreset_mode": "NEXT_STEP"}),
        }  # fmt: skip
    policy, mode, native = peers.mlp_policy(4, 2), "DISABLED", {}
    if name == "disabled":
        env_fn: Any = functools.partial(make_env, ENV_ID, num_envs=NUM_ENVS)
    elif name == "same_step":
        env_fn, mode = functools.partial(vector_envs.same_step_env, ENV_ID, NUM_ENVS), "SAME_STEP"
    elif name in ("next_step_native", "next_step_index", "next_step_layout"):
        mode, native = "NEXT_STEP", {"vectorization_mode": "vector_entry_point"}
        env_fn = functools.partial(gym.make_vec, ENV_ID, num_envs=NUM_ENVS)
        if name == "next_step_layout":  # tdscheme's batch by hand (index actions)
            hand = functools.partial(hand, worker_cls=layout_worker.TdschemeLayoutWorker)
            native = {**native, "index_actions": True}
        if name != "next_step_native":
            env_fn = functools.partial(vector_envs.index_action_vec_env, ENV_ID, NUM_ENVS)
            policy = peers.mlp_policy(4, 2, index_actions=True)
    else:
        raise ValueError(f"workload={name!r} is unknown; accepted: {', '.join(FRAMES)}")
    return {
        "tdscheme": functools.partial(ours, env_fn, policy, frames_per_batch=FPB),
        HAND: functools.partial(hand, worker_kwargs={"autoreset_mode": mode, **native}),
    }


def measure_rounds(
    rec: Recorder, name: str, rounds: int, frames: int, timeout_s: float, warmup: int = 1
) -> None:
    """``rounds`` rounds of one workload, each side once per round (see the module).

    Each side is ``collection_runs.measure``'s row: construction to first batch, then
    frames/s over ``frames`` frames (at least 3 batches), ``n/a`` with the error if it fails.
    ``warmup`` rounds come first (the hand-written side first, config ``"warm-up i"``),
    left out of the table: on a fresh Ray the first collector measured ran 17-20 % slower
    than the same collector measured next (stop 63: pixels, either side first), and
    round 0 starts with tdscheme.
    """
    makes = workload(name)
    settings = collection_runs.Settings(frames=frames, min_batches=3, timeout_s=timeout_s)
    env = ENV_IDS.get(name, ENV_ID)
    order = [(f"warm-up {w}", list(makes)[::-1]) for w in range(warmup)]  # the hand-written first
    order += [(f"round {r}", turn_order(list(makes), r)) for r in range(rounds)]
    for config, impls in order:
        for impl in impls:
            row = dict(section=name, impl=impl, env=env, order="first-ready", config=config)
            collection_runs.measure(rec, settings, row, makes[impl])


def summary(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table: a row per workload (see the module)."""
    header = ["workload", "rounds", "tdscheme frames/s (median, range)",
              "hand-written frames/s (median, range)", "per-round ratios",
              "median ratio", "min ratio", "ratio of medians", "note"]  # fmt: skip
    table = [header]
    ms = [m for m in ms if m.metric == "frames_per_s" and m.config.startswith("round ")]
    for name in dict.fromkeys(m.section for m in ms):
        by = {impl: {m.config: m for m in ms if m.section == name and m.impl == impl}
              for impl in ("tdscheme", HAND)}  # fmt: skip
        notes = "; ".join(dict.fromkeys(m.note for m in ms if m.section == name and m.note))
        pairs = [(by["tdscheme"][r].value, by[HAND][r].value) for r in by["tdscheme"]
                 if r in by[HAND] and by["tdscheme"][r].value and by[HAND][r].value]  # fmt: skip
        if not pairs:
            table.append([name, "0", *["n/a"] * 6, notes])
            continue
        ours, hand = [p[0] for p in pairs], [p[1] for p in pairs]
        ratios = paired_ratios(ours, hand)
        table.append([
            name, str(len(pairs)), _rates(ours), _rates(hand),
            ", ".join(f"{a / b:.3f}x" for a, b in pairs), f"{ratios.median_of_ratios:.3f}x",
            f"{ratios.low:.3f}x", f"{ratios.ratio_of_medians:.3f}x", notes,
        ])  # fmt: skip
    return {"paired rounds": table}


def _rates(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads",
        default=",".join(FRAMES),
        help=f"comma-separated subset of {','.join(FRAMES)} (default: all)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per workload (default 3)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="warm-up rounds per workload, not in the table"
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        help="frames per measurement (default: per workload, see FRAMES)",
    )
    parser.add_argument("--quick", action="store_true", help="2 rounds of few frames: a smoke test")
    parser.add_argument("--out", default=None, help="also write the table as a markdown section")
    args = parser.parse_args(argv)
    names = [x.strip() for x in args.workloads.split(",") if x.strip()]
    if not names or set(names) - set(FRAMES):
        parser.error(f"--workloads={args.workloads!r}: accepted: {','.join(FRAMES)}")
    if args.rounds < 1 or (args.frames is not None and args.frames < 1) or args.warmup < 0:
        parser.error(
            f"--rounds={args.rounds}, --frames={args.frames}, --warmup={args.warmup}: "
            "rounds and frames must be positive, warm-up rounds >= 0"
        )
    rounds = 2 if args.quick else args.rounds

    def run(rec: Recorder) -> None:
        for name in names:
            frames = args.frames or (FRAMES[name] // 50 if args.quick else FRAMES[name])
            measure_rounds(rec, name, rounds, frames, timeout_s=240.0, warmup=args.warmup)

    benchmarks_on_pythonpath()  # the collectors' workers import peers by name
    return run_sections(
        run, tables=summary, out=args.out, argv=argv, script="tools/paired_rounds.py",
        title="Issue 34's rows in paired rounds: tdscheme vs the hand-written Ray collector",
        intro=__doc__.split("\n\n")[1].replace("\n", " "),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
