"""The one place that starts or joins Ray.

tdscheme follows ``ray.init``'s rule for the address: it joins the cluster given
(``address``), or, with none, the one ``RAY_ADDRESS`` names or the last ``ray start``
on this machine recorded; only when there is none (or with ``address="local"``) does it
start a local Ray (no dashboard, the machine's CPU count). It never shuts down a Ray it
did not start. The local Ray it starts has its worker
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

import contextlib
import inspect
import logging
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import ray

from tdscheme.log_levels import driver_log_level
from tdscheme.runtime import interrupts
from tdscheme.validation import invalid

logger = logging.getLogger(__name__)

#: Modules a worker process of a tdscheme-started local Ray imports when it starts
#: (Ray's ``preload_python_modules`` system setting): what a collector actor needs.
WORKER_PRELOAD_MODULES = ("tdscheme.collectors.worker.actor",)


class _StartedRay:
    """Process-wide count of the leases on a Ray that tdscheme started itself."""

    lock = threading.Lock()
    leases = 0


def local_ray_config() -> dict[str, Any]:
    """The ``ray.init`` arguments tdscheme uses when it starts Ray itself.

    Returns:
        A fresh dict: a new local instance (``address="local"``: used once
        tdscheme found no cluster to join, so that Ray starts one even if a
        ``ray start`` appeared meanwhile), no dashboard, one CPU per core of this machine, Ray's driver
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


def existing_cluster_address(temp_dir: str | None = None) -> str | None:
    """The Ray cluster ``ray.init()`` with no address would join, or ``None`` (it would start one).

    Ray's rule (``ray.init``'s ``address`` docs): ``RAY_ADDRESS`` when set, else the
    cluster the last ``ray start`` on this machine recorded (``ray_current_cluster``
    in Ray's temp directory: ``$RAY_TMPDIR/ray``, else ``$TMPDIR/ray``, else
    ``/tmp/ray``, or ``temp_dir``), else none.

    Args:
        temp_dir: Ray's temp directory (``ray.init``'s ``_temp_dir``), if not the default.
    """
    try:  # Ray's own function for this rule
        from ray._private.services import get_ray_address_from_environment
    except ImportError:  # pragma: no cover - a Ray that moved it: the variable only
        return os.environ.get("RAY_ADDRESS") or None
    return get_ray_address_from_environment(None, temp_dir)


def check_init_keys(config: Mapping[str, Any]) -> None:
    """Raises for a key that is not a ``ray.init`` keyword argument.

    Named arguments are checked against ``ray.init``'s signature; ``_``-prefixed
    ones (``_temp_dir``, ``_system_config``, ...) and the extra arguments of a Ray
    Client address (``ray://...``) are Ray's to check (:meth:`RayLease.acquire`
    turns Ray's error into the same message).

    Raises:
        ValueError: an unknown key, named with the accepted ones.

    Example:
        >>> check_init_keys({"num_cpus": 2, "labels": {"zone": "a"}, "_temp_dir": "/tmp/r"})
        >>> check_init_keys({"num_cpu": 2})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ray_init_config['num_cpu']=2 is invalid; accepted: ray.init's keyword ...
    """
    address = config.get("address")
    if isinstance(address, str) and address.startswith("ray://"):
        return
    accepted = _ray_init_parameters()
    for key, value in config.items():
        if not (isinstance(key, str) and (key.startswith("_") or key in accepted)):
            raise _unknown_key(key, value)


def _ray_init_parameters() -> list[str]:
    params = inspect.signature(ray.init).parameters.values()
    return [p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]


def _unknown_key(key: Any, value: Any) -> ValueError:
    return invalid(
        f"ray_init_config[{key!r}]", value,
        f"ray.init's keyword arguments ({', '.join(_ray_init_parameters())}, and Ray's "
        f"_-prefixed ones such as _temp_dir, _system_config)",
    )  # fmt: skip


def _init_kwargs(ray_init_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``ray.init`` arguments for ``ray_init_config``, with Ray's rule for the address.

    Without an address (or with ``None``), Ray's rule decides, as ``ray.init`` does:
    an existing cluster (:func:`existing_cluster_address`) is joined with the given
    arguments only; otherwise tdscheme starts a local Ray with
    :func:`local_ray_config`, the given arguments winning. ``"local"`` always starts
    one; any other address (``"auto"``, ``"host:port"``, ``"ray://..."``) is joined.
    ``None`` values are left out (torchrl's default config is full of them).
    """
    kwargs = {k: v for k, v in _checked(ray_init_config).items() if v is not None}
    address = kwargs.get("address")
    if address == "local" or (
        address is None and existing_cluster_address(kwargs.get("_temp_dir")) is None
    ):
        defaults = local_ray_config()
        defaults.update(kwargs)
        kwargs = defaults
    kwargs.setdefault("logging_level", driver_log_level())
    return kwargs


def _checked(ray_init_config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if ray_init_config is None:
        return {}
    if not isinstance(ray_init_config, Mapping):
        raise TypeError(
            f"ray_init_config must be a dict of ray.init arguments or None, got "
            f"{type(ray_init_config).__name__}: {ray_init_config!r}"
        )
    check_init_keys(ray_init_config)
    return ray_init_config


def _ray_init(kwargs: Mapping[str, Any]) -> None:
    """``ray.init(**kwargs)``, with Ray's unknown-keyword error naming the key as tdscheme does."""
    try:
        ray.init(**kwargs)
    except RuntimeError as err:
        prefix = "Unknown keyword argument(s): "
        if not str(err).startswith(prefix):
            raise
        key = str(err)[len(prefix) :].split(",")[0].strip()
        raise _unknown_key(key, kwargs.get(key)) from err


@contextlib.contextmanager
def _handlers_kept() -> Iterator[None]:
    """Keeps tdscheme's SIGTERM handler in place through ``ray.init`` (when it is installed).

    ``ray.init`` sets a SIGTERM handler that raises ``SystemExit`` wherever the signal
    lands. Landing in logging's after-fork hook (Ray forks its processes), the exit is
    swallowed with logging's lock held, and the command hangs on the next log call:
    the fault row "SIGTERM while Ray starts" hung about 1 run in 12. With tdscheme's
    handlers installed (the command), Ray's is not set: the signal is recorded as a stop
    request, and :meth:`RayLease.acquire` stops once ``ray.init`` returns.
    """
    utils = getattr(ray._private, "utils", None)
    set_handler = getattr(utils, "set_sigterm_handler", None)
    if not interrupts.installed() or set_handler is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = set_handler


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
            ray_init_config: any ``ray.init`` keyword arguments. Without an
                ``"address"`` (``None`` included), Ray's rule applies, as in
                ``ray.init``: join the cluster of ``RAY_ADDRESS`` or of the last
                ``ray start`` on this machine, else start a local Ray (no
                dashboard, one CPU per core; the given arguments win). ``"local"``
                always starts one; ``"auto"``, ``"host:port"`` or ``"ray://..."``
                joins that cluster. Ignored (but checked) when Ray is already
                initialized in this process.

        Returns:
            A lease; call :meth:`release` when done. Releasing it never stops a
            cluster tdscheme joined (``ray.shutdown()`` only disconnects this driver).

        Raises:
            TypeError: ``ray_init_config`` is not a dict.
            ValueError: a key that is not a ``ray.init`` keyword argument (named).
        """
        _checked(ray_init_config)
        with _StartedRay.lock:
            if ray.is_initialized():
                if _StartedRay.leases > 0:
                    _StartedRay.leases += 1
                    return cls(started=True, config=ray_init_config)
                return cls(started=False, config=ray_init_config)
            kwargs = _init_kwargs(ray_init_config)
            logger.info("starting Ray with %s", kwargs)
            if kwargs.get("address") == "local":
                select_token_auth()
            try:
                with _handlers_kept():
                    _ray_init(kwargs)
            except SystemExit as err:  # Ray's own SIGTERM handler ran during ray.init
                if err.code != signal.SIGTERM or not interrupts.installed():
                    raise
                interrupts.request(signal.SIGTERM)
            interrupts.reinstall()  # ray.init installs its own SIGTERM handler
            if interrupts.installed() and interrupts.stop_requested() == "SIGTERM":
                ray.shutdown()  # what ray.init had started
                raise KeyboardInterrupt("SIGTERM while Ray was starting")
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
