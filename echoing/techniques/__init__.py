"""Techniques: everything that changes what reaches the model, as plug-ins of one protocol.

A technique adds pipeline stages at named insertion points, may select the train batches or
replace the backward pass, receives one ``Feedback`` record after every inner loop, and owns
its checkpointed state and logged scalars (``Technique``). Trainers compose the list a config
names (``from_config``) and never name a technique themselves. ``FeedbackCallback(callback)``
hands each ``Feedback`` record's ids, per-example losses and step to a plain callable (its old
name, ``LossCallback``, is deprecated: it warns and goes in the next release).

Writing a new technique is one module plus one line in ``MODULES`` (``echoing/_src/
techniques.py``). The module holds the technique class and three functions over the run
config: ``default_config(config)`` adds its fields with their defaults,
``check_config(config)`` raises a clear error for a bad value or combination, and
``from_config(context)`` returns the technique, or None when the config does not ask for it.
For example, a technique that logs the mean loss it sees::

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

from echoing._src.techniques import (
    MODULES,
    AssistantTechnique,
    AutoEchoTechnique,
    Context,
    EchoTechnique,
    ExamplesById,
    Feedback,
    FeedbackCallback,
    InBatchSelection,
    Insertion,
    LossCallback,
    PriorityGradients,
    PriorityTechnique,
    PruningTechnique,
    Stages,
    Technique,
    check_config,
    default_config,
    from_config,
    replaces_gradients,
    selects_rows,
)

__all__ = [
    "MODULES",
    "AssistantTechnique",
    "AutoEchoTechnique",
    "Context",
    "EchoTechnique",
    "ExamplesById",
    "Feedback",
    "FeedbackCallback",
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
