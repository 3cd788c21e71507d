"""The technique registry: every technique a config can name, composed in one order."""

from __future__ import annotations

from collections.abc import Sequence

from echoing._src import compatibility
from echoing._src.assist import technique as assistant
from echoing._src.assist.technique import AssistantTechnique
from echoing._src.core.technique import (
    Context,
    ExamplesById,
    Feedback,
    FeedbackCallback,
    Insertion,
    LossCallback,
    Stages,
    Technique,
    replaces_gradients,
    selects_rows,
)
from echoing._src.echo import auto_technique as auto_echo
from echoing._src.echo import technique as echo
from echoing._src.echo.auto_technique import AutoEchoTechnique
from echoing._src.echo.technique import EchoTechnique
from echoing._src.priority import selection_technique as batch_selection
from echoing._src.priority import technique as priority
from echoing._src.priority.selection_technique import InBatchSelection
from echoing._src.priority.technique import PriorityGradients, PriorityTechnique
from echoing._src.prune import technique as pruning
from echoing._src.prune.technique import PruningTechnique

# Every technique a config can name, in the order their stages enter the pipeline when they
# share an insertion point. A run's extra techniques (a user's own stages) come right after
# echo's: echo repeats what reaches it, and the user's stages see the repeats, as when they
# apply echo first in their own pipeline.
MODULES = (echo, assistant, pruning, auto_echo, priority, batch_selection)


def default_config(config) -> None:
    """Adds every technique's config fields, at their defaults, to ``config``."""
    for module in MODULES:
        module.default_config(config)


def check_config(config) -> None:
    """Raises ValueError/TypeError for a bad technique field or combination in ``config``."""
    for module in MODULES:
        module.check_config(config)
    compatibility.check(config)  # the pairs of techniques one run cannot combine


def from_config(context: Context, extra: Sequence[Technique] = ()) -> list[Technique]:
    """The techniques ``context.config`` asks for, in ``MODULES`` order, with ``extra`` after
    echo's (see ``MODULES``)."""
    built = [module.from_config(context) for module in MODULES]
    after_echo = MODULES.index(echo) + 1
    built[after_echo:after_echo] = list(extra)
    return [technique for technique in built if technique is not None]


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
