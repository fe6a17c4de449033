"""Soak: a long ppo-cartpole run with a collector worker killed every minute and one hung once.

The run is the ``ppo-cartpole`` preset through :class:`tdscheme.Scheme` (the
command's settings), for ``--minutes``. A fault thread, meanwhile:

* every ``--kill-every-s`` seconds SIGKILLs a collector worker (``ray.kill``, the
  workers in turn), like a node's OOM killer;
* once, at ``--hang-at-s``, SIGSTOPs a worker's process: a hung simulator that
  neither answers nor dies; tdscheme's liveness check
  (``worker_stall_timeout_s``) has to find it, kill it and rebuild it.

After every iteration it checks the frame ledger (``balanced``: every request's
resolution added up to what it asked, and ``collected == yielded + dropped +
preempted + lost + discarded``) and that the frames the Scheme trained on are the
ledger's ``yielded``; every ``--eval-every-frames`` it evaluates the
policy (10 episodes). The result says whether the run finished, the faults it
met, the restarts, the ledger at the end, and the learning curve, beside the
curve of a fault-free run of ``--baseline-minutes`` (0: none) measured in the
same process, so that "the faults cost only the frames they lost" can be read
off.

Run from the repository root::

    .venv/bin/python benchmarks/soak.py                      # 20 minutes, the issue's soak
    .venv/bin/python benchmarks/soak.py --minutes 6 --baseline-minutes 3

Output: one JSON line per evaluation and one for the result, then a table.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from typing import Any

import ray
from harness import actor_pid, json_line, ledger_adds_up
from report import machine_info

from tdscheme import Scheme
from tdscheme.engine import evaluate
from tdscheme.presets import get_preset


class Faults(threading.Thread):
    """Kills a worker every ``kill_every_s`` and SIGSTOPs one once at ``hang_at_s``."""

    def __init__(self, scheme: Scheme, *, kill_every_s: float, hang_at_s: float | None) -> None:
        super().__init__(daemon=True)
        self.scheme = scheme
        self.kill_every_s = kill_every_s
        self.hang_at_s = hang_at_s
        self.stop = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.started_at = time.monotonic()

    def run(self) -> None:
        next_kill = self.kill_every_s
        hang_done = self.hang_at_s is None
        victim = 0
        while not self.stop.wait(1.0):
            now = time.monotonic() - self.started_at
            workers = self.scheme.collector.workers
            try:
                if not hang_done and now >= self.hang_at_s:
                    target = (victim + 1) % len(workers)
                    pid = actor_pid(workers[target])
                    os.kill(pid, signal.SIGSTOP)
                    self.events.append({"t_s": round(now, 1), "fault": "sigstop", "worker": target})
                    hang_done = True
                elif now >= next_kill:
                    ray.kill(workers[victim], no_restart=True)
                    self.events.append({"t_s": round(now, 1), "fault": "kill", "worker": victim})
                    victim = (victim + 1) % len(workers)
                    next_kill += self.kill_every_s
            except Exception as err:  # a worker being rebuilt: try again next second
                self.events.append({"t_s": round(now, 1), "fault": "skipped", "error": str(err)})


def run(minutes: float, *, faults: bool, args: argparse.Namespace) -> dict[str, Any]:
    preset = get_preset("ppo-cartpole").override(
        {
            "seed": args.seed,
            "worker_stall_timeout_s": args.stall_timeout_s,
            "max_restarts": 1000,
            "batch_timeout_s": 300.0,
        }
    )
    curve: list[dict[str, Any]] = []
    unbalanced = 0
    mismatched = 0
    eval_env = preset.factories()["eval_env_factory"]()
    started = time.monotonic()
    with Scheme(**preset.factories(), config=preset.scheme) as scheme:
        thread = None
        if faults:
            thread = Faults(scheme, kill_every_s=args.kill_every_s, hang_at_s=args.hang_at_s)
            thread.start()
        last_eval = 0
        try:
            while time.monotonic() - started < minutes * 60:
                scheme.step()
                ledger = scheme.collector.stats(timeout=30)["ledger"]
                if not ledger_adds_up(ledger):
                    unbalanced += 1
                if ledger["yielded"] != scheme.frames:
                    mismatched += 1
                if scheme.frames - last_eval >= args.eval_every_frames:
                    last_eval = scheme.frames
                    result = evaluate(eval_env, scheme.policy, episodes=10)
                    point = {
                        "faults": faults,
                        "t_s": round(time.monotonic() - started, 1),
                        "frames": scheme.frames,
                        "eval_return": round(result.mean_return, 1),
                    }
                    curve.append(point)
                    json_line(point)
        finally:
            if thread is not None:
                thread.stop.set()
                thread.join(timeout=10)
        stats = scheme.collector.stats(timeout=30)
        frames = scheme.frames
    eval_env.close()
    return {
        "faults": faults,
        "minutes": minutes,
        "finished": True,
        "frames": frames,
        "restarts": stats["restarts"],
        "events": [] if thread is None else thread.events,
        "ledger": stats["ledger"],
        "iterations_unbalanced": unbalanced,
        "iterations_yielded_mismatch": mismatched,
        "curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--baseline-minutes", type=float, default=0.0)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--hang-at-s", type=float, default=150.0)
    parser.add_argument("--stall-timeout-s", type=float, default=30.0)
    parser.add_argument("--eval-every-frames", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    json_line({"machine": machine_info()})
    results = [run(args.minutes, faults=True, args=args)]
    if args.baseline_minutes > 0:
        results.append(run(args.baseline_minutes, faults=False, args=args))
    for result in results:
        json_line(result)
    print(
        "\n| run | minutes | frames | kills | hangs | restarts | lost | ledger | curve (frames: return) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        kinds = [e["fault"] for e in r["events"]]
        ledger = r["ledger"]
        ok = r["iterations_unbalanced"] == 0 and r["iterations_yielded_mismatch"] == 0
        curve = ", ".join(f"{p['frames'] // 1000}k: {p['eval_return']:.0f}" for p in r["curve"][:8])
        print(
            f"| {'faults' if r['faults'] else 'no faults'} | {r['minutes']:g} | {r['frames']:,} | "
            f"{kinds.count('kill')} | {kinds.count('sigstop')} | {r['restarts']} | "
            f"{ledger['lost']:,} | {'balanced' if ok else 'UNBALANCED'} | {curve} |"
        )


if __name__ == "__main__":
    main()
