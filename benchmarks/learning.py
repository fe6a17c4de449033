"""Learning curves: tdscheme's presets beside Stable-Baselines3 (RL Zoo) and CleanRL.

Protocol. Per section (a task), every framework trains with its own tuned settings, the same
budget of agent steps and the same seeds, one run at a time on one machine, each in its own
process with a timeout (a failed run is reported, not fatal):

* tdscheme: ``tdscheme train PRESET --seed S --total-frames BUDGET`` (its evaluation
  interval; checkpoints off), curves read from the run's ``metrics.csv``;
* SB3: the RL Zoo's entry, read at run time from the installed ``rl_zoo3`` and made into SB3
  arguments and envs by the zoo's ``ExperimentManager`` (``learning_peers.py``);
* CleanRL: ``cleanrl/ppo_atari_envpool.py`` from the checkout given by ``--cleanrl-dir``
  (skipped without one), adapted at run time by textual replacements (listed on the page).

One agent step is one action of one env: on Atari, 4 emulator frames in every framework
(EnvPool's ``Pong-v5`` for tdscheme and CleanRL, SB3's ``AtariWrapper`` on
``PongNoFrameskip-v4``). tdscheme and SB3 evaluate as tdscheme's Trainer does: the greedy
policy, the preset's ``eval_episodes`` every ``eval_every_frames`` agent steps and at the
end, on the env's own rewards (Pong: the unclipped score); CleanRL does not evaluate.
Training episode returns are each framework's own (whole games on Atari). Wall seconds
run from before a run builds its envs and workers (tdscheme: the Trainer's clock, Ray's
start included), imports excluded, evaluations included; every run gets the preset's torch
threads (``num_threads``: 1, ppo-pong 2). "To target" is the first point at or above it
(CartPole 475, Pendulum -200, HalfCheetah the SB3 runs' median final return, Pong +18);
CartPole and Pendulum runs stop there (later columns keep that value).

Commands, from the repository root (``pip install -c constraints.txt -e ".[peers,plot]"``,
and the ``mujoco`` extra for HalfCheetah, ``envpool,atari`` for Pong)::

    .venv/bin/python benchmarks/learning.py --sections cartpole,pendulum --skip-existing
    .venv/bin/python benchmarks/learning.py --sections halfcheetah --skip-existing
    .venv/bin/python benchmarks/learning.py --sections halfcheetah-learners --peers tdscheme
    .venv/bin/python benchmarks/learning.py --sections pong,pong-async --cleanrl-dir ../cleanrl \\
        --skip-existing --work-dir ../learning-runs  # hours: stop it any time, rerun to go on
    .venv/bin/python benchmarks/learning.py --redraw
    .venv/bin/python benchmarks/learning.py --sections cartpole --seeds 1 --budget-scale 0.2 \\
        --out /tmp/learning/learning.md  # a smoke run, kept apart

Output: one JSON line per run (with the machine), the tables, and ``--out``
(``benchmarks/results/learning.md``) with ``learning_<section>.png`` beside it, built from
every run kept in ``<out less .md>/<task>/`` (``--redraw``: only that).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import itertools
import json
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import json_line, tdscheme_executable
from learning_peers import (
    CLEANRL_NAME,
    RunRecord,
    RunSlot,
    Sb3Spec,
    cleanrl_run,
    peer_versions,
    run_process,
    sb3_name,
    sb3_run,
)

FRAMEWORKS = ("tdscheme", "sb3", "cleanrl")
FRACTIONS = (0.25, 0.5, 0.75)  # of the budget; 100 %: the final value (SB3 may pass the budget)
TRAIN_WINDOW = 10  # training episodes averaged per point of the training curve
RESUME_EVERY_STEPS = 100_000  # tdscheme's checkpoints with --work-dir


# -- the sections ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sb3Peer:
    """The SB3 run of a section: the zoo's ``<algo>.yml`` entry ``zoo_key`` on ``env_id``."""

    algo: str
    env_id: str
    zoo_key: str


@dataclasses.dataclass(frozen=True)
class Section:
    """One task: tdscheme's presets, the peers, the budget and what "reached" means.

    Args:
        name: the ``--sections`` name; ``title``: the env, for headings.
        task: the folder of its kept runs (``pong-async`` shares ``pong``'s peer runs).
        presets: tdscheme presets to run; ``seeds``: runs per framework unless ``--seeds``.
        budget_steps: agent steps per run (``--budget-scale`` multiplies it).
        target_return: "reached" at this return (``None``: the SB3 runs' median final one);
            ``stop_at_target``: runs stop at the first evaluation at the target.
        sb3, cleanrl_env_id: the peers (``None``: not in this section).
        eval_every_steps: evaluation interval (``None``: the first preset's).
        peers_from: a section whose peer runs are these (reused when kept).
        timeout_s: one run's limit at the full budget (scaled with it, plus 600 s).
        train_args: more ``tdscheme train`` arguments (e.g. worker shares that fit 2 cores).
        variant: a label for tdscheme's runs with those arguments, after the preset's name
            (``"2 learners"``: ``"tdscheme sac-halfcheetah (2 learners)"``); with
            ``peers_from``, the other section's tdscheme runs are shown beside them.
        notes: how the settings differ, for the page.
    """

    name: str
    task: str
    title: str
    presets: tuple[str, ...]
    budget_steps: int
    seeds: int
    target_return: float | None
    stop_at_target: bool
    sb3: Sb3Peer | None
    cleanrl_env_id: str | None = None
    eval_every_steps: int | None = None
    peers_from: str | None = None
    timeout_s: float = 3600.0
    train_args: tuple[str, ...] = ()
    variant: str = ""
    notes: str = ""

    def framework(self, preset: str) -> str:
        """The name of tdscheme's runs of ``preset`` in this section (records and tables)."""
        return f"tdscheme {preset}" + (f" ({self.variant})" if self.variant else "")


def sections() -> dict[str, Section]:
    """The six sections, by name."""
    pong_peers = {"sb3": Sb3Peer("ppo", "PongNoFrameskip-v4", "atari"), "cleanrl_env_id": "Pong-v5"}
    # fmt: off
    return {s.name: s for s in (
        Section("cartpole", "cartpole", "CartPole-v1", ("ppo-cartpole",), 100_000, seeds=5,
                target_return=475.0, stop_at_target=True, timeout_s=1800.0,
                sb3=Sb3Peer("ppo", "CartPole-v1", "CartPole-v1"), notes=(
            "Each framework's own tuning: tdscheme's ppo-cartpole is 64 envs (2 workers x 32), "
            "2048 frames per update, 10 epochs of 512, lr 3e-3 -> 3e-4 over 50k frames, gamma "
            "0.99, GAE 0.95, clip 0.2; the zoo's entry is 8 envs x 32 steps, 20 epochs of 256, "
            "lr 1e-3 -> 0 and clip 0.2 -> 0 over the 100k, gamma 0.98, GAE 0.8.")),
        Section("pendulum", "pendulum", "Pendulum-v1", ("sac-pendulum",), 20_000, seeds=5,
                target_return=-200.0, stop_at_target=True, timeout_s=2400.0,
                sb3=Sb3Peer("sac", "Pendulum-v1", "Pendulum-v1"), notes=(
            "Each framework's own tuning: tdscheme's sac-pendulum is 8 envs (2 workers x 4), one "
            "gradient step per frame (one per 4 until stop 42: 14,336 agent steps to -200, "
            "0.44x SB3's wall time) on minibatches of 64, lr 3e-3, 64x64 networks, 1000 "
            "random frames first; the zoo's entry (SB3's defaults but lr 1e-3) is 1 env, one "
            "step per frame on 256, 256x256 networks, 100 random steps first.")),
        Section("halfcheetah", "halfcheetah", "HalfCheetah-v5", ("sac-halfcheetah",), 100_000,
                seeds=2, target_return=None, stop_at_target=False, eval_every_steps=10_000,
                timeout_s=14_400.0, sb3=Sb3Peer("sac", "HalfCheetah-v5", "HalfCheetah-v4"),
                train_args=("--collector-resources", '{"num_cpus": 0.25}'), notes=(
            "The same SAC (lr 3e-4, batches of 256, 256x256, 10k random steps, one gradient "
            "step per frame); tdscheme collects with 4 envs (1 worker) in 128-frame batches, "
            "SB3 with 1 env. Until stop 49 tdscheme collected with 16 envs (4 workers x 4) in "
            "1024-frame batches, its data ~3.5 weight pushes (~3,600 updates) behind the "
            "learner (~1 push, 128 updates, now): final evaluations 2,760 and 3,357 "
            "(records in `learning_stop48/`). The zoo's entry is HalfCheetah-v4's "
            "(mujoco defaults), "
            "run on v5. Evaluations every 10k steps (the preset's 50k: 2 in this budget).")),
        Section("halfcheetah-learners", "halfcheetah", "HalfCheetah-v5, 2 learner ranks",
                ("sac-halfcheetah",), 100_000, seeds=1, target_return=None,
                stop_at_target=False, eval_every_steps=10_000, timeout_s=14_400.0,
                sb3=Sb3Peer("sac", "HalfCheetah-v5", "HalfCheetah-v4"),
                peers_from="halfcheetah", variant="2 learners", train_args=(
                    "--collector-resources", '{"num_cpus": 0.25}', "--num-learners", "2",
                    "--buffer-location", "ray", "--learner-resources", '{"num_cpus": 0.5}'),
                notes=(
            "Issue 37: the halfcheetah section's sac-halfcheetah with a group of 2 learner "
            "ranks (gloo), each sampling half of every 256-frame minibatch from the Ray-held "
            "buffer, gradients averaged: the same updates as one learner on the whole "
            "minibatch. Beside it the one-learner runs and SB3's (the same records).")),
        Section("pong", "pong", "Pong (ALE)", ("ppo-pong",), 2_000_000, seeds=1,
                target_return=18.0, stop_at_target=False, timeout_s=12 * 3600.0, **pong_peers,
                notes=(
            "The same PPO in all three (8 envs x 128 steps, 4 epochs of 256, lr 2.5e-4 to 0 "
            "over the budget, entropy 0.01, value 0.5, gradient clip 0.5, GAE 0.99/0.95, Nature "
            "CNN, Adam eps 1e-5, clip 0.1) but: SB3 (zoo `atari`) also decays the clip range to "
            "0; CleanRL clips the value loss, SB3 and tdscheme (torchrl's `ClipPPOLoss` without "
            "`clip_value`) do not. SB3's `AtariWrapper` and CleanRL's EnvPool end an episode "
            "per life and press FIRE at reset, tdscheme's EnvPool env does neither (no lives "
            "in Pong). No sticky actions in any.")),
        Section("pong-async", "pong", "Pong (ALE), asynchronous", ("appo-pong", "impala-pong"),
                2_000_000, seeds=1, target_return=18.0, stop_at_target=False, peers_from="pong",
                timeout_s=12 * 3600.0, **pong_peers, notes=(
            "APPO and IMPALA (V-trace on first-ready batches, 2 workers x 16 envs) beside the "
            "synchronous PPO peers of the pong section (the same runs).")),
    )}
    # fmt: on


# -- tdscheme's runs ------------------------------------------------------------------------


def record_path(data_dir: Path, task: str, framework: str, seed: int) -> Path:
    """``<data_dir>/<task>/<framework as a file name>_seed<seed>.json``."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in framework.lower())
    return Path(data_dir) / task / f"{stem}_seed{seed}.json"


def eval_protocol(preset_name: str, every_steps: int | None = None) -> dict[str, Any]:
    """A preset's ``every_steps`` (unless given), ``episodes``, ``num_envs``, ``num_threads``."""
    from tdscheme.presets import get_preset

    preset = get_preset(preset_name)
    episodes = preset.trainer.eval_episodes
    return {
        "every_steps": every_steps or preset.trainer.eval_every_frames,
        "episodes": episodes,
        "num_envs": min(preset.algo.eval_num_envs, episodes),
        "num_threads": preset.trainer.num_threads,
    }


def tdscheme_curves(metrics: dict[str, list[tuple[int, float]]]) -> tuple[list, list]:
    """Eval and train rows from a run's metrics (``tdscheme.engine.run_log.read_metrics``).

    An evaluation's wall time is the Trainer's clock at its batch plus the evaluation's own
    seconds (or ``eval/target_elapsed_s`` where logged); a training row's is the clock at
    its batch.
    """
    clock = sorted(metrics.get("time/elapsed_s", []))
    steps = [s for s, _ in clock]

    def wall(step: int) -> float | None:
        i = bisect.bisect_right(steps, step)
        return round(clock[i - 1][1], 3) if i else None

    eval_s = dict(metrics.get("time/eval_s", []))
    target_s = dict(metrics.get("eval/target_elapsed_s", []))
    episodes = dict(metrics.get("train/episodes", []))
    evals = []
    for step, ret in metrics.get("eval/return", []):
        at = target_s.get(step)
        if at is None and wall(step) is not None:
            at = wall(step) + eval_s.get(step, 0.0)
        evals.append([step, None if at is None else round(at, 3), ret])
    rows = metrics.get("train/episode_return", [])
    train = [[s, wall(s), r, episodes.get(s, 1.0)] for s, r in rows]
    return evals, train


def tdscheme_run(slot: RunSlot, section: Section, preset: str) -> RunRecord:
    """One ``tdscheme train`` run in its own process; its curves from ``metrics.csv``."""
    from tdscheme.engine.run_log import read_metrics

    target = section.target_return if section.stop_at_target else None
    every = eval_protocol(preset, section.eval_every_steps)["every_steps"]
    run_dir = slot.work / "run"
    exe = tdscheme_executable()
    checkpoints = sorted((run_dir / "checkpoints").glob("*.pt")) if slot.resumable else []
    if checkpoints:  # a run stopped earlier (Ctrl-C, a timeout, the machine's session): go on
        print(f"resuming {run_dir} from {checkpoints[-1].name}", file=sys.stderr, flush=True)
        command = [exe, "train", "--resume", str(run_dir), "--total-frames",
                   str(slot.budget_steps), "--progress", "false"]  # fmt: skip
    else:
        keep = ["--checkpoint-every-frames", str(RESUME_EVERY_STEPS)] if slot.resumable else [
            "--checkpoint-every-frames", "0", "--no-checkpoint-at-end"]  # fmt: skip
        command = [
            exe, "train", preset, "--seed", str(slot.seed), "--run-dir", str(run_dir),
            "--total-frames", str(slot.budget_steps), "--eval-every-frames", str(every),
            "--target-return", str(target).lower(), *keep, "--progress", "false",
            *section.train_args,
        ]  # fmt: skip
    done = run_process(command, slot)
    metrics = read_metrics(run_dir) if (run_dir / "metrics.csv").exists() else {}
    config = run_dir / "config.json"
    settings = {
        "preset": preset,
        "config": json.loads(config.read_text()) if config.exists() else {},
    }
    return slot.record(section.framework(preset), done, command, settings,
                       *tdscheme_curves(metrics))  # fmt: skip


# -- statistics ------------------------------------------------------------------------------


def smooth_train(rows: Sequence[Sequence[Any]], window: int = TRAIN_WINDOW) -> list[list[Any]]:
    """Training rows as ``[steps, wall_s, mean of the last window episodes]``.

    A row holding the mean of ``n`` episodes (tdscheme's batches) counts as ``n`` of them.

    Example:
        >>> smooth_train([[10, 1.0, 0.0, 1], [20, 2.0, 10.0, 3]], window=2)
        [[10, 1.0, 0.0], [20, 2.0, 10.0]]
    """
    out = []
    for i, row in enumerate(rows):
        total, weight = 0.0, 0.0
        for _, _, ret, n in reversed(rows[: i + 1]):
            take = min(n, window - weight)
            total, weight = total + take * ret, weight + take
            if weight >= window:
                break
        out.append([row[0], row[1], total / weight])
    return out


def value_at(curve: Sequence[Sequence[Any]], steps: float, *, held: bool = True) -> float | None:
    """The last value at or before ``steps`` agent steps (``None`` before the first point).

    ``held=False`` (a run stopped before its budget): ``None`` past the curve's last point
    too, rather than the last value held to the end as for a run that ended at its target.

    Example:
        >>> value_at([[10, 1.0, 5.0], [20, 2.0, 7.0]], 50), value_at([[10, 1.0, 5.0]], 50, held=False)
        (7.0, None)
    """
    if not held and (not curve or steps > curve[-1][0]):
        return None
    values = [row[2] for row in curve if row[0] <= steps]
    return values[-1] if values else None


def first_reaching(curve: Sequence[Sequence[Any]], target: float) -> tuple[int, float | None] | None:  # fmt: skip
    """``(steps, wall_s)`` of the first point at or above ``target``; ``None`` if none."""
    return next(((row[0], row[1]) for row in curve if row[2] >= target), None)


def curve_of(record: RunRecord, statistic: str) -> list[list[Any]]:
    """``"eval"``: the evaluations; ``"train"``: :func:`smooth_train` of the episodes."""
    return record.eval if statistic == "eval" else smooth_train(record.train)


def median_range(values: Sequence[float | None], digits: int = 1) -> str:
    """``"median [min-max]"`` over the values that exist (``"-"`` if none).

    Example:
        >>> median_range([3.0, 1.0, None, 2.0])
        '2.0 [1.0–3.0]'
    """
    xs = [v for v in values if v is not None]
    if not xs:
        return "–"
    med = f"{statistics.median(xs):,.{digits}f}"
    return med if len(xs) == 1 else f"{med} [{min(xs):,.{digits}f}–{max(xs):,.{digits}f}]"


def resolve_target(section: Section, by_framework: dict[str, list[RunRecord]], statistic: str) -> float | None:  # fmt: skip
    """The section's target, or the SB3 runs' median final value (HalfCheetah)."""
    if section.target_return is not None:
        return section.target_return
    finals = [curve_of(r, statistic)[-1][2] for name, runs in by_framework.items()
              if name.startswith("SB3") for r in runs if curve_of(r, statistic)]  # fmt: skip
    return statistics.median(finals) if finals else None


def section_table(section: Section, by_framework: dict[str, list[RunRecord]], statistic: str) -> list[list[str]]:  # fmt: skip
    """One statistic's table: final, at budget fractions, to target, wall ratio vs each peer."""
    target = resolve_target(section, by_framework, statistic)
    tname = "–" if target is None else f"{target:g}"
    header = ["framework", "runs", "final (@100%)", *(f"@{f:.0%}" for f in FRACTIONS),
              f"agent steps to {tname}", f"wall s to {tname}", "wall to target, tdscheme / peer"]  # fmt: skip
    rows, walls = [header], {}
    for name, runs in by_framework.items():
        # (curve, whole): a stopped run (failed, timed out) has no final value and no value
        # past its last point; a whole one holds its last value (e.g. stopped at its target)
        kept = [(c, r.outcome == "ok") for r in runs if (c := curve_of(r, statistic))]
        curves = [c for c, _ in kept]
        bad = [r.outcome for r in runs if r.outcome != "ok"]
        ok = f"{len(runs) - len(bad)}/{len(runs)} ok" + (f" ({', '.join(bad)})" if bad else "")
        if not curves:  # CleanRL does not evaluate; a failed run may have no point
            rows.append([name, ok, "no points", *["–"] * 6])
            continue
        budget = runs[0].budget_steps
        ends = [f"{c[-1][0]:,}" for c, whole in kept if not whole]
        ok += f", stopped at {', '.join(ends)} steps" if ends else ""
        hits = [first_reaching(c, target) for c in curves] if target is not None else []
        reached = [h for h in hits if h is not None]
        walls[name] = [h[1] for h in reached if h[1] is not None]
        rows.append([
            name, ok, median_range([c[-1][2] for c, whole in kept if whole]),
            *(median_range([value_at(c, f * budget, held=whole) for c, whole in kept])
              for f in FRACTIONS),
            f"{median_range([h[0] for h in reached], 0)} ({len(reached)}/{len(curves)})",
            median_range([h[1] for h in reached]), "",
        ])  # fmt: skip
    for row in rows[1:]:
        if row[0].startswith("tdscheme") and walls.get(row[0]):
            ratios = [f"{statistics.median(walls[row[0]]) / statistics.median(w):.2f}x {n.split()[0]}"
                      for n, w in walls.items() if not n.startswith("tdscheme") and w]  # fmt: skip
            row[-1] = "; ".join(ratios) or "–"
        row[-1] = row[-1] or "–"
    return rows


# -- figures and the page --------------------------------------------------------------------


def plot_section(
    section: Section, by_framework: dict[str, list[RunRecord]], path: Path, target: float | None
) -> Path:
    """Return vs agent steps and vs wall seconds: evaluations above, training episodes below.

    Each run is a thin line; with several seeds, their median is the thick one (a run
    that ended, e.g. at its target, holds its last value, as in the tables).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 7.5), layout="constrained")
    FigureCanvasAgg(figure)  # the Agg canvas directly, as `tdscheme plot`: pyplot left alone
    axes = figure.subplots(2, 2)
    colors = itertools.cycle(["tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:red"])
    for (name, runs), color in zip(by_framework.items(), colors, strict=False):
        for row, statistic in enumerate(("eval", "train")):
            curves = [curve_of(r, statistic) for r in runs]
            for x in (0, 1):  # a point's agent steps, then its wall seconds
                _plot_curves(axes[row][x], curves, x, color=color, label=name, dots=row == 0)
    for row, what in enumerate(("evaluation return", f"training return (last {TRAIN_WINDOW})")):
        for x, xlabel in enumerate(("agent steps", "wall seconds")):
            axes[row][x].set(xlabel=xlabel, ylabel=what)
            axes[row][x].grid(alpha=0.3)
            axes[row][x].set_xlim(left=0)
            if target is not None:
                axes[row][x].axhline(target, color="grey", linestyle="--", linewidth=1)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"{section.title} ({section.name})")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=90)
    return path


def _plot_curves(ax: Any, curves: list[list[Any]], x: int, *, color: str, label: str, dots: bool):
    import numpy as np

    points = ([(p[x], p[2]) for p in c if p[x] is not None] for c in curves)
    lines = [(np.array([p[0] for p in ln]), np.array([p[1] for p in ln])) for ln in points if ln]
    one = len(lines) == 1
    for xs, ys in lines:
        ax.plot(
            xs, ys, color=color, alpha=1.0 if one else 0.35, linewidth=1.5 if one else 1,
            marker="o" if dots else None, markersize=3, label=label if one else None,
        )  # fmt: skip
    if len(lines) > 1:
        grid = np.linspace(0, max(xs.max() for xs, _ in lines), 200)
        at_grid = [np.interp(grid, xs, ys, left=np.nan, right=ys[-1]) for xs, ys in lines]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # where no run has a point
            median = np.nanmedian(at_grid, axis=0)
        ax.plot(grid, median, color=color, linewidth=2, label=f"{label} (median of {len(lines)})")


def section_records(section: Section, data_dir: Path) -> dict[str, list[RunRecord]]:
    """The kept runs of a section, by framework (tdscheme's presets first), seeds in order."""
    names = [section.framework(p) for p in section.presets]
    if section.peers_from:  # the other section's own runs beside these (1 learner, ppo-pong)
        base = sections()[section.peers_from]
        names += [n for n in (base.framework(p) for p in base.presets) if n not in names]
    names += [sb3_name(section.sb3.algo)] if section.sb3 else []
    names += [CLEANRL_NAME] if section.cleanrl_env_id else []
    records = [RunRecord.load(p) for p in sorted((data_dir / section.task).glob("*.json"))]
    by_framework = {n: sorted((r for r in records if r.framework == n), key=lambda r: r.seed)
                    for n in names}  # fmt: skip
    return {n: runs for n, runs in by_framework.items() if runs}


def _what_ran(name: str, run: RunRecord) -> str:
    s = run.settings
    if name.startswith("tdscheme"):
        trainer = s.get("config", {}).get("trainer", {})
        every = f"{trainer.get('eval_episodes')} episodes every {trainer.get('eval_every_frames')}"
        return f"`{shlex.join(run.command)}` (seed and budget per run; eval {every})"
    if name.startswith("SB3"):
        versions = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
        return (f"the zoo's `{s['zoo_file']}` entry `{s['zoo_key']}` on `{s['env_id']}` "
                f"({versions}; eval {s['eval']['episodes']} episodes every "
                f"{s['eval']['every_steps']}; `n_timesteps`: the budget): `{json.dumps(s['entry'])}`")  # fmt: skip
    return (f"`cleanrl/ppo_atari_envpool.py` at {s['source'].get('commit', '?')} (sha256 "
            f"{s['source']['sha256'][:12]}), Args `{json.dumps(s['args'])}`; no evaluation")  # fmt: skip


def settings_lines(section: Section, by_framework: dict[str, list[RunRecord]]) -> list[str]:
    """What ran in a section: budget, settings, commands, machines."""
    runs = [r for rs in by_framework.values() for r in rs]
    budgets = ", ".join(f"{b:,}" for b in sorted({r.budget_steps for r in runs}))
    stop = "; runs stop at the target" if section.stop_at_target else ""
    lines = [f"Budget {budgets} agent steps{stop}. {section.notes}", ""]
    lines += [f"- {name}: {_what_ran(name, rs[0])}" for name, rs in by_framework.items()]
    machines = sorted({json.dumps({k: v for k, v in r.machine.items() if k != "load_1m"})
                       for r in runs})  # fmt: skip
    lines += ["", "Machine: " + " | ".join(
        ", ".join(f"{k} {v}" for k, v in json.loads(m).items()) for m in machines)]  # fmt: skip
    lines += ["", "Commands: " + ", ".join(f"`{a}`" for a in sorted({r.argv for r in runs}) if a)]
    return lines


def replacement_lines(records: list[RunRecord]) -> list[str]:
    """The replacements the newest CleanRL run applied, as a table."""
    cleanrl = [r for r in records if r.framework == CLEANRL_NAME]
    if not cleanrl:
        return []
    lines = ["## CleanRL's script, adapted at run time", "",
             "In a temporary copy of the checkout's script (nothing of it is kept here):", "",
             "| status | count | replaced | why |", "|---|---|---|---|"]  # fmt: skip
    for r in cleanrl[-1].settings["replacements"]:
        old = r["old"].splitlines()[0].replace("|", "\\|")
        lines.append(f"| {r['status']} | {r['count']} | `{old}` | {r['reason']} |")
    return lines


def markdown_table(table: list[list[str]]) -> list[str]:
    """A table (header row first) as markdown lines."""
    rows = ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    return rows + ["| " + " | ".join(r) + " |" for r in table[1:]]


def build_page(data_dir: Path, out: Path) -> dict[str, list[list[str]]]:
    """Writes ``out`` and one PNG per section from every kept run; returns the tables."""
    intro = "\n\n".join((__doc__ or "").split("\n\n")[1:4])
    final = ('"Final (@100%)" in the tables is the return where a run stopped: for runs that stop '
             "at their target (CartPole, Pendulum) the value at the target, not at the end of the "
             "budget; otherwise at the end of the budget, or the last evaluation before a run was "
             "stopped.")
    lines = ["# Learning curves: tdscheme and Stable-Baselines3 (RL Zoo)", "", intro, "", final, ""]
    tables, everything = {}, []
    for section in sections().values():
        by_framework = section_records(section, data_dir)
        if CLEANRL_NAME in by_framework:  # the title names the peers the page holds
            lines[0] = "# Learning curves: tdscheme, Stable-Baselines3 (RL Zoo), CleanRL"
        own = any(section.framework(p) in by_framework for p in section.presets)
        if not by_framework or (section.peers_from and not own):  # only another section's peers
            continue
        lines += [f"## {section.name}: {section.title}", "", *settings_lines(section, by_framework)]
        for statistic, title in (("eval", "evaluation return"),
                                 ("train", f"training return, mean of the last {TRAIN_WINDOW} episodes")):  # fmt: skip
            table = section_table(section, by_framework, statistic)
            tables[f"{section.name}: {title}"] = table
            lines += ["", f"### {title}", "", *markdown_table(table)]
        png = out.with_name(f"{out.stem}_{section.name}.png")
        plot_section(section, by_framework, png, resolve_target(section, by_framework, "eval"))
        lines += ["", f"![{section.name}]({png.name})", ""]
        everything += [r for runs in by_framework.values() for r in runs]
    lines += replacement_lines(everything)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return tables


# -- the command -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command's options (see the module docstring)."""
    p = argparse.ArgumentParser(description="tdscheme's learning curves beside SB3's and CleanRL's")
    p.add_argument("--sections", default="cartpole,pendulum", help=f"of {','.join(sections())}")
    p.add_argument("--seeds", type=int, default=None, help="runs per framework (seeds 0..N-1)")
    p.add_argument("--budget-scale", type=float, default=1.0, help="x each budget (smoke runs)")
    p.add_argument("--peers", default=",".join(FRAMEWORKS), help="of tdscheme,sb3,cleanrl")
    p.add_argument("--cleanrl-dir", type=Path, default=None,
                   help="a CleanRL checkout (the folder holding cleanrl/ppo_atari_envpool.py)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/learning.md"))
    p.add_argument("--data-dir", type=Path, default=None, help="kept runs (default: OUT less .md)")
    p.add_argument(
        "--skip-existing", action="store_true", help="reuse kept runs of the same budget"
    )
    p.add_argument("--redraw", action="store_true", help="only rebuild the page and the figures")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep each run's folder here (not in a temporary one): tdscheme runs "
                        "checkpoint and a stopped one resumes when the command runs again")  # fmt: skip
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    args.peers = [x for x in args.peers.split(",") if x]
    bad = sorted(set(args.sections) - set(sections())) + sorted(set(args.peers) - set(FRAMEWORKS))
    if bad or args.budget_scale <= 0:
        p.error(f"unknown sections or peers {bad}, or --budget-scale <= 0")
    args.data_dir = args.data_dir or args.out.with_suffix("")
    return args


def planned_runs(section: Section, args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """``(kind, preset or peer, seed)`` for a section, seed by seed."""
    kinds = [("tdscheme", p) for p in section.presets] if "tdscheme" in args.peers else []
    kinds += [("sb3", "sb3")] if section.sb3 and "sb3" in args.peers else []
    kinds += [("cleanrl", "cleanrl")] if section.cleanrl_env_id and "cleanrl" in args.peers else []
    seeds = range(args.seeds if args.seeds is not None else section.seeds)
    return [(kind, what, seed) for seed in seeds for kind, what in kinds]


def run_one(section: Section, kind: str, what: str, seed: int, args: argparse.Namespace) -> RunRecord | None:  # fmt: skip
    """One run, or the kept one it may reuse (``None``: CleanRL without a checkout)."""
    budget = max(1, round(section.budget_steps * args.budget_scale))
    names = {"tdscheme": section.framework(what), "cleanrl": CLEANRL_NAME}
    framework = names.get(kind) or sb3_name(section.sb3.algo)
    kept = record_path(args.data_dir, section.task, framework, seed)
    # pong-async's peers are pong's runs: reused when kept, as --skip-existing reuses any
    if (args.skip_existing or (section.peers_from and kind != "tdscheme")) and kept.exists():
        record = RunRecord.load(kept)
        if record.outcome == "ok" and record.budget_steps == budget:
            print(f"reusing {kept}", file=sys.stderr, flush=True)
            return record
    if kind == "cleanrl" and not (args.cleanrl_dir and (args.cleanrl_dir / "cleanrl").is_dir()):
        print(f"skipping CleanRL in {section.name}: --cleanrl-dir {args.cleanrl_dir} is not a "
              "CleanRL checkout (the folder holding cleanrl/ppo_atari_envpool.py)", file=sys.stderr)  # fmt: skip
        return None
    peer_section = sections()[section.peers_from] if section.peers_from else section
    with tempfile.TemporaryDirectory(prefix="tdscheme-learning-") as tmp:
        work = Path(tmp)
        if args.work_dir is not None:  # kept, so that a stopped tdscheme run resumes
            work = args.work_dir / section.task / f"{framework.replace(' ', '_')}-{seed}-{budget}"
            work.mkdir(parents=True, exist_ok=True)
        slot = RunSlot(section.task, seed, budget, section.timeout_s * args.budget_scale + 600.0,
                       work, resumable=args.work_dir is not None)  # fmt: skip
        if kind == "tdscheme":
            record = tdscheme_run(slot, section, what)
        elif kind == "sb3":
            record = sb3_run(slot, sb3_spec(peer_section, seed, budget))
        else:
            threads = eval_protocol(peer_section.presets[0])["num_threads"]
            record = cleanrl_run(
                slot, peer_section.cleanrl_env_id, args.cleanrl_dir, torch_threads=threads
            )
    record.machine, record.argv = args.machine, args.command
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(dataclasses.asdict(record)))
    return record


def sb3_spec(section: Section, seed: int, budget: int) -> Sb3Spec:
    """The SB3 run of a section: the zoo's entry, evaluated as the section's first preset."""
    peer, protocol = section.sb3, eval_protocol(section.presets[0], section.eval_every_steps)
    return Sb3Spec(
        peer.algo, peer.env_id, peer.zoo_key, seed, budget, protocol["every_steps"],
        protocol["episodes"], protocol["num_envs"], section.target_return,
        section.stop_at_target, curve_path="", torch_threads=protocol["num_threads"],
    )  # fmt: skip


def summary_line(section: Section, record: RunRecord) -> dict[str, Any]:
    """The run's JSON line: outcome, steps, seconds, final returns and time to target."""
    evals, train = record.eval, smooth_train(record.train)
    target = section.target_return
    hit = first_reaching(evals, target) if target is not None else None
    return {
        "section": section.name, "framework": record.framework, "seed": record.seed,
        "outcome": record.outcome, "failure": record.failure, "budget_steps": record.budget_steps,
        "agent_steps": max([r[0] for r in evals + train], default=0), "exit_s": record.exit_s,
        "final_eval_return": evals[-1][2] if evals else None,
        "final_train_return": round(train[-1][2], 2) if train else None,
        "eval_steps_to_target": hit[0] if hit else None,
        "eval_wall_s_to_target": hit[1] if hit else None, **record.machine,
    }  # fmt: skip


def main(argv: list[str]) -> int:
    """Runs the sections' runs one at a time, then rebuilds the page from every kept run."""
    from report import machine_info, print_tables  # report imports Ray and torchrl

    args = parse_args(argv)
    started = time.perf_counter()
    args.command = shlex.join([".venv/bin/python", "benchmarks/learning.py", *argv])
    args.machine = {} if args.redraw else {**machine_info(), **peer_versions()}
    for name in [] if args.redraw else args.sections:
        section = sections()[name]
        for kind, what, seed in planned_runs(section, args):
            record = run_one(section, kind, what, seed, args)
            if record is not None:
                json_line(summary_line(section, record))
    tables = build_page(args.data_dir, args.out)
    print_tables(tables, width=40)
    print(f"\nwrote {args.out} in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
