"""seed_everything, worker_seeds and the RNG state round trip."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tdscheme.engine.checkpoint import load_checkpoint, save_checkpoint
from tdscheme.engine.seeding import rng_state, seed_everything, set_rng_state, worker_seeds


def _draw() -> tuple:
    return (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.standard_normal(),
        torch.rand(3).tolist(),
        torch.randint(0, 1000, (2,)).tolist(),
    )


def test_seed_everything_makes_draws_repeat():
    seed_everything(123)
    first = _draw()
    seed_everything(123)
    assert _draw() == first
    seed_everything(124)
    assert _draw() != first


@pytest.mark.parametrize("bad", [-1, 2**32])
def test_out_of_range_seed_raises_value_error_naming_seed(bad):
    with pytest.raises(ValueError, match=rf"seed must be an int in \[0, 4294967295\], got {bad}"):
        seed_everything(bad)


@pytest.mark.parametrize("bad", [1.5, "1", True, None])
def test_non_int_seed_raises_type_error_naming_seed(bad):
    with pytest.raises(TypeError, match="seed must be an int"):
        seed_everything(bad)
    with pytest.raises(TypeError, match="seed must be an int"):
        worker_seeds(bad, 2)


def test_numpy_int_seed_is_accepted():
    seed_everything(np.int64(5))
    assert worker_seeds(np.int64(5), 2) == worker_seeds(5, 2)


def test_worker_seeds_are_distinct_reproducible_and_31_bit():
    seeds = worker_seeds(0, 64)
    assert len(set(seeds)) == 64
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds)
    assert worker_seeds(0, 64) == seeds
    assert worker_seeds(0, 3) == seeds[:3]
    assert worker_seeds(1, 3) != seeds[:3]
    assert 0 not in worker_seeds(0, 4)  # not simply the run seed
    assert worker_seeds(0, 0) == []


def test_worker_seeds_bad_n():
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        worker_seeds(0, -1)
    with pytest.raises(TypeError, match="n must be a non-negative int"):
        worker_seeds(0, 2.0)


def test_rng_state_restores_every_generator():
    seed_everything(7)
    _draw()  # leaves cached gaussians behind in random and numpy
    state = rng_state()
    first = _draw()
    set_rng_state(state)
    assert _draw() == first


def test_rng_state_survives_a_safe_checkpoint(tmp_path):
    seed_everything(3)
    random.gauss(0, 1)
    path = save_checkpoint(tmp_path / "rng.pt", {"rng": rng_state()})
    first = _draw()
    seed_everything(99)
    set_rng_state(load_checkpoint(path)["rng"])
    assert _draw() == first


def test_set_rng_state_names_missing_keys():
    with pytest.raises(ValueError, match=r"missing the keys \['numpy', 'cuda'\]"):
        set_rng_state({"python": {}, "torch": torch.get_rng_state()})
