"""Where a CollectorWorker's time goes: per-step cost and the profile's top entries, in-process.

A :class:`~tdscheme.collectors.worker.CollectorWorker` is a plain Python class, so it
runs here without Ray: CartPole-v1 (``tdscheme.envs.make_env``, 1, 8 and 64 envs),
the 2x64 MLP greedy policy of ``benchmarks/collection.py``, profiled with the
standard library's ``cProfile``. Next to it, the floor: the same gymnasium envs
stepped with the same MLP under ``no_grad``, numpy in and out (no torchrl). Costs
are per env step (one call of the env, all its copies) and per frame, after one
warm-up batch. Run from the repository root::

    .venv/bin/python benchmarks/tools/profile_worker.py              # 1, 8, 64 envs, both paths
    .venv/bin/python benchmarks/tools/profile_worker.py --envs 64 --top 25 --collector torchrl

``--collector`` picks the worker's collector: ``default`` (tdscheme's default
class) or ``torchrl`` (torchrl's ``Collector`` given as ``collector_class``).
``--vector native``: the worker's factory returns ``gym.make_vec("CartPole-v1", n)``
itself (CartPole's own ``CartPoleVectorEnv``: every copy in one numpy call, NEXT_STEP;
tdscheme pads its reset steps) and the hand-written worker steps the same env (its
reset steps counted as frames); the default, ``sync``, is ``make_env``'s DISABLED
``SyncVectorEnv`` (one env when ``--envs 1``).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import gymnasium as gym
import peers  # benchmarks/peers.py
import torch
from harness import json_line

from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env
from tdscheme.rollout.torchrl_names import Collector


def worker_cost(
    num_envs: int, collector: str, batches: int, top: int | None, vector: str = "sync"
) -> dict:
    """Per-step cost of a CollectorWorker's ``collect`` and (``top``) the top of its profile."""
    torch.manual_seed(0)
    steps = max(1, 8192 // num_envs) if num_envs > 1 else 1000
    env_fn = (
        functools.partial(gym.make_vec, "CartPole-v1", num_envs=num_envs)
        if vector == "native"
        else functools.partial(make_env, "CartPole-v1", num_envs=num_envs)
    )
    spec = WorkerSpec(
        env_fn,
        peers.mlp_policy(4, 2),
        frames_per_batch=steps * num_envs,
    )
    if collector == "torchrl":
        spec.collector_class = Collector
    worker = CollectorWorker(0, spec, seed=0)
    worker.collect(0)  # warm-up
    profiler = cProfile.Profile()
    start = time.perf_counter()
    if top:
        profiler.enable()
    for i in range(batches):
        worker.collect(i + 1)
    profiler.disable()
    elapsed = time.perf_counter() - start
    worker.shutdown()
    out = io.StringIO()
    if top:
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return {
        "impl": f"CollectorWorker ({collector})",
        "num_envs": num_envs,
        "us_per_step": 1e6 * elapsed / (batches * steps),
        "us_per_frame": 1e6 * elapsed / (batches * steps * num_envs),
        **({"profile": out.getvalue()} if top else {}),
    }


def floor_cost(num_envs: int, batches: int, vector: str = "sync") -> dict:
    """The same envs and MLP without torchrl (benchmarks/peers.py's hand-written worker)."""
    steps = max(1, 8192 // num_envs) if num_envs > 1 else 1000
    native = {"autoreset_mode": "NEXT_STEP", "vectorization_mode": "vector_entry_point"}
    worker = peers.MinimalCollectorWorker(
        "CartPole-v1", num_envs, steps * num_envs, **(native if vector == "native" else {})
    )
    worker.next()
    start = time.perf_counter()
    for _ in range(batches):
        worker.next()
    elapsed = time.perf_counter() - start
    worker.close()
    return {
        "impl": "hand-written (gymnasium + MLP, numpy)",
        "num_envs": num_envs,
        "us_per_step": 1e6 * elapsed / (batches * steps),
        "us_per_frame": 1e6 * elapsed / (batches * steps * num_envs),
    }


def median_costs(
    num_envs: int, collectors: list[str], batches: int, repeats: int, vector: str = "sync"
) -> list[dict]:
    """Median per-step costs over ``repeats`` alternating rounds, without the profiler."""
    runs: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for name in ["hand", *collectors]:
            row = (
                floor_cost(num_envs, batches, vector)
                if name == "hand"
                else worker_cost(num_envs, name, batches, None, vector)
            )
            runs.setdefault(name, []).append(row)
    out = []
    for rounds in runs.values():
        row = dict(sorted(rounds, key=lambda r: r["us_per_step"])[len(rounds) // 2])
        row["impl"] += f" (median of {len(rounds)})"
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="1,8,64", help="comma-separated env counts")
    parser.add_argument("--collector", default="default,torchrl")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--vector", default="sync", choices=["sync", "native"])
    parser.add_argument("--top", type=int, default=15, help="profile entries printed")
    parser.add_argument(
        "--repeats",
        type=int,
        default=0,
        help="no profiler: time each implementation this many times, alternating, and "
        "report the median (costs under a loaded machine)",
    )
    args = parser.parse_args(argv)
    collectors = [c for c in args.collector.split(",") if c]
    if args.vector == "native" and "torchrl" in collectors:
        # torchrl's rollout cannot step a NEXT_STEP env that steps its copies in one call
        if collectors == ["torchrl"]:
            parser.error("--collector=torchrl with --vector=native: torchrl's Collector refuses "
                         "CartPoleVectorEnv (NEXT_STEP); accepted there: --collector=default")  # fmt: skip
        collectors.remove("torchrl")
        print("--vector native: torchrl's Collector refuses CartPoleVectorEnv (NEXT_STEP); "
              "its row is left out", file=sys.stderr)  # fmt: skip
    torch.set_num_threads(1)  # as in a Ray actor with num_cpus=1
    rows = []
    for num_envs in (int(x) for x in args.envs.split(",")):
        if args.repeats:
            rows += median_costs(num_envs, collectors, args.batches, args.repeats, args.vector)
            continue
        rows.append(floor_cost(num_envs, args.batches, args.vector))
        for collector in collectors:
            rows.append(worker_cost(num_envs, collector, args.batches, args.top, args.vector))
    for row in rows:
        json_line({k: v for k, v in row.items() if k != "profile"})
    print("\n| envs | impl | us per env step | us per frame |\n|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['num_envs']} | {row['impl']} | {row['us_per_step']:,.0f} "
            f"| {row['us_per_frame']:,.1f} |"
        )
    for row in rows:
        if "profile" in row:
            print(f"\n### {row['impl']}, {row['num_envs']} envs\n\n```")
            lines = row["profile"].splitlines()
            start = next(i for i, line in enumerate(lines) if "ncalls" in line)
            print("\n".join(lines[start : start + args.top + 1]))
            print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
