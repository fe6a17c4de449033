"""The one place that starts or joins Ray.

tdscheme starts a local Ray (no dashboard, the machine's CPU count) only when
none is running, joins an existing cluster when given an address, and never
shuts down a Ray it did not start. The local Ray it starts has its worker
processes import torch, tensordict and torchrl (:data:`WORKER_PRELOAD_MODULES`)
as soon as they are spawned, before any actor is placed on them: that import
is most of a collector actor's start-up (seconds), and this way it overlaps
with the driver's own imports and set-up instead of following them. Owners of actors (collectors, schemes) hold a
:class:`RayLease` and release it in their ``shutdown()``; the Ray that tdscheme
started goes down when the last lease is released.

Ray's records on the driver are logged at :func:`tdscheme.log_levels.driver_log_level`
(WARNING by default) unless ``ray_init_config`` sets ``logging_level``. A local Ray
that tdscheme starts uses token authentication, as Ray (>= 2.52) does by default
for a new local instance; tdscheme selects it explicitly (see
:func:`select_token_auth`), which is what keeps Ray from warning that it chose it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import ray

from tdscheme.log_levels import driver_log_level

logger = logging.getLogger(__name__)

_ALLOWED_INIT_KEYS = frozenset(
    {
        "address",
        "num_cpus",
        "num_gpus",
        "resources",
        "object_store_memory",
        "local_mode",
        "ignore_reinit_error",
        "include_dashboard",
        "dashboard_host",
        "dashboard_port",
        "job_config",
        "configure_logging",
        "logging_level",
        "logging_format",
        "log_to_driver",
        "namespace",
        "runtime_env",
        "_temp_dir",
        "_system_config",
    }
)


#: Modules a worker process of a tdscheme-started local Ray imports when it starts
#: (Ray's ``preload_python_modules`` system setting): what a collector actor needs.
WORKER_PRELOAD_MODULES = ("tdscheme.collectors.worker",)


class _StartedRay:
    """Process-wide count of the leases on a Ray that tdscheme started itself."""

    lock = threading.Lock()
    leases = 0


def local_ray_config() -> dict[str, Any]:
    """The ``ray.init`` arguments tdscheme uses when it starts Ray itself.

    Returns:
        A fresh dict: a new local instance (``address="local"``, so that a
        ``ray start`` cluster elsewhere on the machine is not joined by
        accident), no dashboard, one CPU per core of this machine, Ray's driver
        logs at :func:`~tdscheme.log_levels.driver_log_level`, and worker
        processes that import :data:`WORKER_PRELOAD_MODULES` when they start.
    """
    return {
        "address": "local",
        "num_cpus": os.cpu_count() or 1,
        "include_dashboard": False,
        "logging_level": driver_log_level(),
        "_system_config": {"preload_python_modules": list(WORKER_PRELOAD_MODULES)},
    }


def select_token_auth() -> bool:
    """Selects Ray's token authentication for the new local Ray this process is about to start.

    Ray >= 2.52 turns token authentication on for a new local instance when
    ``RAY_AUTH_MODE`` is unset, and warns that it did ("Token authentication is
    enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out").
    Selecting the same mode explicitly (Ray's own step: ``RAY_AUTH_MODE=token``
    in this process's environment, inherited by the Ray processes it starts, and
    Ray's cached config refreshed) gives the same cluster without the warning.
    Security is unchanged: the mode is the one Ray would pick. A ``RAY_AUTH_MODE``
    the user set is kept. :meth:`RayLease.acquire` calls this only before it
    starts a new local Ray, never when it joins a cluster.

    Returns:
        True when token authentication was selected here; False when
        ``RAY_AUTH_MODE`` is already set or this Ray has no token authentication
        (Ray then decides, and may warn).

    Example:
        >>> select_token_auth()  # doctest: +SKIP
        True
        >>> os.environ["RAY_AUTH_MODE"]  # doctest: +SKIP
        'token'
    """
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return False
    try:  # Ray's own function for this step (sets the variable, refreshes its config)
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:
        return False
    _enable_token_auth()
    return True


def _init_kwargs(ray_init_config: Mapping[str, Any] | None) -> dict[str, Any]:
    if ray_init_config is None:
        return local_ray_config()
    if not isinstance(ray_init_config, Mapping):
        raise TypeError(
            f"ray_init_config must be a dict of ray.init arguments or None, got "
            f"{type(ray_init_config).__name__}: {ray_init_config!r}"
        )
    unknown = set(ray_init_config) - _ALLOWED_INIT_KEYS
    if unknown:
        raise ValueError(
            f"ray_init_config has unknown keys {sorted(unknown)}; accepted keys: "
            f"{sorted(_ALLOWED_INIT_KEYS)}"
        )
    kwargs = {k: v for k, v in ray_init_config.items() if v is not None}
    if kwargs.get("address") in (None, "local"):
        defaults = local_ray_config()
        defaults.update(kwargs)
        kwargs = defaults
    kwargs.setdefault("logging_level", driver_log_level())
    return kwargs


class RayLease:
    """A handle on the running Ray, started or joined by :meth:`acquire`.

    Example:
        >>> lease = RayLease.acquire({"address": None, "num_cpus": 2})  # doctest: +SKIP
        >>> lease.release()  # doctest: +SKIP
    """

    def __init__(self, started: bool, config: Mapping[str, Any] | None = None) -> None:
        #: True when tdscheme called ``ray.init`` (started a local Ray or joined a cluster).
        self.started = started
        #: The ``ray_init_config`` the lease was acquired with (``None``: the defaults).
        self.config = config
        self._released = False

    @classmethod
    def acquire(cls, ray_init_config: Mapping[str, Any] | None = None) -> RayLease:
        """Uses the running Ray, or starts/joins one from ``ray_init_config``.

        Args:
            ray_init_config: ``ray.init`` keyword arguments. ``None`` starts a
                local Ray with no dashboard and one CPU per core. With an
                ``"address"`` key, joins that cluster. Ignored when Ray is
                already initialized in this process.

        Returns:
            A lease; call :meth:`release` when done.

        Raises:
            TypeError, ValueError: ``ray_init_config`` is not a dict of
                ``ray.init`` arguments.
        """
        kwargs = _init_kwargs(ray_init_config)
        with _StartedRay.lock:
            if ray.is_initialized():
                if _StartedRay.leases > 0:
                    _StartedRay.leases += 1
                    return cls(started=True, config=ray_init_config)
                return cls(started=False, config=ray_init_config)
            logger.info("starting Ray with %s", kwargs)
            if kwargs.get("address") == "local":
                select_token_auth()
            ray.init(**kwargs)
            # A local Ray we started is stopped by the last release; for a
            # cluster we joined, ray.shutdown() only disconnects this driver.
            _StartedRay.leases += 1
            return cls(started=True, config=ray_init_config)

    def release(self, *, shutdown_ray: bool = False) -> None:
        """Gives the lease back; shuts Ray down if tdscheme started it and this was the last lease.

        Idempotent.

        Args:
            shutdown_ray: shut Ray down now, even one tdscheme did not start or
                that other leases hold (torchrl's ``shutdown(shutdown_ray=True)``).
        """
        if self._released:
            return
        self._released = True
        with _StartedRay.lock:
            if self.started:
                _StartedRay.leases = max(0, _StartedRay.leases - 1)
            last = self.started and _StartedRay.leases == 0
            if (last or shutdown_ray) and ray.is_initialized():
                logger.info("shutting down Ray (%s)", "asked to" if shutdown_ray else "last lease")
                _StartedRay.leases = 0
                ray.shutdown()
