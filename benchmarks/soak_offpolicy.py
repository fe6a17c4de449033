"""Soak, off-policy: sac-pendulum with a Ray-held buffer, collectors killed, the buffer's actor killed.

The run is the ``sac-pendulum`` preset with ``buffer_location="ray"`` through
:class:`tdscheme.Scheme`, until ``--total-frames`` are trained on or ``--minutes``
pass. A fault thread, meanwhile, SIGKILLs a collector worker every
``--kill-every-s`` seconds (the workers in turn), and once, at ``--buffer-kill-at-s``,
the replay buffer's actor. A dead buffer takes its frames with it: the run stops
with an error naming it, and this script does what a user does, resuming from the
last checkpoint (state and buffer, taken every ``--checkpoint-every-frames`` with the
workers paused), the way ``tdscheme train --resume`` does.

After every step it checks the frame ledger (balanced, nothing unaccounted) and that
the frames written equal those trained on plus those written but not trained on yet
(``TrainingLoop.frames_pending``); every ``--eval-every-frames`` it evaluates the policy
(5 episodes). The result: frames trained on against the budget, the faults met, the
restarts, the resumes and the frames they rolled back, the ledger, and the learning
curve (does the return come back after each fault?).

Run from the repository root::

    .venv/bin/python benchmarks/soak_offpolicy.py                  # 20 minutes at most
    .venv/bin/python benchmarks/soak_offpolicy.py --minutes 5 --total-frames 20000

Output: one JSON line per evaluation, per fault and for the result, then a table.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray
from harness import json_line, ledger_adds_up
from report import machine_info

from tdscheme import Scheme
from tdscheme.engine import evaluate
from tdscheme.errors import ReplayBufferDied, WorkerError
from tdscheme.presets import get_preset


class Faults(threading.Thread):
    """Kills a collector worker every ``kill_every_s``, and the buffer's actor once."""

    def __init__(self, kill_every_s: float, buffer_kill_at_s: float | None) -> None:
        super().__init__(daemon=True)
        self.kill_every_s = kill_every_s
        self.buffer_kill_at_s = buffer_kill_at_s
        self.scheme: Scheme | None = None
        self.stop = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.started_at = time.monotonic()

    def now(self) -> float:
        """Seconds since the soak started (the faults' clock)."""
        return time.monotonic() - self.started_at

    def run(self) -> None:
        next_kill, victim = self.kill_every_s, 0
        buffer_done = self.buffer_kill_at_s is None
        while not self.stop.wait(1.0):
            now = time.monotonic() - self.started_at
            scheme = self.scheme
            if scheme is None:
                continue
            try:
                if not buffer_done and now >= self.buffer_kill_at_s:
                    ray.kill(scheme.replay_buffer.buffer._rb, no_restart=True)
                    self._event(now, "buffer actor killed")
                    buffer_done = True
                elif now >= next_kill:
                    workers = scheme.collector.workers
                    victim %= len(workers)
                    ray.kill(workers[victim], no_restart=True)
                    self._event(now, "collector killed", worker=victim)
                    victim += 1
                    next_kill += self.kill_every_s
            except Exception as err:  # noqa: BLE001 - a worker being rebuilt: next second
                self._event(now, "skipped", error=str(err).splitlines()[0][:120])

    def _event(self, now: float, fault: str, **extra: Any) -> None:
        event = {"t_s": round(now, 1), "fault": fault, **extra}
        self.events.append(event)
        json_line(event)


def _build(preset: Any) -> Scheme:
    return Scheme(**preset.factories(), config=preset.scheme)


def _checkpoint(scheme: Scheme, directory: Path) -> dict[str, Any]:
    with scheme.paused():
        state = scheme.state_dict()
        scheme.dump_replay_buffer(str(directory / "buffer"))
    return state


def run(args: argparse.Namespace) -> dict[str, Any]:
    preset = get_preset("sac-pendulum").override(
        {
            "seed": args.seed,
            "buffer_location": "ray",
            "max_restarts": 1000,
            "batch_timeout_s": 120.0,
            "checkpoint_replay_buffer": True,
        }  # fmt: skip
    )
    directory = Path(tempfile.mkdtemp(prefix="soak_offpolicy_"))
    faults = Faults(args.kill_every_s, args.buffer_kill_at_s)
    eval_env = preset.factories()["eval_env_factory"]()
    curve: list[dict[str, Any]] = []
    returns: list[tuple[float, float, float]] = []  # (t_s, mean training return, episodes)
    unbalanced = mismatched = resumes = rolled_back = 0
    restarts = lost = 0
    started = time.monotonic()
    scheme = _build(preset)
    scheme.set_total_frames(args.total_frames)
    scheme.step()  # torchrl cannot dump a storage that holds nothing yet
    state, last_eval = _checkpoint(scheme, directory), 0
    faults.scheme = scheme
    faults.start()
    try:
        while scheme.frames_left != 0 and time.monotonic() - started < args.minutes * 60:
            try:
                metrics = scheme.step()
            except (ReplayBufferDied, WorkerError) as err:
                if "replay buffer's actor died" not in str(err):
                    raise
                json_line({"resume": str(err).splitlines()[0][:160]})
                counts = scheme.collector.stats(timeout=10)
                restarts, lost = restarts + counts["restarts"], lost + counts["frames_lost"]
                rolled_back += scheme.frames - state["frames"]
                faults.scheme = None
                scheme.shutdown()
                scheme = _build(preset)
                scheme.load_state_dict(state)
                scheme.load_replay_buffer(str(directory / "buffer"))
                scheme.set_total_frames(args.total_frames)
                faults.scheme, resumes = scheme, resumes + 1
                continue
            if "train/episode_return" in metrics:  # the episodes the workers wrote
                returns.append((faults.now(), metrics["train/episode_return"],
                                metrics["train/episodes"]))  # fmt: skip
            stats = scheme.collector.counters()
            ledger = stats["ledger"]
            if not ledger_adds_up(ledger):
                unbalanced += 1
            written = scheme.collector.collected_frames
            if written != scheme.loop.frames_collected + scheme.loop.frames_pending:
                mismatched += 1
            if scheme.frames - state["frames"] >= args.checkpoint_every_frames:
                state = _checkpoint(scheme, directory)
            if scheme.frames - last_eval >= args.eval_every_frames:
                last_eval = scheme.frames
                result = evaluate(eval_env, scheme.policy, episodes=5)
                point = {"t_s": round(faults.now(), 1), "frames": scheme.frames,
                         "eval_return": round(result.mean_return, 1)}  # fmt: skip
                curve.append(point)
                json_line(point)
    finally:
        faults.stop.set()
        faults.join(timeout=10)
        stats = scheme.collector.stats(timeout=30)
        frames = scheme.frames
        scheme.shutdown()
        eval_env.close()
    return {
        "minutes": round((time.monotonic() - started) / 60, 1),
        "frames": frames,
        "budget": args.total_frames,
        "budget_reached": frames == args.total_frames,
        "events": faults.events,
        "restarts": restarts + stats["restarts"],
        "frames_lost": lost + stats["frames_lost"],
        "resumes": resumes,
        "frames_rolled_back": rolled_back,
        "ledger": stats["ledger"],
        "steps_unbalanced": unbalanced,
        "steps_written_mismatch": mismatched,
        "curve": curve,
        "recovery": recovery(faults.events, returns, curve, window_s=args.window_s),
    }


def recovery(
    events: list[dict[str, Any]],
    returns: list[tuple[float, float, float]],
    curve: list[dict[str, Any]],
    *,
    window_s: float,
) -> list[dict[str, Any]]:
    """Per fault: the training return in the ``window_s`` before and after it, and the evals around it.

    The training return is the mean over the episodes the workers wrote in the
    window (each step's ``train/episode_return``, weighted by its episodes).
    """

    def mean(low: float, high: float) -> float | None:
        inside = [(r, n) for t, r, n in returns if low <= t < high]
        episodes = sum(n for _, n in inside)
        return round(sum(r * n for r, n in inside) / episodes, 1) if episodes else None

    out = []
    for event in events:
        if event["fault"] == "skipped":
            continue
        t = event["t_s"]
        before = [p["eval_return"] for p in curve if p["t_s"] < t]
        after = [p["eval_return"] for p in curve if p["t_s"] >= t]
        out.append({
            "t_s": t, "fault": event["fault"],
            "train_before": mean(t - window_s, t), "train_after": mean(t, t + window_s),
            "eval_before": before[-1] if before else None, "eval_after": after[0] if after else None,
        })  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--total-frames", type=int, default=60_000)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--buffer-kill-at-s", type=float, default=150.0)
    parser.add_argument("--checkpoint-every-frames", type=int, default=5_000)
    parser.add_argument("--eval-every-frames", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--window-s", type=float, default=30.0,
        help="the training return is averaged this long before and after each fault",
    )  # fmt: skip
    args = parser.parse_args()
    json_line({"machine": machine_info()})
    r = run(args)
    json_line(r)
    kinds = [e["fault"] for e in r["events"]]
    ok = r["steps_unbalanced"] == 0 and r["steps_written_mismatch"] == 0
    curve = ", ".join(f"{p['frames'] // 1000}k: {p['eval_return']:.0f}" for p in r["curve"])
    print("\n| minutes | frames / budget | collector kills | buffer kills | restarts | resumes "
          "(frames rolled back) | lost | unaccounted | ledger | curve (frames: return) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {r['minutes']:g} | {r['frames']:,} / {r['budget']:,} | "
        f"{kinds.count('collector killed')} | {kinds.count('buffer actor killed')} | "
        f"{r['restarts']} | {r['resumes']} ({r['frames_rolled_back']:,}) | {r['frames_lost']:,} | "
        f"{r['ledger']['unaccounted']} | {'balanced' if ok else 'UNBALANCED'} | {curve} |"
    )
    print(f"\n| t (s) | fault | training return {args.window_s:g} s before | after | "
          "eval before | eval after |\n|---|---|---|---|---|---|")  # fmt: skip
    for f in r["recovery"]:
        print(f"| {f['t_s']:g} | {f['fault']} | {f['train_before']} | {f['train_after']} | "
              f"{f['eval_before']} | {f['eval_after']} |")  # fmt: skip


if __name__ == "__main__":
    main()
