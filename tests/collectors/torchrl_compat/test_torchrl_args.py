"""torchrl's arguments about each worker's collector and its weight path (no Ray needed)."""

from __future__ import annotations

import functools

import pytest
from torchrl.envs import EnvCreator
from torchrl.weight_update import RayWeightSyncScheme, SharedMemWeightSyncScheme

from tdscheme.collectors import RayCollectorConfig
from tdscheme.collectors.settings.specs import worker_specs
from tdscheme.rollout.torchrl_names import Collector, MultiAsyncCollector, MultiSyncCollector
from tdscheme.testing import CountingPolicy, make_env

env = functools.partial(make_env, "CartPole-v1")


def pre_hook() -> None:
    pass


def post_hook(batch) -> None:
    pass


def specs(**kwargs):
    kwargs.setdefault("frames_per_batch", 10)
    kwargs.setdefault("num_collectors", 2)
    return worker_specs(RayCollectorConfig(env, **kwargs))


def test_forwards_trust_policy_no_cuda_sync_and_hooks_to_every_worker():
    for spec in specs(
        trust_policy=True, no_cuda_sync=True, pre_collect_hook=pre_hook, post_collect_hook=post_hook
    ):
        kwargs = spec.collector_kwargs
        assert kwargs["trust_policy"] is True and kwargs["no_cuda_sync"] is True
        assert kwargs["pre_collect_hook"] is pre_hook and kwargs["post_collect_hook"] is post_hook


def test_forwards_nothing_when_unset():
    kwargs = specs()[0].collector_kwargs
    assert not {"trust_policy", "no_cuda_sync", "pre_collect_hook", "post_collect_hook"} & set(
        kwargs
    )
    assert "weight_sync_schemes" not in kwargs


def test_collector_kwargs_win_over_forwarded_arguments():
    kwargs = specs(trust_policy=True, collector_kwargs={"trust_policy": False})[0].collector_kwargs
    assert kwargs["trust_policy"] is False


@pytest.mark.parametrize("collector_class", [MultiSyncCollector, MultiAsyncCollector])
def test_policy_factory_with_a_multiprocess_collector_gets_a_shared_memory_scheme(collector_class):
    made = specs(policy_factory=CountingPolicy, collector_class=collector_class)
    schemes = [spec.collector_kwargs["weight_sync_schemes"]["policy"] for spec in made]
    assert all(isinstance(s, SharedMemWeightSyncScheme) for s in schemes)
    assert schemes[0] is not schemes[1]  # one per worker, as torchrl builds them


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy_factory": CountingPolicy, "collector_class": Collector},
        {"policy": CountingPolicy(), "collector_class": MultiSyncCollector},
        {
            "policy_factory": CountingPolicy,
            "collector_class": MultiSyncCollector,
            "collector_kwargs": {"weight_sync_schemes": {}},
        },
    ],
    ids=["single-process collector", "policy object", "user's own schemes"],
)
def test_no_shared_memory_scheme_otherwise(kwargs):
    assert specs(**kwargs)[0].collector_kwargs.get("weight_sync_schemes", {}) == {}


def test_use_env_creator_wraps_the_env_factories():
    config = RayCollectorConfig(env, frames_per_batch=10, use_env_creator=True)
    assert all(isinstance(fn, EnvCreator) for fn in config.create_env_fn)
    wrapped = config.create_env_fn[0]
    again = RayCollectorConfig(wrapped, frames_per_batch=10, use_env_creator=True)
    assert again.create_env_fn[0] is wrapped  # an EnvCreator is kept as it is


def test_torchrl_default_weight_sync_scheme_is_accepted():
    RayCollectorConfig(
        env, frames_per_batch=10, weight_sync_schemes={"policy": RayWeightSyncScheme()}
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weight_updater": object()}, r"weight_updater=.* is invalid; accepted: None \(tdscheme"),
        (
            {"weight_sync_schemes": {"policy": SharedMemWeightSyncScheme()}},
            r"weight_sync_schemes=.* is invalid; accepted: None or \{'policy': RayWeightSyncScheme",
        ),
        (
            {
                "weight_sync_schemes": {
                    "policy": RayWeightSyncScheme(),
                    "value": RayWeightSyncScheme(),
                }
            },
            r"weight_sync_schemes=.* collector_kwargs=\{'weight_sync_schemes'",
        ),
        ({"weight_recv_schemes": {"policy": RayWeightSyncScheme()}}, r"weight_recv_schemes=.*None"),
    ],
)
def test_weight_arguments_tdscheme_cannot_honour_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RayCollectorConfig(env, frames_per_batch=10, **kwargs)
