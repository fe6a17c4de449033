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
from tdscheme.gradient_workers.env_config import GradientEnvConfigs
from tdscheme.gradient_workers.metrics import Timer
from tdscheme.gradient_workers.nonfinite import NonFiniteGradients
from tdscheme.gradient_workers.pool import DIED, GradientWorkerPool
from tdscheme.learner import Learner
from tdscheme.rollout.env_config_push import set_env_config_method
from tdscheme.runtime import RayLease
from tdscheme.runtime.closing import ShutdownOnExit
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
    "grads_nonfinite",
    "hung",
)

#: Step metrics summed into the totals.
_SUMMED = (
    "updates",
    "grads_applied",
    "grads_dropped",
    "grads_nonfinite",
    "frames",
    "frames_collected",
    "frames_dropped",
    "episodes",
)


class GradientCoordinator(ShutdownOnExit):
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
        #: worker id -> (monotonic time its request is due, the limit in words)
        self._due: dict[int, tuple[float, str]] = {}
        self._starting: set[int] = set()  # rebuilt workers that have not delivered yet
        self._nonfinite = NonFiniteGradients(max_in_a_row=learner.config.max_nonfinite_updates)
        self._closed = False
        self._lease = RayLease.acquire(ray_init_config)
        self.pool = GradientWorkerPool(
            specs,
            remote_options=config.remote_options(),
            seed=config.seed,
            max_restarts=config.max_restarts,
        )
        self.env_configs = GradientEnvConfigs(self.pool, timeout_s=config.timeout_s)
        try:
            workers = range(len(specs))
            options = [config.remote_options() for _ in workers]
            if config.placement == "check":  # "wait": an autoscaler may add the nodes
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

        A gradient holding NaN / inf is left out, dropped and counted
        (:mod:`~tdscheme.gradient_workers.nonfinite`). In the centralized modes a
        worker that sends nothing within ``config.timeout_s`` of its request (plus
        ``actor_start_timeout_s`` just after a rebuild) is declared hung: one
        warning line, killed, rebuilt like a dead one (it counts toward
        ``max_restarts``) and sent the request again.

        Returns:
            Floats: ``frames`` (trained on), ``frames_collected``, ``frames_dropped``,
            ``grads_applied``, ``grads_dropped`` (stale, preempted or non-finite),
            ``grads_nonfinite`` (this step's), ``grads_nonfinite_total``,
            ``updates``, ``version``, ``restarts`` and ``hung`` (totals so far),
            ``episodes`` and ``episode_return_mean`` (when an episode ended), the
            frame-weighted means of the workers' loss metrics and timings,
            ``wait_ms``, ``apply_ms``, ``dispatch_ms``, ``step_ms``, and what the
            mode adds (see its class).

        Raises:
            GradientWorkerError: a worker raised, or died or hung more than
                ``max_restarts`` times (the message names it, and ``timeout_s``
                for a hang).
            tdscheme.errors.NonFiniteUpdateError: a worker sent
                ``max_nonfinite_updates`` (the driver Learner's config) non-finite
                gradients in a row, or that many steps in a row made no update
                for them.
            TimeoutError: decentralized: a step did not finish within ``config.timeout_s``.
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
        self.totals["steps"] += 1
        for key in _SUMMED:
            self.totals[key] += int(metrics.get(key, 0))
        for key, total in (("restarts", "restarts"), ("hung", "hung"),
                           ("grads_nonfinite_total", "grads_nonfinite")):  # fmt: skip
            metrics[key] = float(self.totals[total])
        self._nonfinite.step_done(skipped=not metrics["updates"] and metrics["grads_nonfinite"] > 0)
        self._nonfinite.check()
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
            worker_id, reason, weights_ref=self._weights_ref(), version=self.learner.version,
            **self.env_configs.start_kwargs(worker_id),
        )  # fmt: skip
        self.totals["restarts"] += 1
        self._starting.add(worker_id)

    # -- centralized requests: dispatch, wait, hung workers -----------------------------------

    def _dispatch(self, worker_id: int, timers: dict[str, Timer]) -> None:
        """Sends ``worker_id`` the current weights (one ``ray.put`` per version) and a request."""
        with timers["dispatch"]:
            ref = self._weights_ref()
            future = self.pool.submit(worker_id, "compute_gradients", ref, self.learner.version)
            self._in_flight[future] = worker_id
        limit_s, limit = self.config.timeout_s, f"timeout_s={self.config.timeout_s:g} s"
        if worker_id in self._starting:  # a rebuilt actor is placed and built first
            limit_s += self.config.actor_start_timeout_s
            limit += f" + actor_start_timeout_s={self.config.actor_start_timeout_s:g} s"
        self._due[worker_id] = (time.monotonic() + limit_s, limit)

    def _wait_ready(self, refs: Sequence[Any], timers: dict[str, Timer]) -> list[Any]:
        """Finished requests among ``refs``; ``[]`` when none is, by the first one's due time.

        Requests past their due time first have their workers replaced (hung).
        """
        refs = self._replace_hung(refs, timers)
        if not refs:
            return []
        with timers["wait"]:
            due = min(self._due[self._in_flight[ref]][0] for ref in refs)
            return self.pool.wait(refs, timeout_s=max(0.0, due - time.monotonic()))

    def _replace_hung(self, refs: Sequence[Any], timers: dict[str, Timer]) -> list[Any]:
        """Kills, rebuilds and re-asks the workers of overdue ``refs``; returns the other refs."""
        now = time.monotonic()
        overdue = [ref for ref in refs if self._due[self._in_flight[ref]][0] <= now]
        done = set(self.pool.wait(overdue, num_returns=len(overdue), timeout_s=0))
        hung = [ref for ref in overdue if ref not in done]
        for ref in hung:
            worker_id = self._in_flight.pop(ref)
            self.pool.forget([ref])
            self.totals["hung"] += 1  # the restart logs it: one line naming the worker, the limit
            self._restart(worker_id, f"hung: sent no gradient in {self._due[worker_id][1]}")
            self._dispatch(worker_id, timers)
        return [ref for ref in refs if ref not in hung]

    def _outcome(self, ref: Any) -> tuple[int, Any]:
        """``(worker id, result or DIED)`` of a finished request, no longer in flight."""
        worker_id = self._in_flight.pop(ref)
        result = self.pool.outcome(ref)
        if result is not DIED:
            self._starting.discard(worker_id)
        return worker_id, result

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

    # one signature and one check for every class that pushes env configs; its own docstring
    set_env_config = set_env_config_method(
        """Sends an env config to the gradient workers and waits for their acknowledgements.

        The arguments are ``RayCollector.set_env_config``'s (see
        :meth:`tdscheme.RayCollector.set_env_config`).

        Returns:
            The version of this config.

        Raises:
            ValueError: an unknown ``apply`` or worker id, or a bad task distribution.
            TypeError: ``config`` cannot be pickled, or a checkpoint cannot hold it or
                ``apply_env_config`` (:mod:`tdscheme.rollout.env_config_state`).
            GradientWorkerError: a worker refused it (named), or did not acknowledge it
                within ``timeout_s``.
        """
    )

    def _env_config_sender(self) -> GradientEnvConfigs:
        return self.env_configs

    # -- state --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Totals since construction (or since the state it resumed from) and restarts per worker."""
        return {**self.totals, "restarts_per_worker": self.pool.restarts(), "mode": self.mode}

    def state_dict(self) -> dict[str, Any]:
        """The learner's state and the totals: everything to resume (a superset of the Learner's).

        Returns:
            ``{"mode", "learner", "totals", "env_config"}``, plain values and CPU tensors.
        """
        return {
            "mode": self.mode, "learner": self._learner_state(), "totals": dict(self.totals),
            "env_config": self.env_configs.state_dict(),
        }  # fmt: skip

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
        self.env_configs.load_state_dict(state.get("env_config"))  # older states hold none

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

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_grad_workers={self.config.num_grad_workers}, "
            f"version={self.learner.version}, closed={self._closed})"
        )
