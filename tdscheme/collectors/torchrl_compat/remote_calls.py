"""torchrl RayCollector's calls on the remote collectors: ``map_fn`` and ``get_distant_attr``.

torchrl's ``RayCollector.map_fn(method_name, list_of_args, list_of_kwargs)`` calls
``cascade_execute(method_name, *args, **kwargs)`` on each remote collector (worker
``i`` gets ``list_of_args[i]`` and ``list_of_kwargs[i]``) and returns the list of
results, one per worker; ``get_distant_attr(attr)`` returns each remote collector's
attribute at the dotted path ``attr``. In tdscheme each worker actor wraps a torchrl
collector and forwards the call to it. Every call is bounded (``batch_timeout_s``) and
a remote error re-raises as :class:`~tdscheme.WorkerError` with the worker id and the
remote traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tdscheme.collectors.driver.stats import CollectorParts

__all__ = ["RemoteCalls", "per_worker_calls"]


def per_worker_calls(
    num_workers: int,
    list_of_args: Sequence[tuple] | None = None,
    list_of_kwargs: Sequence[Mapping[str, Any]] | None = None,
) -> list[tuple[tuple, dict[str, Any]]]:
    """One ``(args, kwargs)`` per worker, with torchrl's rules for what is left out.

    Args:
        num_workers: the number of workers.
        list_of_args: positional arguments per worker (``None``: none).
        list_of_kwargs: keyword arguments per worker (``None``: none).

    Raises:
        ValueError: a list whose length is not ``num_workers``.

    Example:
        >>> per_worker_calls(2)
        [((), {}), ((), {})]
        >>> per_worker_calls(2, list_of_kwargs=[{"seed": 1}, {"seed": 2}])
        [((), {'seed': 1}), ((), {'seed': 2})]
        >>> per_worker_calls(2, [(1,)])
        Traceback (most recent call last):
        ...
        ValueError: list_of_args has 1 entries; accepted: one per worker (2)
    """
    args_list = [()] * num_workers if list_of_args is None else list(list_of_args)
    kwargs_list = [{}] * num_workers if list_of_kwargs is None else list(list_of_kwargs)
    for name, values in (("list_of_args", args_list), ("list_of_kwargs", kwargs_list)):
        if len(values) != num_workers:
            raise ValueError(
                f"{name} has {len(values)} entries; accepted: one per worker ({num_workers})"
            )
    return [(tuple(a), dict(k)) for a, k in zip(args_list, kwargs_list, strict=True)]


class RemoteCalls:
    """``map_fn`` and ``get_distant_attr`` on every worker's torchrl collector.

    Args:
        parts: the collector's shared parts (settings, workers).
    """

    def __init__(self, parts: CollectorParts) -> None:
        self.parts = parts

    def map_fn(
        self,
        method_name: str,
        list_of_args: Sequence[tuple] | None = None,
        list_of_kwargs: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Any]:
        """Calls ``method_name`` on each worker's torchrl collector; returns the results in order.

        As torchrl's ``RayCollector.map_fn``: worker ``i`` runs its collector's
        ``cascade_execute(method_name, *list_of_args[i], **list_of_kwargs[i])``;
        ``method_name`` is a dotted path (``"env.reset"``, ``"set_seed"``), and a
        non-callable attribute is returned as it is. The call waits behind a batch
        the worker is collecting (the collector is not thread-safe). It goes around
        tdscheme's bookkeeping: pushing weights this way does not change
        ``policy_version``; use :meth:`update_policy_weights_` for that.

        Args:
            method_name: the collector method (or attribute) path.
            list_of_args: positional arguments, one tuple per worker (default: none).
            list_of_kwargs: keyword arguments, one dict per worker (default: none).

        Returns:
            One result per worker.

        Raises:
            ValueError: argument lists whose length is not ``num_collectors``.
            WorkerError: a collector raised (with the worker id and remote
                traceback), a worker died, or it did not answer in ``batch_timeout_s``.
        """
        parts = self.parts
        parts.check_open()
        calls = per_worker_calls(parts.num_workers, list_of_args, list_of_kwargs)
        return parts.pool.call_all(
            "cascade_execute",
            [(method_name, args, kwargs) for args, kwargs in calls],
            timeout_s=parts.config.batch_timeout_s,
        )

    def get_distant_attr(self, attr: str) -> list[Any]:
        """Each worker's torchrl collector attribute at the dotted path ``attr``, in order.

        As torchrl's ``RayCollector.get_distant_attr`` (e.g. ``"frames_per_batch"``,
        ``"env.batch_size"``, ``"_receiver_schemes['policy']"``).

        Raises:
            WorkerError: the attribute does not exist on a worker's collector (an
                ``AttributeError`` there), a worker died, or it did not answer in
                ``batch_timeout_s``.
        """
        parts = self.parts
        parts.check_open()
        return parts.pool.call_all(
            "get_distant_attr", [(attr,)] * parts.num_workers,
            timeout_s=parts.config.batch_timeout_s,
        )  # fmt: skip
