"""The Learner: trains a torchrl loss, computes or applies gradients, hands out weights.

Example:
    >>> from tdscheme.learner import Learner, LearnerConfig, average_gradients
    >>> LearnerConfig().num_epochs
    1
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "Learner": "tdscheme.learner.learner",
    "LearnerConfig": "tdscheme.learner.config",
    "LearnerGroup": "tdscheme.learner.group",
    "MASK_KEY": "tdscheme.learner.batches",
    "OffPolicyLearner": "tdscheme.learner.offpolicy",
    "OnePassValues": "tdscheme.learner.values",
    "TARGET_UPDATES": "tdscheme.learner.target_nets",
    "average_gradients": "tdscheme.learner.gradients",
    "is_prioritized": "tdscheme.learner.offpolicy",
    "make_target_updater": "tdscheme.learner.target_nets",
    "vtrace_estimator": "tdscheme.learner.vtrace",
}

__all__ = [
    "MASK_KEY",
    "TARGET_UPDATES",
    "Learner",
    "LearnerConfig",
    "LearnerGroup",
    "OffPolicyLearner",
    "OnePassValues",
    "average_gradients",
    "is_prioritized",
    "make_target_updater",
    "vtrace_estimator",
]

if typing.TYPE_CHECKING:
    from tdscheme.learner.batches import MASK_KEY
    from tdscheme.learner.config import LearnerConfig
    from tdscheme.learner.gradients import average_gradients
    from tdscheme.learner.group import LearnerGroup
    from tdscheme.learner.learner import Learner
    from tdscheme.learner.offpolicy import OffPolicyLearner, is_prioritized
    from tdscheme.learner.target_nets import TARGET_UPDATES, make_target_updater
    from tdscheme.learner.values import OnePassValues

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
