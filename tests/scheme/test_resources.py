"""A run's CPUs added up before any actor starts (tdscheme.scheme.resources), in process."""

from __future__ import annotations

import logging

import pytest

from tdscheme.errors import PlacementError
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.resources import cpu_asks, fit_cpus


def test_what_fits_is_left_as_it_is():
    config = SchemeConfig(num_collectors=2)
    assert fit_cpus(config, cluster_cpus=2.0) is config
    given = SchemeConfig(num_collectors=2, num_learners=2, collector_resources={"num_cpus": 0.5},
                         learner_resources={"num_cpus": 0.5})  # fmt: skip
    assert fit_cpus(given, cluster_cpus=2.0) is given


def test_a_group_beside_the_collectors_shares_the_cpus_and_says_so(caplog):
    """`tdscheme train ppo-cartpole --num-learners 2` on 2 cores: 4 CPUs asked of 2."""
    with caplog.at_level(logging.WARNING, logger="tdscheme.scheme.resources"):
        shared = fit_cpus(SchemeConfig(num_collectors=2, num_learners=2), cluster_cpus=2.0)
    assert shared.collector_resources == {"num_cpus": 0.5}
    assert shared.learner_resources == {"num_cpus": 0.5}
    (record,) = caplog.records
    assert record.getMessage() == (
        "2 collectors x 1 + 2 learner ranks x 1 = 4 CPUs asked, this Ray has 2: each takes "
        "0.5 CPU (set collector_resources / learner_resources to choose)"
    )
    three = fit_cpus(SchemeConfig(num_collectors=1, num_learners=2), cluster_cpus=2.0)
    assert three.collector_resources == three.learner_resources == {"num_cpus": 0.66}


def test_the_users_own_resources_that_cannot_fit_are_refused_with_what_fits():
    config = SchemeConfig(num_collectors=2, num_learners=2, learner_resources={"num_cpus": 1})
    with pytest.raises(PlacementError) as err:
        fit_cpus(config, cluster_cpus=2.0)
    assert str(err.value) == (
        "2 collectors x 1 + 2 learner ranks x 1 = 4 CPUs asked, the cluster has 2; these "
        "settings fit: --collector-resources '{\"num_cpus\": 0.5}' --learner-resources "
        "'{\"num_cpus\": 0.5}' (or placement='wait' for a cluster that grows)"
    )
    waiting = SchemeConfig(num_collectors=2, num_learners=2, learner_resources={"num_cpus": 1},
                           placement="wait")  # fmt: skip
    assert fit_cpus(waiting, cluster_cpus=2.0) is waiting


def test_every_kind_of_actor_is_counted():
    asks = cpu_asks(SchemeConfig(num_grad_workers=2, grad_worker_resources={"num_cpus": 0.5}))
    assert [(a.role, a.count, a.cpus, a.given) for a in asks] == [
        ("gradient workers", 2, 0.5, True)
    ]
    per = cpu_asks(SchemeConfig(num_collectors=2, collector_resources=[{"num_cpus": 1},
                                                                      {"num_cpus": 0}]))  # fmt: skip
    assert [(a.role, a.count, a.cpus) for a in per] == [("collectors", 2, 0.5)]
    with pytest.raises(PlacementError, match="use fewer actors"):
        fit_cpus(SchemeConfig(num_collectors=300), cluster_cpus=2.0)
