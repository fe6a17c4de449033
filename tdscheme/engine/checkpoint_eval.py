"""Test mode: every checkpoint of a run, evaluated after the fact (AllenAct's test mode).

:func:`evaluate_checkpoints` scores a run's checkpoints with the same env seed each,
so two test runs of one checkpoint agree exactly: in this process one after the
other (``eval_workers=0``), or in parallel on eval worker actors
(:class:`~tdscheme.engine.eval_pool.EvalPool`). :func:`write_scores` writes
``eval.csv`` (frames, mean, std, episodes per checkpoint) into the run directory;
``tdscheme eval RUN_DIR`` does both and draws them (``eval_checkpoints.png``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tdscheme.engine.atomic import write_text_atomic
from tdscheme.engine.checkpoint import load_checkpoint
from tdscheme.engine.eval_pool import EvalPool
from tdscheme.engine.eval_worker import EvalReply, EvalWorker, EvalWorkerSpec
from tdscheme.engine.evaluation import EvalResult
from tdscheme.errors import CheckpointError

__all__ = ["SCORES_FILE", "CheckpointScore", "evaluate_checkpoints", "write_scores"]

logger = logging.getLogger(__name__)

#: The file :func:`write_scores` writes into a run directory.
SCORES_FILE = "eval.csv"


@dataclasses.dataclass(frozen=True)
class CheckpointScore:
    """One checkpoint's evaluation: its path, the frames it was trained on, the episodes."""

    path: Path
    frames: int
    result: EvalResult


def evaluate_checkpoints(
    paths: Sequence[str | os.PathLike],
    *,
    preset_from_config: Callable[[Any], Any],
    episodes: int,
    seed: int | None,
    eval_workers: int = 0,
    deterministic: bool = True,
    worker_resources: dict | None = None,
) -> list[CheckpointScore]:
    """Evaluates each checkpoint's policy on the run's eval env, ``episodes`` episodes each.

    Args:
        paths: checkpoint files written by ``tdscheme train`` (a Trainer given
            ``run_config=preset.to_dict()``), all of one run.
        preset_from_config: rebuilds the run's preset from a checkpoint's ``"config"``
            (:func:`tdscheme.presets.preset_from_dict`; presets are a layer above this one).
        episodes: episodes per checkpoint.
        seed: the eval env's seed for every checkpoint (``None``: not reseeded).
        eval_workers: Ray actors evaluating in parallel; 0: one after the other here.
        deterministic: act with the policy's mode (else sample).
        worker_resources: Ray options of each eval worker (default ``{"num_cpus": 1}``).

    Returns:
        The scores of the readable checkpoints, in the order of ``paths`` (a damaged
        one is skipped with a warning naming it).

    Raises:
        CheckpointError: the first checkpoint has no preset config, or none can be read.
        tdscheme.errors.EvalWorkerError: an evaluation failed in a worker.
    """
    if not paths:
        raise ValueError("paths=[] is invalid; accepted: one checkpoint file or more")
    states, errors = [], []
    for p in paths:  # a damaged checkpoint is skipped and named, as resuming does
        try:
            states.append((Path(p), load_checkpoint(p)))
        except CheckpointError as err:
            logger.warning("skipping damaged checkpoint: %s", err)
            errors.append(str(err))
    if not states:
        raise CheckpointError("every checkpoint is damaged: " + "; ".join(errors))
    config = states[0][1].get("config") if isinstance(states[0][1], dict) else None
    if not config:
        raise CheckpointError(
            f"checkpoint file {states[0][0]} has no preset config; accepted: a checkpoint "
            f"written by `tdscheme train` (or a Trainer given run_config=preset.to_dict())"
        )
    preset = preset_from_config(config)
    learner = preset.learner_factory()(**preset.policy_factory()())
    weights = []
    for _, state in states:
        learner.load_state_dict(state["scheme"]["learner"])
        weights.append((int(state["scheme"].get("frames", 0)), learner.policy_weights().clone()))
    spec = EvalWorkerSpec(
        preset.eval_env_factory(), learner.policy, episodes, preset.trainer.eval_max_steps,
        deterministic=deterministic,
    )  # fmt: skip
    if eval_workers:
        replies = _on_workers(spec, weights, seed, eval_workers, worker_resources)
    else:
        worker = EvalWorker(0, spec)
        try:
            replies = [worker.evaluate(w, frames=f, seed=seed) for f, w in weights]
        finally:
            worker.shutdown()
    return [
        CheckpointScore(path, reply.frames, reply.result)
        for (path, _), reply in zip(states, replies, strict=True)
    ]


def _on_workers(
    spec: EvalWorkerSpec,
    weights: list[tuple[int, object]],
    seed: int | None,
    num_workers: int,
    resources: dict | None,
) -> list[EvalReply]:
    """Every checkpoint on ``num_workers`` eval workers, each one as a worker frees up."""
    from tdscheme.runtime import RayLease

    lease = RayLease.acquire()
    pool = EvalPool(
        spec, min(num_workers, len(weights)), remote_options=dict(resources or {"num_cpus": 1})
    )
    try:
        by_index: dict[int, EvalReply] = {}
        todo = list(enumerate(weights))
        while todo or pool.busy:
            while todo and pool.busy < len(pool):
                index, (frames, w) = todo.pop(0)
                # keyed by the checkpoint: two checkpoints may hold the same frame count
                pool.start_evaluation(w, frames=frames, seed=seed, key=index)
            for reply in pool.poll(timeout_s=1.0):
                by_index[reply.key] = reply
        return [by_index[i] for i in range(len(weights))]
    finally:
        pool.shutdown()
        lease.release()


def write_scores(run_dir: str | os.PathLike, scores: Sequence[CheckpointScore]) -> Path:
    """Writes ``run_dir/eval.csv``: ``frames,checkpoint,mean_return,std_return,episodes``.

    Example:
        >>> import tempfile
        >>> score = CheckpointScore(Path("ckpt_1.pt"), 1, EvalResult((1.0, 3.0), (5, 5)))
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     print(write_scores(run_dir, [score]).read_text().strip())
        frames,checkpoint,mean_return,std_return,episodes
        1,ckpt_1.pt,2.0,1.0,2
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["frames", "checkpoint", "mean_return", "std_return", "episodes"])
    for s in scores:
        r = s.result
        writer.writerow([s.frames, s.path.name, r.mean_return, r.std_return, len(r.returns)])
    path = Path(run_dir) / SCORES_FILE
    write_text_atomic(path, out.getvalue())
    return path
