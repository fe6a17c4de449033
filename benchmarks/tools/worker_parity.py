"""tdscheme's worker against the hand-written worker in one process, batch for batch in turn.

What a worker costs before anything crosses Ray: a
:class:`~tdscheme.collectors.worker.CollectorWorker` built as a Ray actor builds it
(``reuse_batch_buffer=True``: it encodes its own batch buffer, no copy) and
``benchmarks/peers.py``'s hand-written worker of the same workload, each collecting
one batch in turn (tdscheme, then the hand-written, ``--batches`` times), so that the
machine's drift reaches both alike. Per workload: the median time per batch of each,
the ratio of the medians (hand-written over tdscheme: >1 is tdscheme faster), the
median of the per-pair ratios and the ratio of the sums. Both collect the same env
steps per batch (a ``NEXT_STEP`` env's reset steps included on both sides).

Workloads (``--workloads``, default all):

* ``native``: ``gym.make_vec("CartPole-v1", 64)`` (``CartPoleVectorEnv``, NEXT_STEP),
  4,096 frames per batch, the 2x64 MLP with its one-hot head (``peers.mlp_policy``);
* ``native_index``: the same env in torchrl's wrapper with index actions and the MLP
  ending in an argmax (the hand-written policy's work);
* ``native_layout``: ``native_index`` against ``benchmarks/layout_worker.py``'s
  :class:`~layout_worker.TdschemeLayoutWorker` (a tdscheme batch's whole content by hand
  in numpy, index actions): what tdscheme's worker costs beyond what its batch holds;
* ``disabled``: ``make_env("CartPole-v1", num_envs=64)`` (``SyncVectorEnv``, DISABLED);
* ``pixels``: 16 ``PixelsLikeObs`` CartPoles (uint8 4x84x84), DISABLED, 2,048 per batch;
* ``pong``: EnvPool ``Pong-v5`` x16, 1,024 per batch (needs the ``envpool`` extra).

Run from the repository root::

    .venv/bin/python benchmarks/tools/worker_parity.py --out section.md
    .venv/bin/python benchmarks/tools/worker_parity.py --workloads native,pixels --batches 20
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, report, ...

import gymnasium as gym
import peers  # benchmarks/peers.py
import torch
import vector_envs  # benchmarks/vector_envs.py
from harness import in_turn, paired_ratios, seconds
from layout_worker import TdschemeLayoutWorker  # benchmarks/layout_worker.py
from report import write_text_section

from tdscheme.collectors import CollectorWorker, WorkerSpec
from tdscheme.envs import make_env

NATIVE = {"autoreset_mode": "NEXT_STEP", "vectorization_mode": "vector_entry_point"}
PIXELS, PIXEL_ENVS = (4, 84, 84), 16  # fast_paths.py's pixel workload


def workloads() -> dict[str, tuple[Any, Callable[[], Any], Callable[[], Any], int]]:
    """name -> (tdscheme's env factory, its policy, the hand-written worker, frames per batch)."""
    native = functools.partial(gym.make_vec, "CartPole-v1", num_envs=64)
    index = functools.partial(vector_envs.index_action_vec_env, "CartPole-v1", 64)
    pixels = functools.partial(vector_envs.pixel_vector_env, "CartPole-v1", PIXEL_ENVS, PIXELS)
    pixel_hand = {"autoreset_mode": "DISABLED", "pixels": PIXELS}
    hand = peers.MinimalCollectorWorker
    return {
        "native": (native, lambda: peers.mlp_policy(4, 2), lambda: hand("CartPole-v1", 64, 4096, **NATIVE), 4096),
        "native_index": (index, lambda: peers.mlp_policy(4, 2, index_actions=True),
                         lambda: hand("CartPole-v1", 64, 4096, **NATIVE), 4096),
        "native_layout": (index, lambda: peers.mlp_policy(4, 2, index_actions=True),
                          lambda: TdschemeLayoutWorker("CartPole-v1", 64, 4096, index_actions=True,
                                                       **NATIVE), 4096),
        "disabled": (functools.partial(make_env, "CartPole-v1", num_envs=64),
                     lambda: peers.mlp_policy(4, 2),
                     lambda: hand("CartPole-v1", 64, 4096, autoreset_mode="DISABLED"), 4096),
        "pixels": (pixels, lambda: peers.pixel_policy(PIXELS, 2),
                   lambda: hand("CartPole-v1", 16, 2048, **pixel_hand), 2048),
        "pong": (functools.partial(make_env, "Pong-v5", num_envs=16, backend="envpool"),
                 lambda: peers.pixel_index_policy((4, 84, 84), 6),
                 lambda: peers.MinimalEnvPoolWorker("Pong-v5", 16, 1024), 1024),
    }  # fmt: skip


def measure(name: str, batches: int) -> dict[str, Any]:
    """One workload: each worker's seconds per batch, in turn (see the module)."""
    env_fn, policy, make_hand, fpb = workloads()[name]
    torch.manual_seed(0)
    ours = CollectorWorker(0, WorkerSpec(env_fn, policy(), frames_per_batch=fpb), seed=0,
                           reuse_batch_buffer=True)  # fmt: skip
    hand = make_hand()
    requests = itertools.count()  # the worker's batch index: 0 is the warm-up's
    try:
        times = in_turn({"tdscheme": lambda: seconds(ours.collect, next(requests)),
                         "hand": lambda: seconds(hand.next)}, repeats=batches)  # fmt: skip
    finally:
        ours.shutdown()
        hand.close()
    td, hd = times["tdscheme"], times["hand"]
    ratios = paired_ratios(hd, td)
    return {
        "workload": name, "frames_per_batch": fpb, "batches": batches,
        "tdscheme_ms": 1e3 * statistics.median(td), "hand_ms": 1e3 * statistics.median(hd),
        "ratio_of_medians": ratios.ratio_of_medians, "median_of_ratios": ratios.median_of_ratios,
        "ratio_of_sums": sum(hd) / sum(td),
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = ["| workload | frames per batch | batches (each) | tdscheme ms per batch | "
             "hand-written ms per batch | ratio of medians (>1: tdscheme faster) | "
             "median of pair ratios | ratio of sums |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['workload']} | {r['frames_per_batch']:,} | {r['batches']} | "
                     f"{r['tdscheme_ms']:.1f} | {r['hand_ms']:.1f} | {r['ratio_of_medians']:.3f}x | "
                     f"{r['median_of_ratios']:.3f}x | {r['ratio_of_sums']:.3f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(workloads()))
    parser.add_argument("--batches", type=int, default=30, help="batches of each worker")
    parser.add_argument(
        "--out",
        default=None,
        help="write the table (under the command and the machine) to this markdown file",
    )
    args = parser.parse_args(argv)
    names = [name for name in args.workloads.split(",") if name]
    unknown = sorted(set(names) - set(workloads()))
    if unknown:
        parser.error(f"--workloads has {unknown}; accepted: {sorted(workloads())}")
    torch.set_num_threads(1)  # a 1-CPU actor's
    rows = []
    for name in names:
        rows.append(measure(name, args.batches))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.out:
        write_text_section(
            args.out, text, title="tdscheme's worker against the hand-written, one process"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
