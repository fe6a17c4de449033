"""Env configs and apply_env_config callables as a checkpoint holds them: back equal, or refused.

In-process: each value goes through a real checkpoint file (``save_checkpoint``, read back
with ``torch.load(weights_only=True)``) and must come back equal and of the same type.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import typing

import numpy as np
import pytest
import torch

from tdscheme.engine.checkpoint import load_checkpoint, save_checkpoint
from tdscheme.envs.env_config import TaskDistribution
from tdscheme.rollout.env_config_state import decode_env_config, encode_env_config
from tdscheme.testing import EchoConfigEnv, EchoLevel, apply_echo_config


class Point(typing.NamedTuple):
    x: float
    y: float


@dataclasses.dataclass
class Derived:
    """A field ``__init__`` does not take: it comes back as saved, not as recomputed."""

    base: float
    doubled: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.doubled = 2 * self.base


def derived_then_changed() -> Derived:
    value = Derived(1.5)
    value.doubled = 7.0
    return value


VALUES = {
    "dataclass": EchoLevel(3.0, note="hard"),
    "nested": {"levels": [EchoLevel(1.0), EchoLevel(2.0)], "mix": (Point(1.0, 2.0), None, True)},
    "task distribution": TaskDistribution([EchoLevel(1.0), {"level": 2.0}], probs=[1, 2]),
    "numpy": {"g": np.float32(9.5), "ids": np.arange(3, dtype=np.int16), "on": np.bool_(True)},
    "ordered dict and tensor": collections.OrderedDict(b=1, a=torch.arange(3)),
    "function": apply_echo_config,
    "class": EchoLevel,
    "field not in __init__": derived_then_changed(),
    "plain": {"g": 2.0, "name": "x", 3: [1, 2.5, None]},
}


def assert_equal_and_same_type(a, b, where: str = "value") -> None:
    assert type(a) is type(b), f"{where}: {type(a)} is not {type(b)}"
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_equal_and_same_type(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal_and_same_type(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_a_value_comes_back_from_a_checkpoint_equal_and_of_the_same_type(value, tmp_path):
    path = save_checkpoint(
        tmp_path / "ckpt.pt", {"config": encode_env_config(value, name="config")}
    )
    torch.load(path, weights_only=True)  # the file needs no unpickling of code
    assert_equal_and_same_type(decode_env_config(load_checkpoint(path)["config"]), value)


def test_decoding_a_decoded_or_plain_value_changes_nothing():
    value = VALUES["nested"]
    assert decode_env_config(value) == value  # a state the driver decoded already
    assert decode_env_config({"g": 2.0}) == {"g": 2.0}  # a checkpoint written before the tags


def module_level_apply(env, config) -> None:  # importable by its name: accepted
    return None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (lambda env, config: None, r"apply_env_config=<function .*<lambda>.* of type function is"),
        (functools.partial(module_level_apply), "of type partial is invalid"),
        (EchoConfigEnv().set_env_config, "of type method is invalid"),
    ],
    ids=["lambda", "partial", "bound method"],
)
def test_a_callable_without_an_import_path_is_refused_naming_what_is_accepted(value, message):
    with pytest.raises(TypeError, match=message) as err:
        encode_env_config(value, name="apply_env_config")
    assert "accepted: a module-level function or class" in str(err.value)
    assert encode_env_config(module_level_apply, name="apply_env_config") == {
        "__tdscheme__": "callable", "path": f"{__name__}:module_level_apply"
    }  # fmt: skip


def test_a_local_function_or_class_is_refused():
    def inner(env, config) -> None:
        return None

    @dataclasses.dataclass
    class Local:
        x: int = 1

    with pytest.raises(TypeError, match=r"apply_env_config=<function .*<locals>.inner"):
        encode_env_config(inner, name="apply_env_config")
    with pytest.raises(TypeError, match=r"config\['level'\] of type .*Local is invalid.*top of a"):
        encode_env_config({"level": Local()}, name="config")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"lock": threading.Lock()}, r"config\['lock'\]=.* of type _thread.lock is invalid"),
        ([1, object()], r"config\[1\]=<object object .*> of type builtins.object is invalid"),
        (np.array(["a"]), r"config=array\(\['a'\].* of type numpy.ndarray is invalid"),
        ({(1, 2): 0}, r"config has the key \(1, 2\) of type tuple, which is invalid"),
        ({"__tdscheme__": 0}, r"config has the key '__tdscheme__' of type str"),
    ],
    ids=["lock", "object", "numpy strings", "tuple key", "reserved key"],
)
def test_a_value_a_checkpoint_cannot_hold_is_refused_where_it_is(value, message):
    with pytest.raises(TypeError, match=message) as err:
        encode_env_config(value, name="config")
    assert "accepted:" in str(err.value)


def test_a_dataclass_that_cannot_be_rebuilt_from_its_fields_is_refused():
    with pytest.raises(TypeError, match="config=.* cannot be rebuilt from its fields"):
        encode_env_config(NeedsInitVar(1, scale=2), name="config")


@dataclasses.dataclass
class NeedsInitVar:
    x: int
    scale: dataclasses.InitVar[int]

    def __post_init__(self, scale: int) -> None:
        self.x *= scale
