"""A worker's env configs: received from any thread, applied by its rollout, stamped on its frames.

:class:`EnvConfigRunner` runs in the worker's process (a collector worker or a gradient
worker, through :class:`~tdscheme.rollout.worker_collector.WorkerCollector`), no Ray:

* :meth:`~EnvConfigRunner.stage` receives an :class:`EnvConfigPush` (from the actor's
  control thread while the rollout steps): its version must be newer than every one
  received before, the env must offer the protocol of :mod:`tdscheme.envs.env_config`
  (else a ``ValueError`` naming the env class), and where the env can check a config
  without applying it (its ``check_env_config``: :class:`~tdscheme.envs.EnvAttributes`
  checks its attributes exist) the config (each level of a distribution) must pass: a
  refused push raises there, so the worker's acknowledgement is its refusal;
* the rollout applies it: ``apply="now"`` to every copy before the next step;
  ``apply="reset"`` to each copy at its own next reset (a hook on each copy's ``reset``,
  so torchrl's rollout, the lean rollout and gymnasium's autoreset all honour it); a
  copy in the middle of an episode keeps the config it started with. A config received
  before a reset is always applied at that reset: an episode that starts after the
  acknowledgement runs the new config. Where one call reaches every copy of several
  (an ``AsyncVectorEnv``'s ``call``, EnvPool, a one-call ``NEXT_STEP`` vector env, an
  env's own ``set_env_config``, an ``apply_env_config`` callable), no copy can take it
  alone: every copy switches before the first step of the worker's next batch (a level
  of a distribution is drawn there, for all), so each batch runs one config and its
  stamps are exact; the episodes running then change config midway (said once, at
  WARNING);
* a config the env raises on when the rollout applies it (no check could see it) is
  refused then: the copies go back to the last config applied without error (none: they
  are stamped version 0 and keep what the failed call left), the rollout goes on, and :meth:`~EnvConfigRunner.take_refused` hands
  the refusal to the worker, which reports it with its next batch (never a crash, so
  never a restart with the same config);
* a :class:`~tdscheme.envs.env_config.TaskDistribution` (or ``{"levels", "probs"}``)
  draws a level for each copy at each of its resets, with the worker's seed;
* :meth:`~EnvConfigRunner.stamp` writes ``("collector", "env_config_version")`` and
  ``("collector", "env_task")`` (the level's index, -1 without a distribution) on
  every frame: what the copy that produced it was running when it stepped.

Frames of a batch laid out ``[*env_batch, T]`` (torchrl's ``Collector``, the lean
rollout) are stamped per copy and step; another layout (``trajs_per_batch``) gets, on
every frame, the lowest version its copies ran in the batch.

Example:
    >>> from tdscheme.envs.env_config import make_configurable_env
    >>> env = make_configurable_env("Pendulum-v1", num_envs=2)
    >>> runner = EnvConfigRunner(env)
    >>> runner.stage(EnvConfigPush({"g": 3.0}, version=1, apply="now"))
    1
    >>> runner.before_step()  # the rollout's next step applies it
    >>> [copy.unwrapped.g for copy in env._env.envs], runner.running_versions()
    ([3.0, 3.0], [1, 1])
    >>> runner.stage(EnvConfigPush({"g": 3.0}, version=1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: env config version 1 is not newer than version 1, ...
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdscheme.envs.env_config import (
    EnvConfigTarget,
    TaskDistribution,
    as_distribution,
    env_config_target,
)
from tdscheme.keys import ENV_CONFIG_VERSION_KEY, ENV_TASK_KEY
from tdscheme.rollout.env_config_push import (  # the message, re-exported: imported from here
    APPLY_MODES,
    EnvConfigPush,
    env_config_push,
    state_version,
)
from tdscheme.rollout.stamps import stamp_, write_

__all__ = ["APPLY_MODES", "EnvConfigPush", "EnvConfigRunner", "env_config_push", "state_version"]

logger = logging.getLogger(__name__)


class EnvConfigRunner:
    """The env configs of one env in a worker process (see the module).

    Args:
        env: the torchrl env the rollout steps (``None``: none in this process, e.g. a
            multi-process collector's; every config is then refused).
        worker_id: named in messages.
    """

    def __init__(self, env: Any, *, worker_id: int = 0) -> None:
        self.env = env
        self.worker_id = worker_id
        self._cond = threading.Condition()
        self._staged: tuple[EnvConfigPush, EnvConfigTarget, TaskDistribution | None] | None = None
        self.received_version = 0  # the newest version received (acknowledged)
        self._answered = 0  # the newest version received or refused (a request waits for it)
        self.latest: EnvConfigPush | None = None  # the newest the rollout took
        self._target: EnvConfigTarget | None = None
        self._dist: TaskDistribution | None = None
        self._hooked = False
        self._now = False  # apply the newest config to every copy before the next step
        self._staged_now = False  # a "now" push received and not taken yet
        self._base_version = 0  # what every copy runs before the first config is taken
        self._running: np.ndarray | None = None  # per copy: the version it runs
        self._tasks: np.ndarray | None = None  # per copy: its level's index (-1: none)
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []  # per step since the last stamp
        self._batch_low = 0  # the lowest version a copy ran since the last stamp
        self._rng = np.random.default_rng()
        self._accepted: tuple[EnvConfigPush, EnvConfigTarget, TaskDistribution | None] | None
        self._accepted = None  # the newest config applied without error (a refusal's fallback)
        self._refused: list[tuple[int, int, str]] = []  # (version, back to, error) not reported
        self._batch_start = True  # no step taken since the last stamp (a batch's start)
        self._said_whole = False  # the batch-boundary switch, said once

    # -- receiving (any thread) ---------------------------------------------------------

    def stage(self, push: EnvConfigPush) -> int:
        """Receives ``push``; the rollout applies it (see the module). Thread-safe.

        Returns:
            ``push.version`` (the acknowledgement).

        Raises:
            ValueError: the version is not newer than one received before, ``apply`` is
                unknown, a bad task distribution, or the env offers no way to receive it.
            Exception: the env's ``check_env_config`` refused it (its own error).
        """
        with self._cond:
            try:
                if push.apply not in APPLY_MODES:
                    raise ValueError(f"apply={push.apply!r} is invalid; accepted: 'reset', 'now'")
                if push.version <= self.received_version:
                    raise ValueError(
                        f"env config version {push.version} is not newer than version "
                        f"{self.received_version}, which this worker already received; "
                        "versions only go forward"
                    )
                dist = as_distribution(push.config)
                target = self._resolve(push)
                for config in [push.config] if dist is None else dist.levels:
                    target.check(config)  # read-only: the env is the rollout's thread's
            finally:  # refused or not, a request made after it waits no longer
                self._answered = max(self._answered, push.version)
                self._cond.notify_all()
            self._staged = (push, target, dist)  # a newer push replaces one not taken yet
            # ... but a "now" it replaces still holds: no older config after the next step
            self._staged_now = self._staged_now or push.apply == "now"
            self.received_version = push.version
        return push.version

    def wait_received(self, version: int, timeout_s: float = 60.0) -> None:
        """Blocks until a config of ``version`` or newer was received or refused (a request
        made after a push; a refusal is the push's error, reported with its acknowledgement).

        Raises:
            TimeoutError: it did not arrive within ``timeout_s``.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._answered >= version, timeout_s):
                raise TimeoutError(
                    f"worker {self.worker_id}: env config version {version} did not arrive "
                    f"within {timeout_s} s (received version {self.received_version})"
                )

    def _resolve(self, push: EnvConfigPush) -> EnvConfigTarget:
        if self.env is None:
            raise ValueError(
                "this worker's collector steps its envs in other processes (a multi-process "
                "collector class); env configs need the env in the worker's process: use a "
                "single-process collector class (the default LeanCollector, torchrl's Collector)"
            )
        target = env_config_target(self.env, push.apply_env_config)
        if not self._hooked:  # once: the hooks call the runner, whichever target is current
            target.on_reset(self._on_reset)
            self._hooked = True
        return target

    # -- applying (the rollout's thread) --------------------------------------------------

    def start(self, push: EnvConfigPush | None) -> None:
        """Applies ``push`` to every copy now (a rebuilt or restored worker); ``None``: nothing.

        A config the env refuses is recorded (:meth:`take_refused`), not raised: the worker
        starts with the env as built rather than fail at every restart.
        """
        if push is None:
            return
        try:
            self.stage(dataclasses.replace(push, apply="now"))
        except Exception as err:  # noqa: BLE001 - reported with the next batch
            self._refuse(push.version, err)
            return
        self.before_step(record=False)

    def take_refused(self) -> list[tuple[int, int, str]]:
        """The refusals since the last call: ``(version, version gone back to, error)``."""
        with self._cond:
            refused, self._refused = self._refused, []
        return refused

    def _refuse(self, version: int, err: Exception) -> None:
        back = 0 if self._accepted is None else self._accepted[0].version
        with self._cond:
            self._refused.append((version, back, f"{type(err).__name__}: {err}"))

    def seed(self, seed: int) -> None:
        """Seeds the draws of task distributions (call it before the envs reset with ``seed``)."""
        self._rng = np.random.default_rng(seed)

    def _take_staged(self) -> None:
        with self._cond:
            staged, self._staged = self._staged, None
            now, self._staged_now = self._staged_now, False
        if staged is None:
            return
        self.latest, self._target, self._dist = staged
        if self._running is None:
            n = self._target.num_copies
            self._running = np.full(n, self._base_version, dtype=np.int64)
            self._tasks = np.full(n, -1, dtype=np.int64)
        self._now = self._now or now

    def before_step(self, record: bool = True) -> None:
        """Called before each env step: applies an ``apply="now"`` config (and, at a batch's
        start, a config for copies that take it only all at once), records the step."""
        if self._staged is not None:
            self._take_staged()
        start, self._batch_start = self._batch_start, False
        if start and not self._now and self.latest is not None and self._whole():
            self._say_whole()
            self._give_or_refuse(range(len(self._running)), every=True)
        if self._now:
            self._now = False
            self._give_or_refuse(range(len(self._running)), every=True)
        if record and self._running is not None:
            self._rows.append((self._running.copy(), self._tasks.copy()))
            self._batch_low = min(self._batch_low, int(self._running.min()))

    def _on_reset(self, copies: Sequence[int] | None) -> None:
        """The reset hook: copies about to reset take the newest config (or draw a level)."""
        if self._staged is not None:
            self._take_staged()
        if self.latest is None or self._whole():  # those switch at a batch's start
            return
        self._give_or_refuse(range(len(self._running)) if copies is None else copies, every=False)

    def _whole(self) -> bool:
        """Whether one call reaches every copy of several (none can take a config alone)."""
        return not self._target.per_copy and len(self._running) > 1

    def _say_whole(self) -> None:
        if self._said_whole or self._running is None or (self._running >= self.latest.version).all():
            return
        self._said_whole = True
        logger.warning(
            "collector worker %d: %s reaches every env copy in one call, so apply='reset' "
            "configs switch every copy at the start of the next batch (episodes running "
            "then change config midway); a SyncVectorEnv of copies that each take a config "
            "switches each at its own reset", self.worker_id, self._target.description,
        )  # fmt: skip

    def _give_or_refuse(self, copies: Sequence[int], *, every: bool) -> None:
        """:meth:`_give`; a config the env raises on is refused and the copies go back."""
        try:
            if self._give(copies, every=every):
                self._accepted = (self.latest, self._target, self._dist)
        except Exception as err:  # noqa: BLE001 - the env's error, reported by the worker
            self._refuse(self.latest.version, err)
            hit = self._running == self.latest.version  # copies that took it before the error
            self._running[hit], self._tasks[hit] = self._base_version, -1
            self.latest, self._target, self._dist = self._accepted or (None, self._target, None)
            if self.latest is not None and hit.any():  # the fallback again, where it was left
                self._give([int(i) for i in np.flatnonzero(hit)], every=False)

    def _give(self, copies: Sequence[int], *, every: bool) -> bool:
        """Applies the newest config to ``copies`` that do not run it yet (or draws levels);
        returns whether any copy took it."""
        latest, target, dist, running = self.latest, self._target, self._dist, self._running
        version = latest.version
        if not target.per_copy:  # one call reaches every copy
            copies = range(len(running))
        if dist is None:
            todo = [i for i in copies if running[i] < version]
            if todo:
                target.apply(latest.config, todo if target.per_copy else None)
                running[todo], self._tasks[todo] = version, -1
            return bool(todo)
        if target.per_copy:
            for i in copies:
                task = dist.sample(self._rng)
                target.apply(dist.levels[task], [i])
                running[i], self._tasks[i] = version, task
            return bool(len(copies))
        if every or len(copies):
            task = dist.sample(self._rng)
            target.apply(dist.levels[task])
            running[:], self._tasks[:] = version, task
            return True
        return False

    # -- stamping -------------------------------------------------------------------------

    def stamp(self, td: TensorDictBase) -> TensorDictBase:
        """Writes the env-config version and task of every frame of ``td`` (see the module)."""
        rows, self._rows = self._rows, []
        low, self._batch_low = self._batch_low, self._low()
        self._batch_start = True
        shape = td.batch_size
        if not rows:  # no config taken yet, or a layout without steps
            task = -1 if self._tasks is None else int(self._tasks.min())
            return stamp_(stamp_(td, ENV_CONFIG_VERSION_KEY, low), ENV_TASK_KEY, task)
        steps = shape[-1] if len(shape) else 0
        versions, tasks = self._per_step(rows, steps, shape)
        if versions is None:  # another layout: the batch's lowest version
            return stamp_(stamp_(td, ENV_CONFIG_VERSION_KEY, low), ENV_TASK_KEY, -1)
        return write_(
            write_(td, ENV_CONFIG_VERSION_KEY, versions), ENV_TASK_KEY, tasks.to(torch.int64)
        )

    def _per_step(
        self, rows: list[tuple[np.ndarray, np.ndarray]], steps: int, shape: torch.Size
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        n = len(rows[0][0])
        if steps < len(rows) or shape.numel() != n * steps:
            return None, None
        missing = steps - len(rows)  # steps before the first config was taken
        base = (np.full(n, self._base_version, np.int64), np.full(n, -1, np.int64))
        rows = [base] * missing + rows
        versions = np.stack([r[0] for r in rows], axis=-1)  # [copies, T]
        tasks = np.stack([r[1] for r in rows], axis=-1)
        return (
            torch.from_numpy(versions).reshape(shape),
            torch.from_numpy(tasks).reshape(shape),
        )

    def _low(self) -> int:
        return self._base_version if self._running is None else int(self._running.min())

    # -- state ----------------------------------------------------------------------------

    def running_versions(self) -> list[int]:
        """The version each env copy runs (every copy: the base version before any config)."""
        running = self._running
        return [self._base_version] if running is None else running.tolist()

    def state_dict(self) -> dict[str, Any] | None:
        """:meth:`EnvConfigPush.state` of the newest config received, or ``None``."""
        with self._cond:
            push = self._staged[0] if self._staged is not None else self.latest
        return None if push is None else push.state()

    def load_state_dict(self, state: Mapping[str, Any] | EnvConfigPush | None) -> None:
        """Restores :meth:`state_dict` (or its push, decoded by the driver): applied at once.

        Raises:
            ValueError: its version is older than one this worker received.
        """
        if state is None:
            return
        push = state if isinstance(state, EnvConfigPush) else EnvConfigPush.from_state(state)
        version = state_version({"version": push.version}, self.received_version, "this worker")
        if version == self.received_version:  # already running it (a reload of the same state)
            return
        self.start(push)
