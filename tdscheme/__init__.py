"""tdscheme: TensorDict-native distributed reinforcement learning on Ray and torchrl."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
