"""``collection.py``'s sections that move weights and batches across Ray: ``push`` and ``large``.

* ``push``: a ~1M-parameter MLP pushed to 2 collectors, idle and between batches;
* ``large``: 4x84x84 uint8 observations: frames/s, the wait for a ready batch, and the
  ``ray.get`` of one ready batch in three encodings.

What each measures is in ``collection.py``'s docstring.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import peers  # benchmarks/peers.py, next to this script (Ray workers see this directory too)
import ray
import torch
from collection_runs import (
    RAY_COLLECTORS,
    Measurement,
    Settings,
    failure,
    log,
    measure,
    running,
    wait_ready,
)
from harness import deadline, median_seconds, seconds, settle
from peers import mlp_policy, pixels_env
from report import Recorder

from tdscheme.envs import make_env

PIXELS = (4, 84, 84)


def section_push(rec: Recorder, s: Settings) -> None:
    torch.manual_seed(0)
    policy = mlp_policy(4, 2, hidden=1000, depth=2)
    params = sum(p.numel() for p in policy.parameters())
    config = f"{params:,} params ({params * 4 / 1e6:.1f} MB), 2 collectors, fpb=1000"
    log(f"push: the policy has {params:,} parameters")

    def bump() -> None:  # every push carries new values
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(1e-4)

    def push_tdscheme(collector: Any) -> None:
        # Blocks until every worker acknowledged the pushed version.
        collector.update_policy_weights_(policy)
        collector.wait_for_weights(timeout_s=60)

    pushes = {"tdscheme": push_tdscheme, "torchrl": lambda c: peers.torchrl_push(c, policy)}
    for impl, factory in RAY_COLLECTORS.items():
        push = pushes[impl]
        values: dict[str, float | None] = dict.fromkeys(
            ("push_first_s", "push_idle_median_s", "push_in_loop_median_s")
        )
        note = ""
        log(f"push | {impl}")
        make = functools.partial(
            factory,
            functools.partial(make_env, "CartPole-v1"),
            policy,
            frames_per_batch=1000,
            sync=False,
        )
        try:
            with running(make, s.timeout_s) as (collector, _):
                wait_ready(impl, collector, s.timeout_s)
                bump()
                values["push_first_s"] = seconds(push, collector)
                idle = []
                for _ in range(s.pushes):
                    bump()
                    idle.append(seconds(push, collector))
                values["push_idle_median_s"] = statistics.median(idle)
                if impl == "torchrl":
                    ok = peers.torchrl_weights_arrived(collector, policy)
                    note = "arrival verified" if ok else "WEIGHTS DID NOT ARRIVE"
                it = iter(collector)
                in_loop = []
                for _ in range(s.pushes):
                    next(it)
                    bump()
                    in_loop.append(seconds(push, collector))
                values["push_in_loop_median_s"] = statistics.median(in_loop)
        except Exception as err:  # noqa: BLE001
            note = failure(err)
        settle()
        for metric, value in values.items():
            rec.add(
                Measurement(
                    "push", impl, "CartPole-v1", "first-ready", metric, value, "s", config, note
                )
            )


def section_large(rec: Recorder, s: Settings) -> None:
    env_fn = functools.partial(pixels_env, "CartPole-v1", PIXELS)
    policy = peers.pixel_policy(PIXELS, 2)

    def ready_wait(collector: Any, it: Iterator[Any], fps: float) -> dict[str, float]:
        # Sleep ~2 worker-batch times so that the next batch is surely done, then time next().
        sleep_s = min(max(2 * 2 * 1000 / fps, 0.1), 5.0)
        waits = []
        for _ in range(s.ready_waits):
            time.sleep(sleep_s)
            waits.append(seconds(next, it))
        return {"ready_batch_wait_s": statistics.median(waits)}

    for impl, factory in RAY_COLLECTORS.items():
        make = functools.partial(factory, env_fn, policy, frames_per_batch=1000, sync=False)
        config = "4x84x84 uint8 obs, 2 collectors, fpb=1000"
        row = dict(
            section="large", impl=impl, env="CartPole pixels", order="first-ready", config=config
        )
        measure(rec, s, row, make, frames=s.frames // 2, after=ready_wait)
    transfer(rec, s, env_fn, policy)


def transfer(rec: Recorder, s: Settings, env_fn: Callable, policy: Any) -> None:
    """``ray.get`` of one ready 1000-frame pixel batch from an actor, in three encodings."""
    log("large | transfer of one batch")
    server = None
    try:
        with deadline(s.timeout_s):
            server = ray.remote(num_cpus=1)(BatchServer).remote(env_fn, policy, 1000)
            nbytes = ray.get(server.nbytes.remote(), timeout=s.timeout_s)
            has_codec = ray.get(server.has_codec.remote(), timeout=s.timeout_s)

            # Warm the object store first: the first few 56 MB results of a fresh Ray pay
            # page faults, which would otherwise land on whichever encoding runs first.
            for _ in range(3):
                for method in ("tensordict", "numpy_dict", "ping"):
                    ray.get(getattr(server, method).remote(), timeout=60)

            def get(method: str, decode: Callable[[Any], Any] = lambda x: x) -> float:
                call = getattr(server, method).remote
                return median_seconds(
                    lambda: decode(ray.get(call(), timeout=60)), reps=s.transfer_reps
                )

            codec: tuple[float | None, str] = (None, "n/a: no tdscheme.transport.TensorDictCodec")
            if has_codec:
                try:
                    from tdscheme.transport import TensorDictCodec

                    codec = (get("payload", TensorDictCodec().decode), "")
                except Exception as err:  # noqa: BLE001
                    codec = (None, failure(err))
            results = {
                "tdscheme codec": codec,
                "pickled TensorDict": (get("tensordict"), ""),
                "numpy dict (limit)": (get("numpy_dict"), ""),
                "empty call (floor)": (get("ping"), ""),
            }
        config = f"one 1000-frame batch, {nbytes / 1e6:.1f} MB"
        for impl, (value, note) in results.items():
            rec.add(
                Measurement(
                    "large", impl, "CartPole pixels", "-", "transfer_s", value, "s", config, note
                )
            )
    except Exception as err:  # noqa: BLE001
        failure(err)
    finally:
        if server is not None:
            ray.kill(server, no_restart=True)
    settle()


class BatchServer:
    """An actor holding one ready collector batch, to time its transfer across Ray alone.

    Args:
        create_env_fn: env factory (torchrl ``EnvBase``).
        policy: the policy used to collect the batch.
        frames_per_batch: frames in the batch.
    """

    def __init__(self, create_env_fn: Callable[[], Any], policy: Any, frames_per_batch: int):
        torch.set_num_threads(1)
        collector = peers.torchrl_local_collector(
            create_env_fn, policy, frames_per_batch=frames_per_batch
        )
        self.batch = next(iter(collector)).clone()
        collector.shutdown()
        self.codec: Any = None
        try:
            from tdscheme.transport import TensorDictCodec

            self.codec = TensorDictCodec()
        except ImportError:
            pass

    def ping(self) -> None:
        """An empty call: the fixed cost of one Ray round trip."""

    def nbytes(self) -> int:
        """Bytes of tensor data in the batch."""
        return int(sum(t.numel() * t.element_size() for t in self.batch.values(True, True)))

    def has_codec(self) -> bool:
        """Whether ``tdscheme.transport.TensorDictCodec`` is importable here."""
        return self.codec is not None

    def tensordict(self) -> Any:
        """The batch as a TensorDict (Ray pickles it)."""
        return self.batch

    def payload(self) -> Any:
        """The batch encoded by tdscheme's codec."""
        return self.codec.encode(self.batch)

    def numpy_dict(self) -> dict[str, np.ndarray]:
        """The batch as a flat dict of numpy arrays (Ray's zero-copy path; a limit)."""
        return {
            "/".join(key) if isinstance(key, tuple) else key: tensor.numpy()
            for key, tensor in self.batch.items(True, True)
        }
