"""The torchrl collector a worker process steps: built one way, its inputs checked, its steps counted.

Collector workers (:class:`~tdscheme.collectors.worker.actor.CollectorWorker`) and
gradient workers (:class:`~tdscheme.gradient_workers.collection.LocalCollection`) both
step torchrl collectors in their own process; both build them here, so both get:

* **the policy's keys checked** against the env's before torchrl first runs the policy
  (:func:`~tdscheme.rollout.input_checks.check_policy_keys`): a mismatch is one message
  listing the missing and extra keys, not torchrl's ``KeyError`` from inside a rollout;
* **NaN / inf observations named**: when the policy fails on an env output holding
  them, a :class:`~tdscheme.errors.NonFiniteInputError` says which key, at which step,
  instead of torch's "probability tensor contains either inf, nan or element < 0";
* **env-step progress** (:meth:`WorkerCollector.progress`), counted as the steps happen,
  which a driver reads without waiting for the batch (the collector workers' stall
  check, :mod:`tdscheme.collectors.driver.liveness`);
* **torchrl's defaults for the class** (:func:`~tdscheme.rollout.torchrl_names.default_collector_kwargs`)
  under the user's collector arguments;
* **env configs** (:class:`~tdscheme.rollout.env_config.EnvConfigRunner`): received,
  applied at each copy's reset (or at once), and stamped on every frame.

Runs in the worker's process (never the driver's): the env is built where it is stepped.

Example:
    >>> from functools import partial
    >>> from tdscheme.envs import make_env
    >>> rollout = WorkerCollector(partial(make_env, "CartPole-v1"), None, frames_per_batch=20)
    >>> batch = rollout.next_batch()
    >>> batch.numel(), rollout.progress(), rollout.fast_path()
    (20, 20, True)
    >>> rollout.shutdown()
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs import TransformedEnv

from tdscheme.envs.gym_vector import build_torchrl_env, is_next_step_env, torchrl_env_factory
from tdscheme.rollout.env_config import EnvConfigPush, EnvConfigRunner
from tdscheme.rollout.input_checks import check_policy_keys, env_output_error
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.torchrl_names import (
    default_collector_kwargs,
    env_output_keys,
    is_multi_collector,
    takes_argument,
    takes_trajectory_pool,
    trajectory_pool,
)

__all__ = [
    "WorkerCollector",
    "build_collector",
    "call_before_steps",
    "count_env_steps",
    "fast_path",
]


def build_collector(
    create_env_fn: Any,
    policy: Any,
    *,
    frames_per_batch: int,
    collector_class: type = LeanCollector,
    collector_kwargs: Mapping[str, Any] | None = None,
    policy_factory: Callable[[], Any] | None = None,
    num_workers_per_collector: int = 1,
    worker_id: int | None = None,
    preemptible: bool = False,
    first_traj_id: int = 0,
    frames_done: int = 0,
    on_env: Callable[[Any], None] | None = None,
) -> Any:
    """A torchrl collector, built in the worker's process (see the module).

    Args:
        create_env_fn: an env factory (or an env); a multi-process collector class or
            ``num_workers_per_collector > 1`` gets a list of factories. A factory may
            return a gymnasium env or vector env: it is wrapped by
            :func:`~tdscheme.envs.gym_vector.wrap_gym_env` (gymnasium's default
            ``NEXT_STEP`` ``SyncVectorEnv`` included).
        policy: the policy (``None``: random, or ``policy_factory``).
        frames_per_batch: frames per batch the collector yields.
        collector_class: a torchrl collector class.
        collector_kwargs: its extra arguments; they override torchrl's defaults.
        policy_factory: builds the policy inside the collector instead.
        num_workers_per_collector: env copies handed to a multi-process collector.
        worker_id: torchrl's ``worker_idx`` (a weight receiver's rank), where the class takes it.
        preemptible: one env step per iteration (a driver assembles the batch step by
            step and may cut it at any step).
        first_traj_id: a rebuilt worker's first trajectory id, past every id its earlier
            actors used, so no trajectory is spliced across a restart.
        frames_done: frames its earlier actors collected: it takes random actions
            only for what they left of ``init_random_frames``, and its checkpoints hold
            the whole count.
        on_env: called with the env built here before the collector is built (``None``
            when the collector builds its envs in other processes).

    Returns:
        The collector.

    Raises:
        ValueError: the policy reads a key the env does not provide, or does not
            write its action (:func:`~tdscheme.rollout.input_checks.check_policy_keys`).
    """
    env = create_env_fn
    if num_workers_per_collector > 1 or is_multi_collector(collector_class):
        env = [torchrl_env_factory(create_env_fn)] * num_workers_per_collector
    elif callable(env) and not isinstance(env, torch.nn.Module):
        env = build_torchrl_env(env)  # a gymnasium env wrapped, as the list's factories do
        check_policy_keys(env, policy)  # before torchrl runs the policy on it
    if on_env is not None:
        on_env(None if isinstance(env, list) else env)
    kwargs = default_collector_kwargs(collector_class)
    if worker_id is not None and takes_argument(collector_class, "worker_idx"):
        kwargs["worker_idx"] = worker_id  # as torchrl's RayCollector: a receiver's rank
    kwargs.update(collector_kwargs or {})  # the user's values win
    if policy_factory is not None:
        kwargs["policy_factory"] = policy_factory
    if first_traj_id and takes_trajectory_pool(collector_class):
        kwargs.setdefault("traj_pool", trajectory_pool(first_traj_id))
    multi = isinstance(env, list)  # its sub-collectors count their own frames
    if multi and frames_done and (kwargs.get("init_random_frames") or 0) > 0:
        left = max(0, kwargs["init_random_frames"] - frames_done)
        kwargs["init_random_frames"] = left - left % frames_per_batch
    frames = _env_batch_numel(env) if preemptible else frames_per_batch
    collector = collector_class(env, policy, frames_per_batch=frames, total_frames=-1, **kwargs)
    if frames_done and not multi:  # as torchrl's own load_state_dict restores it
        collector._frames = frames_done
    return collector


def _env_batch_numel(env: Any) -> int:
    if isinstance(env, list):
        return len(env)
    batch_size = getattr(env, "batch_size", torch.Size([]))
    return max(1, torch.Size(batch_size).numel())


def fast_path(collector: Any) -> bool | str:
    """``True`` when ``collector`` runs tdscheme's lean rollout, else why torchrl's rollout runs.

    Example:
        >>> from torchrl.collectors import Collector
        >>> fast_path(Collector.__new__(Collector))
        "collector_class=Collector: tdscheme's lean rollout runs only in its default LeanCollector"
    """
    if not isinstance(collector, LeanCollector):
        return (
            f"collector_class={type(collector).__name__}: tdscheme's lean rollout runs only "
            "in its default LeanCollector"
        )
    return True if collector.lean_reason is None else f"torchrl's rollout: {collector.lean_reason}"


def count_env_steps(collector: Any, on_steps: Callable[[int], None]) -> bool:
    """Calls ``on_steps(n)`` after each env step of a torchrl collector (``n``: env batch size).

    Wraps the collector's env's ``step_and_maybe_reset`` (the call torchrl's rollout
    makes once per step) and sets a :class:`~tdscheme.rollout.lean.LeanCollector`'s
    ``step_hook`` (its lean loop steps the gymnasium or EnvPool env directly).
    Collectors without an env in this process (multi-process ones) are left alone.

    Returns:
        Whether the steps are counted.
    """
    if hasattr(collector, "step_hook"):  # LeanCollector: its lean loop calls the hook
        collector.step_hook = on_steps
    env = getattr(collector, "env", None)
    step = getattr(env, "step_and_maybe_reset", None)
    if step is None:
        return False
    frames = max(1, int(env.batch_size.numel()))

    @functools.wraps(step)
    def counted(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        on_steps(frames)
        return out

    object.__setattr__(env, "step_and_maybe_reset", counted)
    return True


def call_before_steps(collector: Any, before: Callable[[], None]) -> None:
    """Calls ``before()`` before each env step of a torchrl collector.

    Sets a :class:`~tdscheme.rollout.lean.LeanCollector`'s ``before_step`` (its lean loop)
    and wraps the env's ``step_and_maybe_reset`` (torchrl's rollout); only one of them
    runs in a given collector.
    """
    if hasattr(collector, "before_step"):
        collector.before_step = before
    env = getattr(collector, "env", None)
    step = getattr(env, "step_and_maybe_reset", None)
    if step is None:
        return

    @functools.wraps(step)
    def stepped(*args: Any, **kwargs: Any) -> Any:
        before()
        return step(*args, **kwargs)

    object.__setattr__(env, "step_and_maybe_reset", stepped)


class WorkerCollector:
    """One torchrl collector stepped in a worker process: built, checked, counted, named.

    Args:
        create_env_fn, policy, **build_args: :func:`build_collector`'s arguments.
        env_config: the env config every copy runs from the start (a rebuilt or restored
            worker's); ``None``: the env as built.

    Attributes:
        collector: the torchrl collector.
        env_config: its env configs (:class:`~tdscheme.rollout.env_config.EnvConfigRunner`).
        frames_seen: frames yielded over the worker's life (the step numbers in messages).
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any,
        *,
        env_config: EnvConfigPush | None = None,
        **build_args: Any,
    ) -> None:
        self.worker_id = build_args.get("worker_id") or 0

        def runner(env: Any) -> None:  # before torchrl's first reset: it runs the config
            self.env_config = EnvConfigRunner(env, worker_id=self.worker_id)
            self.env_config.start(env_config)

        self.collector = build_collector(create_env_fn, policy, on_env=runner, **build_args)
        call_before_steps(self.collector, self.env_config.before_step)
        self.env_steps = 0  # progress, read by a driver while the worker collects
        self.frames_seen = 0
        self._steps_counted = count_env_steps(self.collector, self._add_steps)
        self._env_keys = env_output_keys(self.collector)
        self._iterator = iter(self.collector)

    def _add_steps(self, frames: int) -> None:
        self.env_steps += frames

    def reuse_batch_buffer(self) -> bool:
        """Yields the lean rollout's own batch buffer, not torchrl's copy of it; whether it does.

        torchrl's collector copies each batch it yields (``return_same_td=False``), so a
        caller may keep it while the next one is collected. A worker whose batch is
        serialized before its next one starts (a Ray actor's reply) does not need the
        copy: for pixels it is a sixth of a worker's time. Only the lean rollout's
        batches qualify (no ``trajs_per_batch``, no collector-held replay buffer): they
        are written in place into the same buffer each time.
        """
        collector = self.collector
        if (
            not isinstance(collector, LeanCollector)
            or collector.lean_reason is not None
            or collector.replay_buffer is not None
            or getattr(collector, "trajs_per_batch", None)
        ):
            return False
        collector.return_same_td = True  # torchrl's iterator reads it at each batch
        return True

    def pads_reset_steps(self, *, writes: bool = False) -> bool:
        """Whether batch rows end in padding for reset steps (a one-call ``NEXT_STEP`` env).

        Args:
            writes: the batches go into a replay buffer, which would store the padding as
                frames: such an env is refused (``ValueError``).
        """
        env = getattr(self.collector, "env", None)
        pads = is_next_step_env(env.base_env if isinstance(env, TransformedEnv) else env)
        if pads and writes:
            raise ValueError(
                "replay_buffer: the env is a one-call NEXT_STEP vector env, whose rows end in "
                "padding for its reset steps (the buffer would store it as frames); accepted: no "
                "replay_buffer (the driver writes the valid frames), or a SyncVectorEnv or "
                "DISABLED vector env"
            )
        return pads

    def progress(self) -> int:
        """Env steps taken so far (frames); a collector that hides its env counts per batch."""
        return self.env_steps

    def fast_path(self) -> bool | str:
        """:func:`fast_path` of the collector."""
        return fast_path(self.collector)

    def next_batch(self) -> TensorDictBase:
        """The collector's next batch (one env step when built ``preemptible``).

        Raises:
            NonFiniteInputError: the policy failed on NaN / inf the env returned (named).
        """
        try:
            td = next(self._iterator)
        except StopIteration:
            raise
        except Exception as err:  # a NaN observation fails the policy: name it
            named = env_output_error(
                err, env_keys=self._env_keys, worker_id=self.worker_id,
                first_step=self.frames_seen,
            )  # fmt: skip
            if named is None:
                raise
            raise named from err
        self.env_config.stamp(td)
        frames = td.numel()
        self.frames_seen += frames
        if not self._steps_counted:
            self._add_steps(frames)
        return td

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the envs and torch's RNG (a worker owns its process), then resets the envs.

        torch's RNG drives the policy's exploration (e.g. sampling a categorical
        action); torchrl's ``set_seed`` seeds the envs only.

        Returns:
            The seed torchrl chains to next.
        """
        torch.manual_seed(seed)
        self.env_config.seed(seed)  # before the seeded resets draw levels
        next_seed = self.collector.set_seed(seed, static_seed)
        _writable_carrier(self.collector)
        self.collector.reset()  # the first frames come from a seeded reset too
        return next_seed

    def shutdown(self) -> None:
        """Closes the collector and its envs. Idempotent."""
        collector, self.collector = self.collector, None
        self._iterator = None
        if collector is not None:
            collector.shutdown()


def _writable_carrier(collector: Any) -> None:
    """Gives a torchrl collector's carrier its own memory where an entry is expanded.

    torchrl's ``Collector.reset()`` writes the env's reset output into the carrier
    in place; torchrl's EnvPool wrapper (``MultiThreadedEnv``) starts it with an
    expanded observation (stride 0), which cannot be written in place ("more than
    one element of the written-to tensor refers to a single memory location").
    """
    carrier = getattr(collector, "_carrier", None)
    if not isinstance(carrier, TensorDictBase):
        return
    leaves = carrier.values(include_nested=True, leaves_only=True)
    if any(isinstance(v, torch.Tensor) and v.numel() > 1 and 0 in v.stride() for v in leaves):
        collector._carrier = carrier.clone()
