"""update_policy_weights_ checks what it pushes on the driver, before anything is sent."""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict

from tdscheme import RayCollector
from tdscheme.testing import bias_policy, make_env

SMALL = {"num_cpus": 0.5}
pendulum = functools.partial(make_env, "Pendulum-v1")


def _weights(**overrides: torch.Tensor) -> dict[str, torch.Tensor]:
    """A flat (torchrl-style) dict of bias_policy(3, 1)'s weights, with overrides."""
    weights = {k: v.clone() for k, v in bias_policy(3, 1).state_dict().items()}
    weights.update(overrides)
    return weights


@pytest.fixture(scope="module", params=["policy", "policy_factory"])
def collector(ray_module_clean, request):
    """One collector per policy form, shared by the module's tests: a rejected push changes
    nothing, and the one accepted push comes last (tests run in file order per param)."""
    factory = request.param == "policy_factory"
    collector = RayCollector(
        pendulum, None if factory else bias_policy(3, 1),
        policy_factory=(lambda: bias_policy(3, 1)) if factory else None,
        frames_per_batch=8, total_frames=-1, remote_configs=SMALL,
    )  # fmt: skip
    try:
        if factory:  # the first push sets the schema later pushes must match
            collector.update_policy_weights_(_weights())
        yield collector
    finally:
        collector.shutdown()


def _rejected(collector: RayCollector, weights, match: str) -> None:
    version = collector.policy_version
    with pytest.raises(ValueError, match=match) as error:
        collector.update_policy_weights_(weights)
    assert "policy_or_weights" in str(error.value)
    assert collector.policy_version == version  # nothing was sent


def test_wrong_shape_is_rejected_naming_the_key(collector):
    weights = _weights(**{"module.weight": torch.zeros(2, 3)})
    _rejected(collector, weights, r"'module.weight' shape \(2, 3\) \(expected \(1, 3\)\)")


def test_wrong_dtype_is_rejected_naming_the_key(collector):
    weights = _weights(**{"module.bias": torch.zeros(1, dtype=torch.float64)})
    _rejected(collector, weights, r"'module.bias' dtype float64 \(expected float32\)")


def test_missing_key_is_rejected_not_applied_in_part(collector):
    weights = _weights()
    del weights["module.bias"]
    _rejected(collector, TensorDict(weights).unflatten_keys("."), r"missing keys \['module.bias'\]")


def test_extra_key_is_rejected(collector):
    _rejected(collector, _weights(extra=torch.zeros(1)), r"unexpected keys \['extra'\]")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_never_pushed(collector, value):
    bias = torch.tensor([value])
    _rejected(collector, _weights(**{"module.bias": bias}), r"non-finite .* \['module.bias'\]")


def test_a_matching_push_still_reaches_every_worker(collector):
    version = collector.policy_version
    weights = _weights(**{"module.bias": torch.tensor([0.5])})
    collector.update_policy_weights_(weights)
    assert collector.policy_version == version + 1
    assert collector.wait_for_weights(timeout_s=60) == [version + 1]
    data = next(iter(collector))  # started after every worker acknowledged the push
    assert (data["action"] == 0.5).all()
