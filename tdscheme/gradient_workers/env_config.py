"""Env configs for gradient workers: versioned, one ``ray.put`` per push, every worker's ack waited for.

The driver's side (a coordinator owns one :class:`GradientEnvConfigs`): as for collector
workers (:mod:`tdscheme.collectors.driver.env_config`), each push gets the next version,
each worker acknowledges it (its ``set_env_config`` is served in its ``control`` group,
while it computes), every collector of the worker applies it per env copy at its reset
(or at once) and stamps its frames, and a rebuilt worker starts with the newest config.
A push here waits for the acknowledgements (a gradient worker answers between steps of
its rollout), so an error (a worker whose env takes no config, or whose env's
``check_env_config`` raises) is raised by the push, and the workers that refused it keep
their previous config: a rebuilt worker starts with it, and :meth:`GradientEnvConfigs.
acked_versions` and the checkpoint hold it. A config the env raises on only when its
rollout applies it is logged by the worker, which goes back to its last config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tdscheme.errors import GradientWorkerError
from tdscheme.rollout.env_config import EnvConfigPush, state_version
from tdscheme.runtime.objects import put

__all__ = ["GradientEnvConfigs"]


class GradientEnvConfigs:
    """The env configs of a gradient-worker pool.

    Args:
        pool: the :class:`~tdscheme.gradient_workers.pool.GradientWorkerPool`.
        timeout_s: the longest a push waits for the acknowledgements.
    """

    def __init__(self, pool: Any, *, timeout_s: float) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self.version = 0
        self._pushes: dict[int, tuple[EnvConfigPush, Any]] = {}  # worker -> newest (push, ref)

    def push(self, push: EnvConfigPush, worker_ids: list[int]) -> None:
        """Sends ``push`` (checked, version :attr:`version` + 1) to ``worker_ids`` and waits.

        What ``GradientCoordinator.set_env_config`` does after its checks
        (:func:`~tdscheme.rollout.env_config_push.set_env_config_method`).

        Raises:
            GradientWorkerError: a worker refused it (named), or did not acknowledge it
                within ``timeout_s``.
        """
        ref = put(push, what=f"the env config {push.config!r} for gradient workers {worker_ids}")
        self.version = push.version
        self._send(push, ref, worker_ids)

    def _send(self, push: EnvConfigPush, ref: Any, ids: Sequence[int]) -> None:
        before = {worker_id: self._pushes.get(worker_id) for worker_id in ids}
        for worker_id in ids:  # before the call: a worker that dies in it restarts with it
            self._pushes[worker_id] = (push, ref)
        refs = [self.pool.submit(worker_id, "set_env_config", ref) for worker_id in ids]
        ready = self.pool.wait(refs, num_returns=len(refs), timeout_s=self.timeout_s)
        if len(ready) < len(refs):
            silent = [self.pool.owner(r) for r in refs if r not in ready]
            self.pool.forget(refs)
            raise GradientWorkerError(
                silent[0], f"workers {silent} did not acknowledge env config version "
                f"{push.version} in {self.timeout_s} s",
            )  # fmt: skip
        refused: list[GradientWorkerError] = []
        for worker_id, r in zip(ids, refs, strict=True):
            try:  # a death: its restart starts with this config
                self.pool.outcome(r)
            except GradientWorkerError as err:  # it keeps what it ran; a rebuilt worker too
                refused.append(err)
                if before[worker_id] is None:
                    self._pushes.pop(worker_id, None)
                else:
                    self._pushes[worker_id] = before[worker_id]
        if refused:
            err, others = refused[0], [e.worker_id for e in refused[1:]]
            also = f" (workers {others} too)" if others else ""
            raise GradientWorkerError(
                err.worker_id, f"refused env config version {push.version}{also}: {err.message}",
                err.remote_traceback, method=err.method, remote_type=err.remote_type,
            )  # fmt: skip

    def start_kwargs(self, worker_id: int) -> dict[str, Any]:
        """The constructor argument of a rebuilt worker: the newest config pushed to it."""
        pushed = self._pushes.get(worker_id)
        return {} if pushed is None else {"env_config": pushed[1]}

    def acked_versions(self) -> list[int]:
        """The env-config version each worker runs (pushes are acknowledged before they return)."""
        return [
            self._pushes[i][0].version if i in self._pushes else 0 for i in range(len(self.pool))
        ]

    def state_dict(self) -> dict[str, Any]:
        """``{"version", "workers": {id: {"config", "version", "apply_env_config"}}}``."""
        workers = {i: push.state() for i, (push, _) in self._pushes.items()}
        return {"version": self.version, "workers": workers}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`state_dict`: each worker gets its config again, applied at once.

        Raises:
            ValueError: the state's version is older than one this pool pushed.
            ImportError: a config's class or ``apply_env_config`` cannot be imported.
        """
        if state is None:
            return
        version = state_version(state, self.version, "these gradient workers")
        self.version = version
        for worker_id, entry in dict(state["workers"]).items():
            push = EnvConfigPush.from_state(entry)  # decoded here: it imports the driver's classes
            if self._pushes.get(int(worker_id), (None,))[0] == push:
                continue
            ref = put(push, what=f"the env config of gradient worker {worker_id}")
            self._send(push, ref, [int(worker_id)])
