"""AsyncLoop: IMPALA / APPO: the learner takes first-ready batches from a queue it paces.

One of the Scheme's training loops (``SchemeConfig(async_learner=True)``), the
actor-learner architecture of IMPALA (Espeholt et al. 2018): collector workers run
their policy continuously and the learner trains on each worker's batch as soon as
it is ready, never waiting for the slowest worker nor for its own fresh weights to
reach the workers. The policy that collected a batch may be a few updates old; the
learner corrects for that with V-trace (torchrl's ``VTrace`` estimator over the
behaviour log-probs each frame carries: see :func:`~tdscheme.presets.impala_learner`).

The queue is the collector's requests: each worker has at most
``prefetch_batches`` requests in flight (the batches it collects ahead of the
learner, 2 by default). A worker whose requests are done waits until the learner
takes one of its batches, so a slow learner holds the workers (backpressure) and
the object store holds at most ``num_collectors x prefetch_batches`` batches,
whatever the speeds. Weights are pushed every ``weight_push_interval`` updates;
a batch collected with weights more than ``max_policy_lag`` pushes old is dropped
when it reaches the learner and counted in the collector's frame ledger
(``frames_dropped``). Each step logs the lag of the frames it trained on as a
distribution (``policy_lag/min``, ``/mean``, ``/max`` and the histogram
``policy_lag/hist/<lag>``, drawn by ``tdscheme plot``).
"""

from __future__ import annotations

from tensordict import TensorDictBase

from tdscheme.scheme.metrics import lag_distribution
from tdscheme.scheme.on_policy_loop import OnPolicyLoop

__all__ = ["LAG_BUCKETS_UNBOUNDED", "AsyncLoop"]

#: Histogram buckets of the policy lag without ``max_policy_lag``: 0 .. 6 and "7+".
LAG_BUCKETS_UNBOUNDED = 8


class AsyncLoop(OnPolicyLoop):
    """Learner-paced first-ready batches -> learn -> push every ``weight_push_interval`` updates.

    The :class:`~tdscheme.scheme.on_policy_loop.OnPolicyLoop`'s surface (state,
    seeding, shutdown are the same) with the asynchronous settings checked and the
    lag reported as a distribution.

    Args:
        config: the Scheme's settings (``async_learner=True``, so ``sync=False``).
        env_factory: builds one collector worker's env.
        learner: the driver's Learner, or a learner group over it (``num_learners > 0``);
            its ``policy`` runs in the workers.

    Raises:
        ValueError: ``config.async_learner`` is False.
    """

    async_learner = True

    @property
    def lag_buckets(self) -> int:
        """Histogram buckets of the lag: one per value a bounded lag may take ("+" holds the
        largest), :data:`LAG_BUCKETS_UNBOUNDED` without ``max_policy_lag``."""
        lag = self.config.max_policy_lag
        return LAG_BUCKETS_UNBOUNDED if lag is None else lag + 1

    def _lag_metrics(self, batch: TensorDictBase, newest_version: int) -> dict[str, float]:
        return lag_distribution(batch, newest_version, buckets=self.lag_buckets)
