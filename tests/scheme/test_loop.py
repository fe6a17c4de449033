"""The TrainingLoop protocol, the push interval and the state layouts, without Ray."""

from __future__ import annotations

import inspect

import pytest

from tdscheme.scheme.grad_worker_loop import GradWorkerLoop
from tdscheme.scheme.loop import NoReplayBuffer, PushInterval, TrainingLoop
from tdscheme.scheme.off_policy_loop import OffPolicyLoop
from tdscheme.scheme.on_policy_loop import OnPolicyLoop
from tdscheme.scheme.state import check_state, upgrade_state

LOOPS = [OnPolicyLoop, GradWorkerLoop, OffPolicyLoop]

METHODS = sorted(n for n, v in vars(TrainingLoop).items() if inspect.isfunction(v) and n[0] != "_")
ATTRIBUTES = sorted(inspect.get_annotations(TrainingLoop))


def declared(cls: type) -> set[str]:
    """Names a class declares: annotated or assigned, on it or a base."""
    names = set(dir(cls))
    for base in cls.__mro__:
        names.update(inspect.get_annotations(base))
    return names


def test_the_protocol_names_the_whole_surface_the_scheme_calls():
    assert METHODS == ["dump_buffer", "load_buffer", "load_state_dict", "paused",
                       "push_weights", "set_env_config", "set_seed", "shutdown", "state_dict",
                       "step", "wait_for_env_config"]  # fmt: skip
    assert ATTRIBUTES == [
        "collector", "coordinator", "episodes", "frame_limit", "frames_pending", "replay_buffer",
        "state_key",
    ]  # fmt: skip


@pytest.mark.parametrize("cls", LOOPS, ids=lambda c: c.__name__)
def test_each_loop_implements_every_protocol_member(cls):
    missing = [name for name in ATTRIBUTES if name not in declared(cls)]
    assert not missing, f"{cls.__name__} lacks {missing}"
    for name in METHODS:
        method = getattr(cls, name, None)
        assert inspect.isfunction(method), f"{cls.__name__}.{name} is not a method"
        expected = list(inspect.signature(getattr(TrainingLoop, name)).parameters)
        assert list(inspect.signature(method).parameters) == expected, (cls.__name__, name)
    assert cls.state_key in ("collector", "grad_workers", "replay")


def test_the_missing_parts_say_so_through_the_surface():
    assert OnPolicyLoop.coordinator is None and OffPolicyLoop.coordinator is None
    assert GradWorkerLoop.collector is None
    for cls in (OnPolicyLoop, GradWorkerLoop):
        assert cls.replay_buffer is None
    on_policy = NoReplayBuffer()
    with on_policy.paused():
        pass
    with pytest.raises(RuntimeError, match="load_replay_buffer needs a replay buffer"):
        on_policy.load_buffer("somewhere")


def test_push_interval_counts_pushes_and_restores():
    interval = PushInterval(2)
    assert [interval.count(n) for n in (1, 0, 1)] == [False, False, True]
    interval.pushed()
    assert not interval.count(1)
    restored = PushInterval(2)
    restored.load_state_dict(interval.state_dict())
    assert restored.updates_since_push == 1 and restored.count(1)
    with pytest.raises(ValueError, match="weight_push_interval=0 is invalid"):
        PushInterval(0)


COMMON = {"frames": 640, "iterations": 5, "learner": {"version": 5}}


def test_the_on_policy_loops_old_layout_is_the_new_one():
    old = {**COMMON, "updates_since_push": 3, "collector": {"frames": 640}}
    new = upgrade_state(old)
    assert new == old
    check_state(new, state_key="collector", num_grad_workers=0)
    interval = PushInterval(4)
    interval.load_state_dict(new)
    assert interval.updates_since_push == 3
    older = {**COMMON, "collector": {"frames": 640}}  # saved before the counter was
    interval.load_state_dict(upgrade_state(older))
    assert interval.updates_since_push == 0


def test_the_offpolicy_drivers_old_layout_moves_its_counter_to_the_top_level():
    replay = {"frames_collected": 640, "updates": 12, "update_credit": 0.25}
    old = {**COMMON, "replay": {**replay, "updates_since_push": 2}, "collector": {}}
    new = upgrade_state(old)
    assert new == {**COMMON, "updates_since_push": 2, "replay": replay, "collector": {}}
    assert old["replay"]["updates_since_push"] == 2  # the caller's state is left as it was
    check_state(new, state_key="replay", num_grad_workers=0)
    interval = PushInterval(4)
    interval.load_state_dict(new)
    assert interval.updates_since_push == 2


def test_a_state_of_another_driver_is_named():
    state = {**COMMON, "grad_workers": {}}
    with pytest.raises(ValueError, match=r"missing \['collector'\]; it was saved by a scheme with"):
        check_state(state, state_key="collector", num_grad_workers=0)
