"""The observations the lean rollout reads: one array, or a gymnasium ``Dict`` of them (pixels too).

torchrl's gym wrapper names a plain array observation ``"observation"`` (or
``"pixels"`` where the array is an image: ``(H, W, 3)`` in 0-255) and a ``Dict``
observation's entries by their keys, renaming ``"state"`` to ``"observation"``
(so ``AddRenderObservation(env, render_only=False)`` gives ``"pixels"`` and
``"observation"``), and encodes each with its spec (dtype, shape).
:class:`Observations` does the same per step, without the wrapper's spec
lookups; :func:`observations` says why it cannot for an env.

Example:
    >>> import numpy as np
    >>> from tdscheme.envs import make_env
    >>> reader = observations(make_env("CartPole-v1", num_envs=2))
    >>> reader.keys
    ['observation']
    >>> reader.read(np.zeros((2, 4), dtype=np.float64))["observation"].dtype
    torch.float32
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["Observations", "observations"]


class Observations:
    """Reads a gymnasium (or EnvPool) observation into tensors by torchrl key.

    Built by :func:`observations`.

    Attributes:
        keys: the torchrl keys, in the env spec's order.
    """

    def __init__(
        self,
        keys: list[str],
        specs: dict[str, tuple[torch.Size, torch.dtype]],
        gym_keys: dict[str, str],
    ) -> None:
        self.keys = keys
        self._specs = specs  # key -> (shape, dtype)
        self._gym_keys = gym_keys  # torchrl key -> the Dict space's key ({} for an array)
        # key -> the numpy dtype whose arrays are read as they are (torch.from_numpy: the
        # array's memory, as torch.as_tensor gives it, for half its cost)
        self._same = {key: _numpy_dtype(dtype) for key, (_, dtype) in specs.items()}

    @property
    def gym_keys(self) -> dict[str, str]:
        """torchrl key -> the gymnasium ``Dict`` space's key (empty for one array)."""
        return self._gym_keys

    def read(self, raw: Any) -> dict[str, torch.Tensor]:
        """``{key: tensor}`` of one observation, as the wrapper's ``read_obs`` and spec ``encode``."""
        if not self._gym_keys:
            return {self.keys[0]: self._encode(self.keys[0], raw)}
        return {key: self._encode(key, raw[self._gym_keys[key]]) for key in self.keys}

    def _encode(self, key: str, value: Any) -> torch.Tensor:
        shape, dtype = self._specs[key]
        if (
            type(value) is np.ndarray
            and value.dtype == self._same[key]
            and value.shape == shape
            and value.ndim
            and min(value.strides) > 0
        ):
            return torch.from_numpy(value)
        if isinstance(value, np.ndarray) and not all(stride > 0 for stride in value.strides):
            value = value.copy()
        value = torch.as_tensor(value, dtype=dtype)
        return value if value.shape == shape else value.reshape(shape)


def observations(
    env: Any, base_env: Any = None, skip: set[str] | frozenset[str] = frozenset()
) -> Observations | str:
    """The reader of ``env``'s observations, or why the lean rollout cannot read them.

    Args:
        env: the collector's env (its transformed specs give the dtypes: ``DoubleToFloat``).
        base_env: the torchrl wrapper under it (defaults to ``env``).
        skip: root keys of observations torchrl's own transforms write (a SAME_STEP
            env's ``"final"`` observations).
    """
    base_env = env if base_env is None else base_env
    keys = [key for key in base_env.observation_spec.keys(True, True) if _root(key) not in skip]
    if any(not isinstance(key, str) for key in keys):
        return "the env has nested observation keys"
    space = _gym_observation_space(base_env)
    gym_keys: dict[str, str] = {}
    if len(keys) != 1 or _is_dict_space(space):
        if space is None or not _is_dict_space(space):
            return f"the env's observations {keys} do not come from a gymnasium Dict space"
        for name in space.spaces:
            gym_keys["observation" if name == "state" else name] = name
        if sorted(gym_keys) != sorted(keys):
            return f"the env's observation keys {keys} are not its Dict space's {list(space)}"
    # the env's shape (CatFrames stacks later) in the transformed dtype (DoubleToFloat's cast)
    specs = {
        key: (base_env.observation_spec[key].shape, env.observation_spec[key].dtype) for key in keys
    }
    return Observations(keys, specs, gym_keys)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """numpy's dtype of torch's ``dtype``, or ``None`` (bfloat16, ...: none)."""
    try:
        return torch.empty((), dtype=dtype).numpy().dtype
    except (TypeError, RuntimeError):
        return None


def _root(key: Any) -> str:
    return key[0] if isinstance(key, tuple) else key


def _gym_observation_space(base_env: Any) -> Any:
    inner = getattr(base_env, "_env", None)
    return getattr(inner, "single_observation_space", getattr(inner, "observation_space", None))


def _is_dict_space(space: Any) -> bool:
    return type(space).__name__ == "Dict"
