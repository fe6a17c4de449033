"""Non-finite gradients from gradient workers: left out, counted, named, stopped after K in a row.

A gradient worker's Learner checks its batch, loss and gradient norm
(``Learner.compute_gradients``); a gradient holding NaN / inf comes back as a
:class:`~tdscheme.gradient_workers.worker.GradientResult` with ``nonfinite`` set
and no gradient. Every coordinator leaves it out (synchronous: the finite ones
are averaged; asynchronous: it is not applied; decentralized: it took part with
weight 0) and books it as dropped, and :class:`NonFiniteGradients` counts it:
one warning line names the worker and what was not finite, and the
``max_nonfinite_updates``-th (the driver Learner's ``LearnerConfig``) non-finite
gradient in a row from one worker, or the ``max_nonfinite_updates``-th step in a
row that made no update because of them, stops the run with a
:class:`~tdscheme.errors.NonFiniteUpdateError` naming the workers.

Example:
    >>> from tdscheme.gradient_workers.worker import GradientResult
    >>> result = lambda worker_id, nonfinite=None: GradientResult(
    ...     worker_id, 0, 64, None, {}, [], {}, nonfinite=nonfinite)
    >>> tracker = NonFiniteGradients(max_in_a_row=2)
    >>> tracker.record(result(0)), tracker.record(result(1, "non-finite values in 'reward'"))
    (True, False)
    >>> tracker.check()
    >>> tracker.record(result(1, "non-finite values in 'reward'"))
    False
    >>> tracker.check()
    Traceback (most recent call last):
    ...
    tdscheme.errors.NonFiniteUpdateError: gradient worker 1 sent max_nonfinite_updates=2 ...
"""

from __future__ import annotations

import logging

from tdscheme.errors import NonFiniteUpdateError
from tdscheme.finite import nonfinite_advice
from tdscheme.gradient_workers.worker import GradientResult

__all__ = ["NonFiniteGradients"]

logger = logging.getLogger(__name__)

_ADVICE = nonfinite_advice(
    learner=" of the driver's Learner", frames_setting=" (in the workers' learner_factory)"
)


class NonFiniteGradients:
    """Counts non-finite gradients per worker and steps they left without an update.

    Args:
        max_in_a_row: the limit (``LearnerConfig.max_nonfinite_updates``).
    """

    def __init__(self, *, max_in_a_row: int) -> None:
        self.max_in_a_row = max_in_a_row
        self.steps_in_a_row = 0
        self._in_a_row: dict[int, int] = {}
        self._last: dict[int, str] = {}

    def record(self, result: GradientResult) -> bool:
        """Counts one received gradient; returns whether it is finite (usable).

        A non-finite one is logged (one warning line naming the worker and the
        problem); a finite one ends its worker's run of non-finite ones.
        """
        worker_id = result.worker_id
        if result.nonfinite is None:
            self._in_a_row[worker_id] = 0
            return True
        count = self._in_a_row.get(worker_id, 0) + 1
        self._in_a_row[worker_id] = count
        self._last[worker_id] = result.nonfinite
        logger.warning(
            "gradient worker %d sent a non-finite gradient, left out (%d in a row, "
            "max_nonfinite_updates=%d): %s",
            worker_id, count, self.max_in_a_row, result.nonfinite,
        )  # fmt: skip
        return False

    def split(
        self, results: list[GradientResult]
    ) -> tuple[list[GradientResult], list[GradientResult]]:
        """Records every result; returns ``(finite, nonfinite)``, each in the given order."""
        finite = [r for r in results if self.record(r)]
        return finite, [r for r in results if r.nonfinite is not None]

    def step_done(self, *, skipped: bool) -> None:
        """Ends a step: ``skipped`` when it made no update and received non-finite gradients."""
        self.steps_in_a_row = self.steps_in_a_row + 1 if skipped else 0

    def check(self) -> None:
        """Raises once a worker, or the steps, reached ``max_in_a_row`` in a row.

        Raises:
            NonFiniteUpdateError: naming the workers and the last problem of each.
        """
        limit = self.max_in_a_row
        workers = sorted(w for w, count in self._in_a_row.items() if count >= limit)
        if workers:
            who = f"worker {workers[0]}" if len(workers) == 1 else f"workers {workers}"
            raise NonFiniteUpdateError(
                f"gradient {who} sent max_nonfinite_updates={limit} non-finite gradients in a "
                f"row; {self._last_problems(workers)}. {_ADVICE}"
            )
        if self.steps_in_a_row >= limit:
            raise NonFiniteUpdateError(
                f"{self.steps_in_a_row} steps in a row made no update for non-finite gradients "
                f"(max_nonfinite_updates={limit}); {self._last_problems(sorted(self._last))}. "
                f"{_ADVICE}"
            )

    def _last_problems(self, workers: list[int]) -> str:
        return "; ".join(f"worker {w}'s last: {self._last[w]}" for w in workers)
