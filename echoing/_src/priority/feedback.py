"""Deprecated, goes in the next release: this module is ``echoing._src.priority.meter`` now.

``PriorityFeedback`` is ``echoing.PriorityMeter`` (issue 30: "feedback" names the per-example
losses the loop reports; this module measures priorities). Users import from ``echoing``.
"""

from echoing._src.priority.meter import (
    PerExampleLoss,
    PrioritizedStep,
    PriorityFeedback,
    PriorityMeter,
    PriorityStep,
)

__all__ = ["PerExampleLoss", "PrioritizedStep", "PriorityFeedback", "PriorityMeter", "PriorityStep"]
