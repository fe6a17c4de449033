"""GradientCoordinator: what every gradient-worker mode shares on the driver side.

A coordinator owns a :class:`~tdscheme.gradient_workers.pool.GradientWorkerPool`
and the driver's Learner, and runs one training step per :meth:`step`. The
subclasses differ in how gradients become updates: averaged and applied once
(:mod:`~tdscheme.gradient_workers.synchronous`), applied as they arrive
(:mod:`~tdscheme.gradient_workers.asynchronous`) or all-reduced among the
workers (:mod:`~tdscheme.gradient_workers.decentralized`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tdscheme.gradient_workers.config import GradientWorkersConfig, GradientWorkerSpec
from tdscheme.gradient_workers.metrics import Timer
from tdscheme.gradient_workers.pool import DIED, GradientWorkerPool
from tdscheme.learner import Learner
from tdscheme.runtime import RayLease
from tdscheme.transport import TensorDictCodec

__all__ = ["GradientCoordinator"]

logger = logging.getLogger(__name__)

#: The arguments that set a gradient worker's Ray resources, as the user may have written them.
_RESOURCE_ARGUMENTS = (
    "num_grad_workers x worker_resources; Scheme: grad_worker_resources; "
    "command: --num-grad-workers x --grad-worker-resources"
)

_TOTALS = (
    "steps",
    "updates",
    "grads_applied",
    "grads_dropped",
    "frames",
    "frames_collected",
    "frames_dropped",
    "episodes",
    "restarts",
)


class GradientCoordinator:
    """Base class of the driver side of gradient workers; use :func:`build_gradient_coordinator`.

    Args:
        config: the gradient workers' settings.
        specs: one :class:`GradientWorkerSpec` per worker.
        learner: the driver's Learner. Centralized modes apply updates to it; in
            decentralized mode it mirrors rank 0's weights after every step. Its
            current weights and version are the workers' starting point.
        ray_init_config: ``ray.init`` arguments if Ray is not running yet (see
            :class:`tdscheme.runtime.RayLease`).

    Raises:
        TypeError: ``learner`` is not a :class:`tdscheme.learner.Learner`.
        ValueError: ``specs`` does not hold one spec per worker.
    """

    #: ``"synchronous"``, ``"asynchronous"`` or ``"decentralized"``.
    mode = ""

    def __init__(
        self,
        config: GradientWorkersConfig,
        specs: Sequence[GradientWorkerSpec],
        learner: Learner,
        *,
        ray_init_config: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(learner, Learner):
            raise TypeError(f"learner must be a tdscheme Learner, got {type(learner).__name__}")
        if len(specs) != config.num_grad_workers:
            raise ValueError(
                f"specs has {len(specs)} entries; num_grad_workers={config.num_grad_workers} "
                f"needs one per worker"
            )
        self.config = config
        self.learner = learner
        self.totals: dict[str, int] = dict.fromkeys(_TOTALS, 0)
        self._codec = TensorDictCodec(config.compress)
        self._weights: tuple[int, Any] | None = None  # (version, object ref)
        #: compute_gradients future -> worker id (the modes that keep requests in flight)
        self._in_flight: dict[Any, int] = {}
        self._closed = False
        self._lease = RayLease.acquire(ray_init_config)
        self.pool = GradientWorkerPool(
            specs,
            remote_options=config.remote_options(),
            seed=config.seed,
            max_restarts=config.max_restarts,
        )
        try:
            workers = range(len(specs))
            options = [config.remote_options() for _ in workers]
            self.pool.check_fits(options, argument=_RESOURCE_ARGUMENTS)
            self.pool.start_all(self._weights_ref(), learner.version)
            self.pool.wait_started(
                workers, timeout_s=config.actor_start_timeout_s, argument=_RESOURCE_ARGUMENTS
            )
            self._setup()
        except BaseException:
            self.shutdown()
            raise

    # -- the step -----------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """Runs one training step.

        Returns:
            Floats: ``frames`` (trained on), ``frames_collected``, ``frames_dropped``,
            ``grads_applied``, ``grads_dropped``, ``updates``, ``version``,
            ``restarts`` (total so far), ``episodes`` and ``episode_return_mean``
            (when an episode ended), the frame-weighted means of the workers' loss
            metrics and timings, ``wait_ms``, ``apply_ms``, ``dispatch_ms``,
            ``step_ms``, and what the mode adds (see its class).

        Raises:
            GradientWorkerError: a worker raised, or died more than ``max_restarts`` times.
            TimeoutError: no worker delivered within ``config.timeout_s``.
            RuntimeError: the coordinator was shut down.
        """
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} was shut down; build a new one")
        start = time.perf_counter()
        timers = {"wait": Timer(), "apply": Timer(), "dispatch": Timer()}
        metrics = self._step(timers)
        for name, timer in timers.items():
            metrics.setdefault(f"{name}_ms", timer.mean_ms())
        metrics["step_ms"] = 1e3 * (time.perf_counter() - start)
        metrics["version"] = float(self.learner.version)
        metrics["restarts"] = float(self.totals["restarts"])
        self.totals["steps"] += 1
        for key in ("updates", "grads_applied", "grads_dropped", "frames", "frames_collected",
                    "frames_dropped", "episodes"):  # fmt: skip
            self.totals[key] += int(metrics.get(key, 0))
        return metrics

    def _step(self, timers: dict[str, Timer]) -> dict[str, float]:
        raise NotImplementedError

    def _setup(self) -> None:
        """Subclass hook run once the actors are started."""

    # -- weights and restarts -----------------------------------------------------------------

    def _weights_ref(self) -> Any:
        """One ``ray.put`` of the driver Learner's encoded weights per version."""
        if self._weights is None or self._weights[0] != self.learner.version:
            payload = self._codec.encode(self.learner.weights())
            self._weights = (self.learner.version, self.pool.put(payload))
        return self._weights[1]

    def _restart(self, worker_id: int, reason: str) -> None:
        self.pool.restart(
            worker_id, reason, weights_ref=self._weights_ref(), version=self.learner.version
        )
        self.totals["restarts"] += 1

    def _deadline(self) -> float:
        return time.monotonic() + self.config.timeout_s

    def _drain(self, refs: Sequence[Any]) -> None:
        """Waits for ``refs`` to finish and discards them (restarting workers that died)."""
        refs = list(refs)
        ready = self.pool.wait(refs, num_returns=len(refs), timeout_s=self.config.timeout_s)
        for ref in refs:
            if ref not in ready:
                self.pool.forget([ref])
                continue
            worker_id, current = self.pool.owner(ref), self.pool.is_current(ref)
            if self.pool.outcome(ref) is DIED and current:
                self._restart(worker_id, "died while its result was being discarded")

    def set_seed(self, seed: int) -> int:
        """Reseeds every worker (and its future restarts) distinctly from ``seed``.

        Requests in flight finish with the envs they had; the next ones use the
        new seeds (each worker resets its envs, so episodes restart).

        Returns:
            ``seed``.

        Raises:
            TypeError: ``seed`` is not an int.
            GradientWorkerError: a worker failed or did not answer in ``config.timeout_s``.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.pool.seed = seed
        seeds = [(self.pool.worker_seed(i),) for i in range(len(self.pool))]
        self.pool.call_all("set_seed", seeds, timeout_s=self.config.timeout_s)
        return seed

    # -- state --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Totals since construction (or since the state it resumed from) and restarts per worker."""
        return {**self.totals, "restarts_per_worker": self.pool.restarts(), "mode": self.mode}

    def state_dict(self) -> dict[str, Any]:
        """The learner's state and the totals: everything to resume (a superset of the Learner's).

        Returns:
            ``{"mode", "learner", "totals"}``, plain values and CPU tensors.
        """
        return {"mode": self.mode, "learner": self._learner_state(), "totals": dict(self.totals)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` into the driver's Learner and every worker.

        Work in flight is waited for and discarded; every worker then holds the
        restored weights and version.

        Raises:
            ValueError: ``state`` comes from another mode or misses keys.
        """
        missing = {"mode", "learner", "totals"} - set(state)
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}; pass state_dict()")
        if state["mode"] != self.mode:
            raise ValueError(
                f"state was saved by a {state['mode']!r} coordinator; this one is {self.mode!r}"
            )
        self.learner.load_state_dict(state["learner"])
        self.totals.update({key: int(value) for key, value in state["totals"].items()})
        self._weights = None
        self._after_load()

    def _learner_state(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def _after_load(self) -> None:
        """Discards the requests in flight (they ran the old weights), then pushes the loaded ones."""
        self._drain(list(self._in_flight))
        self._in_flight.clear()
        ref, version = self._weights_ref(), self.learner.version
        self.pool.call_all(
            "set_weights", [(ref, version)] * len(self.pool), timeout_s=self.config.timeout_s
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Kills every gradient worker and releases Ray. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._in_flight.clear()
        self.pool.shutdown()
        self._weights = None
        self._lease.release()

    def __enter__(self) -> GradientCoordinator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_grad_workers={self.config.num_grad_workers}, "
            f"version={self.learner.version}, closed={self._closed})"
        )
