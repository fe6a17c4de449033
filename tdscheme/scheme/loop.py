"""The TrainingLoop protocol: the whole surface the Scheme calls on its way of training.

A way of training is one loop class in :mod:`tdscheme.scheme`
(:class:`~tdscheme.scheme.on_policy_loop.OnPolicyLoop`,
:class:`~tdscheme.scheme.grad_worker_loop.GradWorkerLoop`,
:class:`~tdscheme.scheme.off_policy_loop.OffPolicyLoop`). Each implements every
member of :class:`TrainingLoop`, so the :class:`~tdscheme.scheme.Scheme` calls them
directly and never asks what kind of loop it holds. A loop without a part
says so through the surface: ``collector`` / ``coordinator`` / ``replay_buffer``
are ``None``, and :class:`NoReplayBuffer` gives loops without a replay buffer
the buffer methods (a ``paused()`` that holds nothing, ``dump_buffer`` /
``load_buffer`` that raise).

:class:`PushInterval` is the one rule for when a loop pushes weights
(every ``weight_push_interval`` updates) and the one place its counter is saved.

Example:
    >>> interval = PushInterval(2)
    >>> interval.count(1), interval.count(1)
    (False, True)
    >>> interval.pushed()
    >>> interval.state_dict()
    {'updates_since_push': 0}
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tdscheme.validation import check_int

if TYPE_CHECKING:
    from tdscheme.collectors import RayCollector
    from tdscheme.episodes import FinishedEpisodes
    from tdscheme.gradient_workers import GradientCoordinator

__all__ = ["TrainingLoop", "CollectorEnvConfigs", "NoReplayBuffer", "PushInterval"]


class TrainingLoop(Protocol):
    """One way of training, behind the surface the :class:`~tdscheme.scheme.Scheme` calls.

    Attributes:
        state_key: the key of the driver's own part of ``Scheme.state_dict()``
            (``"collector"``, ``"grad_workers"``, ``"replay"``).
        collector: the driver-side RayCollector, or ``None`` (gradient workers
            collect with their own).
        coordinator: the gradient workers' coordinator, or ``None`` (no gradient
            workers).
        replay_buffer: the torchrl replay buffer the learner samples, or ``None``
            (on-policy).
        frames_pending: frames the collector delivered that no step counted yet
            (a Ray-held buffer's writes since the last step, up to ``frame_limit``;
            0 for the others).
        frame_limit: the Scheme's ``total_frames`` (``None``: none), set by
            ``Scheme.set_total_frames``: no step counts frames past it.
        episodes: the episodes that ended in the last step, with the env-config tasks and
            versions they ran where the frames carry them (``None``: none recorded).
    """

    state_key: str
    collector: RayCollector | None
    coordinator: GradientCoordinator | None
    replay_buffer: Any
    frames_pending: int
    frame_limit: int | None
    episodes: FinishedEpisodes | None

    def step(self) -> tuple[int, dict[str, float]]:
        """One iteration: ``(frames trained on, metrics)``."""
        ...

    def set_env_config(self, config: Any, **kwargs: Any) -> int:
        """Pushes an env config to whoever collects (``RayCollector.set_env_config``'s
        arguments); returns its version."""
        ...

    def wait_for_env_config(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        """Blocks until every worker acknowledged ``version``; returns each one's."""
        ...

    def push_weights(self) -> None:
        """Sends the learner's weights to whoever collects."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """``{"learner": ..., state_key: ..., ...}``: everything to resume the loop."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        ...

    def set_seed(self, seed: int) -> int:
        """Reseeds every worker distinctly from ``seed``."""
        ...

    def shutdown(self) -> None:
        """Releases the driver's actors. Idempotent."""
        ...

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """A ``with`` block in which nothing writes into the replay buffer."""
        ...

    def dump_buffer(self, path: str | Path) -> None:
        """Writes the replay buffer to the directory ``path``.

        Raises:
            RuntimeError: the loop has no replay buffer.
        """
        ...

    def load_buffer(self, path: str | Path) -> None:
        """Reads a replay buffer written by :meth:`dump_buffer`.

        Raises:
            RuntimeError: the loop has no replay buffer.
        """
        ...


class NoReplayBuffer:
    """The replay-buffer part of :class:`TrainingLoop` for a loop that trains on-policy.

    Stateless: ``replay_buffer`` is ``None``, :meth:`paused` holds nothing (nothing
    writes between steps) and the buffer methods raise.

    Example:
        >>> NoReplayBuffer().dump_buffer("/tmp/x")
        Traceback (most recent call last):
        ...
        RuntimeError: dump_replay_buffer needs a replay buffer; this Scheme has no storage_factory
    """

    replay_buffer: Any = None
    frames_pending: int = 0  # each step counts the batches the collector yields
    frame_limit: int | None = None  # the collector's own budget cuts its batches to fit

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: without a replay buffer nothing changes between steps."""
        return contextlib.nullcontext()

    def dump_buffer(self, path: str | Path) -> None:
        """Raises: there is no replay buffer to write.

        Raises:
            RuntimeError: always.
        """
        raise _no_buffer("dump_replay_buffer")

    def load_buffer(self, path: str | Path) -> None:
        """Raises: there is no replay buffer to read into.

        Raises:
            RuntimeError: always.
        """
        raise _no_buffer("load_replay_buffer")


class CollectorEnvConfigs:
    """The env-config part of :class:`TrainingLoop` for a loop whose workers are a RayCollector's."""

    collector: RayCollector

    def set_env_config(self, config: Any, **kwargs: Any) -> int:
        """``RayCollector.set_env_config``: to the collector workers; returns the version."""
        return self.collector.set_env_config(config, **kwargs)

    def wait_for_env_config(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        """``RayCollector.wait_for_env_config``."""
        return self.collector.wait_for_env_config(version, timeout_s)


def _no_buffer(what: str) -> RuntimeError:
    return RuntimeError(f"{what} needs a replay buffer; this Scheme has no storage_factory")


class PushInterval:
    """Counts learner updates since the last weight push; a push is due every ``interval``.

    The loop that pushes weights owns one: it calls :meth:`count` after its
    updates, pushes when that says so, and calls :meth:`pushed` after every push
    (due or not). Its state is ``{"updates_since_push": n}``, merged into the top
    level of the driver's (and so the Scheme's) state: the one place it is saved.

    Args:
        interval: updates between pushes (``SchemeConfig.weight_push_interval``).

    Raises:
        ValueError: ``interval`` is not an int >= 1.

    Example:
        >>> interval = PushInterval(3)
        >>> interval.count(2), interval.count(0), interval.count(1)
        (False, False, True)
        >>> interval.load_state_dict({"updates_since_push": 1}); interval.updates_since_push
        1
    """

    #: The key of the counter in the driver's state.
    STATE_KEY = "updates_since_push"

    def __init__(self, interval: int) -> None:
        check_int("weight_push_interval", interval, minimum=1)
        self.interval = interval
        self.updates_since_push = 0

    def count(self, updates: int) -> bool:
        """Adds ``updates`` (0 for a skipped update) and says whether a push is due."""
        self.updates_since_push += updates
        return self.updates_since_push >= self.interval

    def pushed(self) -> None:
        """Starts counting again: the weights were just pushed."""
        self.updates_since_push = 0

    def state_dict(self) -> dict[str, int]:
        """``{"updates_since_push": n}``."""
        return {self.STATE_KEY: self.updates_since_push}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` (0 when ``state`` has no counter, as states saved
        before it was checkpointed)."""
        self.updates_since_push = int(state.get(self.STATE_KEY, 0))
