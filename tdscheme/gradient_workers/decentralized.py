"""Decentralized synchronous gradient workers: gloo all-reduce among the workers, no driver update.

The workers start from the driver Learner's full state (weights, optimizer,
version) and form one torch.distributed gloo group, hosted by rank 0 on its own
node (its IP address and a port free there). Each step, every worker collects,
computes its gradient, all-reduces it weighted by frame count and applies the
mean with its own optimizer: identical inputs, identical updates, so all workers
keep bit-identical weights. A worker whose gradient holds NaN / inf takes part
with weight 0, so every worker applies the others' mean; when none is finite,
every worker skips the update (see :mod:`~tdscheme.runtime.allreduce`);
the driver counts and names them (:mod:`~tdscheme.gradient_workers.nonfinite`). The driver only starts the step, gathers metrics and
mirrors rank 0's weights and version into its own Learner (for evaluation and
checkpoints).

A worker that dies is recreated and the group rebuilt: the survivors leave the
broken group, every worker (the new one included) loads the full Learner state
of a survivor (or, if none survived, the driver's mirror: rank 0's weights and
the driver's own optimizer state), all of them form a new group, and the step is
run again. An exception raised inside a worker (not a death) ends the step with
a :class:`~tdscheme.errors.GradientWorkerError`; the group may
then be broken, so shut the coordinator down.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tdscheme.errors import GradientWorkerError
from tdscheme.gradient_workers.coordinator import GradientCoordinator
from tdscheme.gradient_workers.metrics import Timer, step_metrics
from tdscheme.gradient_workers.pool import DIED
from tdscheme.gradient_workers.worker import GradientResult

__all__ = ["DecentralizedCoordinator"]

logger = logging.getLogger(__name__)

#: Seconds to wait, after a worker raised, for a peer's death that would explain it.
_DEATH_GRACE_S = 10.0


class DecentralizedCoordinator(GradientCoordinator):
    """All-reduce among gradient workers; see :mod:`~tdscheme.gradient_workers.decentralized`.

    See :class:`~tdscheme.gradient_workers.coordinator.GradientCoordinator` for the
    arguments. In :meth:`step` metrics, ``apply_ms`` and ``allreduce_ms`` are the
    workers' (frame-weighted) means, ``mirror_ms`` the driver's copy of rank 0's
    weights, ``grads_applied`` the gradients combined (the finite ones) and
    ``updates`` 1 (0 when none was finite).
    """

    mode = "decentralized"

    def _setup(self) -> None:
        self._broken: str | None = None
        self._load_everywhere(self.learner.state_dict())
        self._form_group()

    def _load_everywhere(self, state: dict[str, Any]) -> None:
        ref = self.pool.put(state)
        self.pool.call_all(
            "load_learner_state", [(ref,)] * len(self.pool), timeout_s=self.config.timeout_s
        )

    def _form_group(self) -> None:
        timeout_s = self.config.timeout_s
        addr, port = self.pool.call(0, "rendezvous_address", timeout_s=timeout_s)
        world_size = len(self.pool)
        self.pool.call_all(
            "setup_process_group",
            [(rank, world_size, addr, port, timeout_s) for rank in range(world_size)],
            timeout_s=timeout_s + 30.0,
        )
        logger.info("gradient workers formed a gloo group of %d at %s:%d", world_size, addr, port)

    # -- the step -------------------------------------------------------------------------------

    def _step(self, timers: dict[str, Timer]) -> dict[str, float]:
        if self._broken:
            raise RuntimeError(
                f"the gradient workers' process group is broken ({self._broken}); shut this "
                f"coordinator down and build a new one"
            )
        attempts = len(self.pool) * (self.config.max_restarts + 1) + 1
        for _ in range(attempts):
            results, died = self._run_once(timers)
            if not died:
                return self._finish(results)
            self._recover(died)
        raise RuntimeError(f"the decentralized step failed {attempts} times in a row")

    def _run_once(self, timers: dict[str, Timer]) -> tuple[list[GradientResult], list[int]]:
        with timers["dispatch"]:
            refs = {
                self.pool.submit(rank, "step_allreduce", rank == 0): rank
                for rank in range(len(self.pool))
            }
        results: dict[int, GradientResult] = {}
        died: list[int] = []
        error: tuple[float, GradientWorkerError] | None = None
        deadline = self._deadline() + 30.0  # the group's own timeout surfaces first
        pending = list(refs)
        with timers["wait"]:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.pool.forget(pending)
                    self._broken = f"ranks {sorted(refs[r] for r in pending)} hung"
                    raise TimeoutError(
                        f"gradient workers {sorted(refs[r] for r in pending)} did not finish "
                        f"a decentralized step in timeout_s={self.config.timeout_s} s"
                    )
                ready = self.pool.wait(pending, num_returns=len(pending), timeout_s=min(1.0, left))
                for ref in ready:
                    pending.remove(ref)
                    try:
                        outcome = self.pool.outcome(ref)
                    except GradientWorkerError as err:
                        error = error or (time.monotonic(), err)
                        continue
                    if outcome is DIED:
                        died.append(refs[ref])
                    else:
                        results[refs[ref]] = outcome
                if error and not died and time.monotonic() - error[0] > _DEATH_GRACE_S:
                    self.pool.forget(pending)
                    self._broken = f"gradient worker {error[1].worker_id} raised"
                    raise error[1]
        if error and not died:
            raise error[1]
        return [results[rank] for rank in sorted(results)], sorted(died)

    def _finish(self, results: list[GradientResult]) -> dict[str, float]:
        start = time.perf_counter()
        rank0 = results[0]
        updates = rank0.version - self.learner.version  # 0 when no rank had a finite gradient
        self.learner.load_weights(self._codec.decode(rank0.weights))
        self.learner.version = rank0.version
        finite, nonfinite = self._nonfinite.split(results)
        metrics = step_metrics(finite, nonfinite, updates=updates)
        metrics["mirror_ms"] = 1e3 * (time.perf_counter() - start)
        return metrics

    def _recover(self, died: list[int]) -> None:
        timeout_s = self.config.timeout_s
        survivors = [rank for rank in range(len(self.pool)) if rank not in died]
        if survivors:
            state = self.pool.call(survivors[0], "learner_state", timeout_s=timeout_s)
        else:
            logger.warning(
                "every gradient worker died; restarting them from the driver's mirror (rank "
                "0's weights after the last step, the driver's optimizer state)"
            )
            state = self.learner.state_dict()
        for rank in died:
            self._restart(rank, "died during a decentralized step")
        self.learner.load_state_dict(state)
        self._load_everywhere(state)
        self._form_group()

    # -- state ----------------------------------------------------------------------------------

    def _learner_state(self) -> dict[str, Any]:
        # Rank 0 holds the optimizer state the workers actually use.
        return self.pool.call(0, "learner_state", timeout_s=self.config.timeout_s)

    def _after_load(self) -> None:
        self._load_everywhere(self.learner.state_dict())
