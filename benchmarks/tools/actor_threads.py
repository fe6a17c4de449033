"""torch's threads in actors of tdscheme's local Ray: a thread per core against the actor's CPUs.

A worker process of the local Ray tdscheme starts imports torch when it is spawned,
before Ray sets ``OMP_NUM_THREADS`` for the actor placed on it; until commit afc3cc0
its torch kept a thread per core whatever the actor held
(:mod:`tdscheme.runtime.threads`). Two measurements on that Ray (``local_ray_config``,
``num_cpus=2``), each row alternating with the other, ``--repeats`` times:

* ``policy``: two 1-CPU actors at once, each timing ``--calls`` calls of a policy
  network under ``no_grad``: the 2x64 tanh MLP on CartPole's ``[64, 4]`` observations and
  the linear pixel policy on ``[16, 4, 84, 84]`` uint8 frames (``peers``). ``per core``:
  the threads the preloaded process has; ``matched``: after ``match_ray_cpus``.
* ``collector``: tdscheme's ``RayCollector``, 2 workers of one CPU, first-ready: frames/s
  over ``--seconds`` after 3 batches, on 64 CartPole-v1 per worker with the MLP (4096
  frames per batch) and on ``fast_paths.py``'s pixel envs (16 per worker, uint8 4x84x84
  frames) with the linear pixel policy (2048 frames per batch).
  ``per core``: the actors' ``runtime_env`` sets ``OMP_NUM_THREADS`` to the machine's
  core count (what the preloaded torch had before the fix); ``matched``: tdscheme's default.

Run from the repository root::

    .venv/bin/python benchmarks/tools/actor_threads.py --out results_section.md
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import fast_paths  # benchmarks/fast_paths.py (Ray's workers too: main)
import peers  # benchmarks/peers.py
import ray
import torch
from harness import benchmarks_on_pythonpath, json_line, settle, turn_order
from report import write_text_section

from tdscheme import RayCollector
from tdscheme.envs import make_env
from tdscheme.runtime import local_ray_config


class PolicyTimer:
    """A 1-CPU actor timing a policy network's calls in its own process."""

    def run(self, which: str, matched: bool, calls: int) -> dict:
        from tdscheme.runtime.threads import match_ray_cpus

        if matched:
            match_ray_cpus()
        else:  # what the preloaded process had: a thread per core
            torch.set_num_threads(os.cpu_count() or 1)
        if which == "mlp":
            net, x = peers.mlp_policy(4, 2).module, torch.randn(64, 4)
        else:
            net = peers.pixel_policy((4, 84, 84), 2).module
            x = torch.randint(0, 255, (16, 4, 84, 84), dtype=torch.uint8)
        with torch.no_grad():
            for _ in range(calls // 10):
                net(x)
            start = time.perf_counter()
            for _ in range(calls):
                net(x)
        return {
            "threads": torch.get_num_threads(),
            "us": (time.perf_counter() - start) / calls * 1e6,
        }


def policy_rows(repeats: int, calls: int) -> list[dict]:
    timer = ray.remote(num_cpus=1)(PolicyTimer)
    actors = [timer.remote() for _ in range(2)]
    rows = []
    try:
        for which in ("mlp", "pixels"):
            for rep in range(repeats):
                for matched in turn_order((False, True), rep):
                    out = ray.get([a.run.remote(which, matched, calls) for a in actors])
                    us = statistics.mean(o["us"] for o in out)
                    rows.append(dict(section="policy", net=which, matched=matched,
                                     threads=out[0]["threads"], value=us))  # fmt: skip
                    json_line(rows[-1])
    finally:
        for a in actors:
            ray.kill(a)
        settle()
    return rows


WORKLOADS = {
    "CartPole x64": lambda: (
        functools.partial(make_env, "CartPole-v1", num_envs=64), peers.mlp_policy(4, 2), 4096
    ),
    "pixels x16": lambda: (
        functools.partial(fast_paths.pixel_vector_env, fast_paths.PIXEL_ENVS),
        peers.pixel_policy(fast_paths.PIXELS, 2), fast_paths.PIXEL_FRAMES_PER_BATCH,
    ),
}  # fmt: skip


def collector_rate(workload: str, matched: bool, seconds: float) -> float:
    options: dict = {"num_cpus": 1}
    if not matched:
        options["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}}
    torch.manual_seed(0)
    env_fn, policy, frames_per_batch = WORKLOADS[workload]()
    collector = RayCollector(
        env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1, num_collectors=2,
        remote_configs=options, sync=False,
    )  # fmt: skip
    try:
        it = iter(collector)
        for _ in range(3):
            next(it)
        start, frames = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            frames += next(it).numel()
        return frames / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        settle()  # Ray has its CPUs back


def collector_rows(repeats: int, seconds: float) -> list[dict]:
    rows = []
    for workload in WORKLOADS:
        for rep in range(repeats):
            for matched in turn_order((False, True), rep):
                rate = collector_rate(workload, matched, seconds)
                rows.append(dict(section="collector", net=workload, matched=matched, value=rate))
                json_line(rows[-1])
    return rows


def table(rows: list[dict]) -> str:
    lines = []
    for section, unit in (("policy", "us per call"), ("collector", "frames/s")):
        picked = [r for r in rows if r["section"] == section]
        if not picked:
            continue
        lines += [f"### {section}", "", f"| workload | per core: {unit} | matched: {unit} | "
                  "matched vs per core, >1: matched faster (median of pairs) | pairs |", "|---|---|---|---|---|"]  # fmt: skip
        for net in dict.fromkeys(r["net"] for r in picked):
            old = [r["value"] for r in picked if r["net"] == net and not r["matched"]]
            new = [r["value"] for r in picked if r["net"] == net and r["matched"]]
            # a time: per core over matched (>1: matched is faster); a rate: matched over per core
            ratios = [
                o / n if section == "policy" else n / o for o, n in zip(old, new, strict=True)
            ]
            spread = ", ".join(f"{x:.2f}x" for x in ratios)
            lines.append(f"| {net} | {statistics.median(old):,.1f} | {statistics.median(new):,.1f} "
                         f"| {statistics.median(ratios):.2f}x | {spread} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--sections", default="policy,collector")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    benchmarks_on_pythonpath()  # the actors import peers and fast_paths by name
    ray.init(**{**local_ray_config(), "num_cpus": 2, "log_to_driver": False})
    rows: list[dict] = []
    try:
        if "policy" in args.sections:
            rows += policy_rows(args.repeats, args.calls)
        if "collector" in args.sections:
            rows += collector_rows(args.repeats, args.seconds)
    finally:
        ray.shutdown()
    text = table(rows)
    print(text)
    if args.out:
        write_text_section(
            args.out, text, title="torch's threads in actors of tdscheme's local Ray"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
