"""Techniques: everything that changes what reaches the model, as plug-ins of one protocol.

A technique adds pipeline stages at named insertion points, may select the train batches or
replace the backward pass, receives one ``Feedback`` record after every inner loop, and owns
its checkpointed state and logged scalars (``echoing.techniques.base``). Trainers compose the
list a config names (``from_config``) and never name a technique themselves.

Writing a new technique is one file here plus one line in ``MODULES``. The module holds the
technique class and three functions over the run config: ``default_config(config)`` adds its
fields with their defaults, ``check_config(config)`` raises a clear error for a bad value or
combination, and ``from_config(context)`` returns the technique, or None when the config does
not ask for it. For example, a technique that logs the mean loss it sees::

    import numpy as np
    from echoing import techniques

    class MeanLoss(techniques.Technique):
        name = "mean_loss"
        wants_losses = True  # the loop then gathers ids and per-example losses

        def __init__(self):
            self.last = float("nan")

        def observe(self, feedback):
            self.last = float(np.mean(feedback.losses))

        def scalars(self):
            return {"observed_mean_loss": self.last}

    technique = MeanLoss()
    technique.observe(
        techniques.Feedback(
            ids=np.arange(4).reshape(1, 4), losses=np.ones((1, 4)), step=1, steps=1,
            seconds=0.1, input_wait_seconds=0.0,
        )
    )
    print(technique.scalars())  # {"observed_mean_loss": 1.0}

    # In its module: default_config(config) sets config.log_mean_loss = False,
    # check_config(config) checks it is a bool, and from_config(context) returns
    # MeanLoss() if context.config.log_mean_loss else None.
"""

from __future__ import annotations

from collections.abc import Sequence

from echoing.techniques import assistant, auto_echo, batch_selection, echo, priority, pruning
from echoing.techniques.assistant import AssistantTechnique
from echoing.techniques.auto_echo import AutoEchoTechnique
from echoing.techniques.base import (
    Context,
    ExamplesById,
    Feedback,
    Insertion,
    LossCallback,
    Stages,
    Technique,
    replaces_gradients,
    selects_rows,
)
from echoing.techniques.batch_selection import InBatchSelection
from echoing.techniques.echo import EchoTechnique
from echoing.techniques.priority import PriorityGradients, PriorityTechnique
from echoing.techniques.pruning import PruningTechnique

# Every technique a config can name, in the order their stages enter the pipeline when they
# share an insertion point. Echo comes first and a run's extra techniques (a user's own stages)
# right after it, the order in which ``pipelines.make_datasets`` applies its own echo and then
# its insertions.
MODULES = (echo, assistant, pruning, auto_echo, priority, batch_selection)
_BEFORE_EXTRA = 1


def default_config(config) -> None:
    """Adds every technique's config fields, at their defaults, to ``config``."""
    for module in MODULES:
        module.default_config(config)


def check_config(config) -> None:
    """Raises ValueError/TypeError for a bad technique field or combination in ``config``."""
    for module in MODULES:
        module.check_config(config)


def from_config(context: Context, extra: Sequence[Technique] = ()) -> list[Technique]:
    """The techniques ``context.config`` asks for, in ``MODULES`` order, with ``extra`` after
    echo's (see ``MODULES``)."""
    built = [module.from_config(context) for module in MODULES]
    built[_BEFORE_EXTRA:_BEFORE_EXTRA] = list(extra)
    return [technique for technique in built if technique is not None]


__all__ = [
    "MODULES",
    "AssistantTechnique",
    "AutoEchoTechnique",
    "Context",
    "EchoTechnique",
    "ExamplesById",
    "Feedback",
    "InBatchSelection",
    "Insertion",
    "LossCallback",
    "PriorityGradients",
    "PriorityTechnique",
    "PruningTechnique",
    "Stages",
    "Technique",
    "check_config",
    "default_config",
    "from_config",
    "replaces_gradients",
    "selects_rows",
]
