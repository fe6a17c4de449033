"""What the fault rows share: what they build besides their faulty envs, and how they judge.

The faulty envs are :mod:`tdscheme.envs.faulty`'s; the CartPole networks and
learners are a preset's (:func:`cartpole_preset`); the small policies are plain
torch and tensordict modules. Whatever a Ray worker unpickles must come from an
installed package: a row also runs as ``benchmarks/fault_rows/liveness.py``, and
then the workers cannot import ``fault_rows``. Heavy imports stay inside the functions.

The rows judge with :func:`expect_error` (a call that must raise, naming what it
should) and :func:`collect_row` (a RayCollector run to its end, its frame ledger
checked).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from faults import row
from harness import LEDGER_PARTS, json_line, ledger_adds_up

#: ``tdscheme`` in a child process, the way the rows that test the command run it.
TDSCHEME = [sys.executable, "-m", "tdscheme.cli"]


@contextlib.contextmanager
def ray_lease() -> Iterator[Any]:
    """A Ray for the block, as tdscheme starts one (or the one it joins), released after."""
    from tdscheme.runtime import RayLease

    lease = RayLease.acquire(None)
    try:
        yield lease
    finally:
        lease.release()


def cartpole_preset(algo: str = "ppo", *, hidden: int = 8) -> Any:
    """``ppo-cartpole`` or ``a2c-cartpole`` made small: one hidden layer, one update per batch.

    Its ``policy_factory()`` and ``learner_factory()`` are ``functools.partial`` objects
    over tdscheme's functions, so Ray workers import them by reference.

    Args:
        algo: ``"ppo"`` or ``"a2c"``.
        hidden: units of the actor's and the critic's one hidden layer.

    Returns:
        A :class:`tdscheme.presets.Preset`.
    """
    from tdscheme.presets import get_preset

    return get_preset(f"{algo}-cartpole").override(
        {"hidden_sizes": (hidden,), "num_epochs": 1, "minibatch_size": None, "anneal_lr": False,
         "lr": 3e-3, "max_grad_norm": 1.0, "normalize_advantage": False}
    )  # fmt: skip


def linear_policy(obs_dim: int, action_dim: int, *, obs_key: str = "observation") -> Any:
    """A linear ``TensorDictModule`` writing ``"action"`` (torch and tensordict classes only)."""
    from tensordict.nn import TensorDictModule
    from torch import nn

    return TensorDictModule(nn.Linear(obs_dim, action_dim), in_keys=[obs_key], out_keys=["action"])


def alive_actor_ids() -> set[str]:
    """The ids of the Ray actors that are not dead (needs a connected Ray)."""
    # ray.util.state.list_actors asks the dashboard, which the rows' Ray does not run
    # (no dashboard, as tdscheme starts it); the GCS actor table is the same information.
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}


def expect_error(
    fault: str,
    build: Callable[[], Any],
    *,
    names: tuple[str, ...],
    bound_s: float = 2.0,
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError),
) -> dict[str, Any]:
    """A row for a call that must raise one of ``errors`` naming every word in ``names``.

    What ``build`` returns when it does not raise is shut down (if it can be).
    """
    start = time.perf_counter()
    try:
        built = build()
    except errors as err:
        seconds = time.perf_counter() - start
        message = str(err)
        missing = [name for name in names if name not in message]
        outcome = "wrong result" if missing else "clean error"
        detail = f"{type(err).__name__}: {message}" + (
            f" (does not name {missing})" if missing else ""
        )
        return row(fault, outcome, seconds, bound_s, detail=detail)
    except BaseException as err:  # noqa: BLE001 - another error is a confusing one
        return row(fault, "wrong result", time.perf_counter() - start, bound_s,
                   detail=f"{type(err).__name__}: {err}")  # fmt: skip
    seconds = time.perf_counter() - start
    if callable(getattr(built, "shutdown", None)):
        built.shutdown()
    return row(fault, "wrong result", seconds, bound_s, detail="no error")


def ledger_state(stats: dict[str, Any], received: int) -> str:
    """``"balanced"`` when the books add up, nothing is in flight and ``received`` was yielded."""
    led = stats["ledger"]
    ok = ledger_adds_up(led) and led["in_flight"] == 0 and led["yielded"] == received
    return "balanced" if ok else "unbalanced"


def ledger_text(stats: dict[str, Any]) -> str:
    """The ledger's counts, for a row's detail."""
    led = stats["ledger"]
    return " ".join(f"{k}={led[k]}" for k in ("asked", "collected", *LEDGER_PARTS, "unaccounted"))


def valid_frames(batch: Any) -> int:
    """The frames of ``batch`` its mask keeps (all of them without a mask)."""
    from tdscheme.keys import MASK_KEY

    if batch is None:
        return 0
    mask = batch.get(MASK_KEY, None)
    return batch.numel() if mask is None else int(mask.sum())


def collect_row(
    fault: str,
    bound_s: float,
    *,
    total_frames: int,
    check: Callable[[dict[str, Any]], str] = lambda stats: "",
    during: Callable[[Any, int], None] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Runs a RayCollector to ``total_frames``; survived when every frame came and ``check`` is happy.

    ``check(stats)`` returns what is wrong ("" when nothing); ``during(collector, i)``
    is called after the ``i``-th batch (to inject a fault).
    """
    from tdscheme import RayCollector
    from tdscheme.envs import make_faulty_env

    kwargs.setdefault("create_env_fn", make_faulty_env)
    with ray_lease():
        start = time.perf_counter()  # Ray is up: the row times the collector, not Ray's start
        try:
            with RayCollector(
                total_frames=total_frames, seed=0, batch_timeout_s=2 * bound_s, **kwargs
            ) as collector:
                received = 0
                for i, batch in enumerate(collector):
                    received += valid_frames(batch)
                    if during is not None:
                        during(collector, i)
                stats = collector.stats(timeout=5)
        except Exception as err:  # noqa: BLE001 - a row reports, it does not raise
            message = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            return row(fault, "wrong result", time.perf_counter() - start, bound_s, detail=message)
    seconds = time.perf_counter() - start
    if kwargs.get("replay_buffer") is not None:
        received = stats["frames"]  # written by the workers
    problems = check(stats)
    if received != total_frames:
        problems += f" {received} frames yielded, {total_frames} asked"
    outcome = "wrong result" if problems else "survived"
    detail = (problems.strip() + "; " if problems else "") + ledger_text(stats)
    return row(
        fault, outcome, seconds, bound_s, ledger=ledger_state(stats, received), detail=detail
    )


def outputs_on_exit(proc: subprocess.Popen, wait_s: float) -> tuple[Any, Any] | None:
    """``proc.communicate()``'s ``(stdout, stderr)`` once it exits within ``wait_s``; past that it
    is killed and ``None`` comes back (the row is a hang)."""
    try:
        return proc.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None


def damage(path: Path, how: str) -> None:
    """Damages a file: ``"truncated"`` keeps its first half, ``"garbage"`` zeroes it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else b"\x00" * len(data))


def run_rows_here(rows: Sequence[tuple[str, Callable[[], dict[str, Any]]]]) -> None:
    """Runs the rows whose name holds one of the command line's words, in this process.

    One JSON line per row; no word runs every row. For ``python fault_rows/NAME.py``.
    """
    wanted = sys.argv[1:] or [""]
    for name, fn in rows:
        if any(w in name for w in wanted):
            json_line({"row": name, **fn()})
