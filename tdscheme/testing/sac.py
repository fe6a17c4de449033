"""SAC networks whose random draws are given per frame, for tests that compare two ways of training.

torchrl's ``SACLoss`` draws the actor's actions with ``torch.randn`` of the
minibatch's shape, so one Learner on 64 frames and two ranks on 32 each draw
different noise and cannot be compared bit for bit. Here the standard normal
draw of each frame is data: the frame's ``"noise"`` (and ``("next", "noise")``
for the next state's action), read by :class:`KeyedNoiseTanhNormal`. Everything
else is the sac-pendulum preset's actor (a tanh-normal ``ProbabilisticActor``) and
Q-network, and torchrl's own loss. Learner tests only: collecting with it needs
the key in every observation.

Example:
    >>> from torchrl.envs.utils import ExplorationType, set_exploration_type
    >>> modules = keyed_noise_sac_modules(hidden_sizes=(8,))
    >>> frames = TensorDict(observation=torch.zeros(4, 3), noise=torch.ones(4, 1), batch_size=[4])
    >>> with set_exploration_type(ExplorationType.RANDOM):
    ...     a = modules["actor"](frames.clone())["action"]
    ...     b = modules["actor"](frames.clone())["action"]
    >>> bool((a == b).all()), tuple(a.shape)
    (True, (4, 1))
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions.utils import _sum_rightmost
from torchrl.collectors import Collector
from torchrl.data import Bounded
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator

from tdscheme.envs import make_env
from tdscheme.testing import seed_collector

__all__ = [
    "NOISE_KEY",
    "KeyedNoiseTanhNormal",
    "keyed_noise_sac_modules",
    "pendulum_transitions",
    "with_noise",
]

#: the key of each frame's standard normal draw
NOISE_KEY = "noise"


class KeyedNoiseTanhNormal(TanhNormal):
    """torchrl's ``TanhNormal`` whose reparameterized draw is ``tanh(loc + scale * noise)``.

    Args:
        loc, scale: as for ``TanhNormal``.
        noise: the standard normal draw, shaped like ``loc``.
        **kwargs: ``TanhNormal``'s other arguments (``low``, ``high``, ...).
    """

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor, **kwargs):
        super().__init__(loc, scale, **kwargs)
        self.noise = noise

    def rsample_and_log_prob(self, sample_shape=()) -> tuple[torch.Tensor, torch.Tensor]:
        if tuple(sample_shape):
            raise ValueError(f"sample_shape={tuple(sample_shape)} is invalid; accepted: ()")
        base = self.base_dist
        preimage = base.mean + base.stddev * self.noise.to(base.mean.dtype)
        transform = self.transforms[0]
        sample = transform(preimage)
        log_det = transform.log_abs_det_jacobian(preimage, sample)
        return sample, base.log_prob(preimage) - _sum_rightmost(log_det, len(self.event_shape))

    def rsample(self, sample_shape=()) -> torch.Tensor:
        return self.rsample_and_log_prob(sample_shape)[0]

    def sample(self, sample_shape=()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)


def keyed_noise_sac_modules(
    *,
    hidden_sizes: Sequence[int] = (64, 64),
    obs_dim: int = 3,
    low: float = -2.0,
    high: float = 2.0,
) -> dict[str, nn.Module]:
    """``{"actor", "qvalue"}`` for Pendulum's spaces, the actor drawing each frame's ``"noise"``."""
    spec = Bounded(low=low, high=high, shape=(1,))

    def mlp(in_features: int, out_features: int) -> MLP:
        return MLP(in_features=in_features, out_features=out_features, num_cells=list(hidden_sizes))

    net = nn.Sequential(mlp(obs_dim, 2), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale", NOISE_KEY], out_keys=["action"],
        distribution_class=KeyedNoiseTanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
        spec=spec, return_log_prob=False,
    )  # fmt: skip
    qvalue = ValueOperator(mlp(obs_dim + 1, 1), in_keys=["observation", "action"])
    return {"actor": actor, "qvalue": qvalue}


def with_noise(frames: TensorDict, generator: torch.Generator) -> TensorDict:
    """``frames`` (flat, Pendulum-like) with a standard normal ``"noise"`` per frame and next state."""
    shape = (*frames.batch_size, 1)
    frames.set(NOISE_KEY, torch.randn(shape, generator=generator))
    frames.set(("next", NOISE_KEY), torch.randn(shape, generator=generator))
    return frames


def pendulum_transitions(count: int, *, num_envs: int = 4, seed: int = 0) -> TensorDict:
    """``count`` real Pendulum-v1 transitions of random actions, flat, from torchrl's ``Collector``."""
    collector = Collector(
        functools.partial(make_env, "Pendulum-v1", num_envs=num_envs), None,
        frames_per_batch=count, total_frames=count,
    )  # fmt: skip
    try:
        with torch.random.fork_rng():  # the random actions draw from torch's RNG
            torch.manual_seed(seed)
            seed_collector(collector, seed)
            return next(iter(collector)).reshape(-1).clone()
    finally:
        collector.shutdown()
