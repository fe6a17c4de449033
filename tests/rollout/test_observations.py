"""The lean rollout's observation reader: the values, dtype and layout torchrl's wrapper reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdscheme.envs import make_env
from tdscheme.rollout.observations import observations

ARRAYS = {
    "float32, C order": np.arange(8, dtype=np.float32).reshape(2, 4),
    "float32, F order (CartPole's vector env)": np.asfortranarray(
        np.arange(8, dtype=np.float32).reshape(2, 4)
    ),
    "float64 (cast)": np.arange(8, dtype=np.float64).reshape(2, 4) / 3,
    "negative strides": np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::-1],
}


@pytest.mark.parametrize("name", list(ARRAYS))
def test_the_reader_reads_as_torchrls_wrapper(name):
    reader = observations(make_env("CartPole-v1", num_envs=2))
    array = ARRAYS[name]
    got = reader.read(array)["observation"]
    ok = array.copy() if min(array.strides) < 0 else array
    expected = torch.as_tensor(ok, dtype=torch.float32)  # the wrapper's read_obs and encode
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert got.stride() == expected.stride()  # the layout a policy's matmul rounds by
    shares = got.numpy().__array_interface__["data"][0] == array.__array_interface__["data"][0]
    assert shares == (array.dtype == np.float32 and min(array.strides) > 0)
