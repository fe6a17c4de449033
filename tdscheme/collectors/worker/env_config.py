"""The collector actor's env-config calls: received while it collects, acknowledged by version.

A config is acknowledged once checked against the env where the env can tell without
applying it (its ``check_env_config``), else refused by this call's error; one the env
raises on only when applied is refused then and reported with the next batch
(``WorkerBatch.env_config_refused``), the worker going back to its last config.

The driver's half is :mod:`tdscheme.collectors.driver.env_config`; what the worker does
with a config (applied at each env copy's reset or at once, stamped on every frame) is
its rollout's :class:`~tdscheme.rollout.env_config.EnvConfigRunner`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ray

from tdscheme.rollout.env_config import EnvConfigPush

if TYPE_CHECKING:
    from tdscheme.rollout.worker_collector import WorkerCollector

__all__ = ["EnvConfigCalls"]


class EnvConfigCalls:
    """The env-config calls of :class:`~tdscheme.collectors.worker.actor.BaseCollectorWorker`.

    The host class has ``_rollout`` (its :class:`~tdscheme.rollout.worker_collector.
    WorkerCollector`); these calls hold no state of their own.
    """

    _rollout: WorkerCollector

    @ray.method(concurrency_group="control")
    def set_env_config(self, push: EnvConfigPush) -> int:
        """Receives an env config; answered while a batch is collected, as ``set_weights``.

        ``push.apply == "reset"``: each env copy runs it from its next reset (an episode
        under way finishes with the config it started with); ``"now"``: every copy runs it
        from its next step. Every episode that starts after this call returns runs it.

        Returns:
            ``push.version`` (the acknowledgement).

        Raises:
            ValueError: a version not newer than one received, or an env that offers no
                way to receive a config (named with its class).
            Exception: the env's ``check_env_config`` refused it (the env's own error).
        """
        return self._rollout.env_config.stage(push)

    @ray.method(concurrency_group="control")
    def env_config_versions(self) -> dict[str, Any]:
        """``{"received": newest version received, "running": the version of each env copy}``."""
        runner = self._rollout.env_config
        return {"received": runner.received_version, "running": runner.running_versions()}
