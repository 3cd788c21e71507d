"""echoing: graph-level tf.data transformations that change what reaches the accelerator.

Example::

    import tensorflow as tf
    import echoing

    ds = tf.data.Dataset.range(8).apply(echoing.echo(2, buffer_size=16, seed=0))

The public surface, by family (the code lives in ``echoing/_src/<family>/``):

- echo, when the input pipeline is the bottleneck: ``echo``, ``AutoEcho``, and
  ``diagnose``/``format_diagnosis`` to tell whether it is;
- pruning, when many steps go to examples the model already fits: ``LossTable``,
  ``loss_prune``/``LossPruning``, ``with_ids``;
- the Assistant, a small model that filters easy examples online: ``Assistant``,
  ``AssistantLearner`` (its options ``LearnerOptions``), ``assistant_filter``/``AssistantFilter``,
  ``AssistantCallback``, ``AssistantFeedbackCallback``, ``FeedbackInbox``, ``BagOfWords``,
  ``BossFeatures``;
- priority sampling and in-batch selection:
  ``PriorityTable``, ``ShardedPriorityTable``, ``priority_sample`` (also per input pipeline,
  with ``input_context=``), ``PrioritySampler``, ``PriorityMeter``, ``PriorityStep``,
  ``select_rows``, ``sample_rows``.

Deprecated, they warn and go in the next release: ``distributed_priority_sample``, and the old
names ``PrioritizedStep`` (``PriorityStep``), ``AssistantFeedCallback``
(``AssistantFeedbackCallback``), ``LossInbox`` (``FeedbackInbox``) and ``PriorityFeedback``
(``PriorityMeter``: "feedback" is the per-example losses the training loop reports).

``echoing.keras`` adapts them to ``model.fit``, ``echoing.meters`` counts what flows through a
pipeline, and ``echoing.techniques`` is the plug-in protocol the trainers compose.
"""

from echoing import keras as keras  # public modules
from echoing import meters as meters
from echoing import techniques as techniques
from echoing._src import deprecated
from echoing._src.assist.assistant import Assistant
from echoing._src.assist.bag_of_words import BagOfWords
from echoing._src.assist.boss_features import BossFeatures
from echoing._src.assist.callbacks import (
    AssistantCallback,
    AssistantFeedbackCallback,
    AssistantFeedCallback,
)
from echoing._src.assist.filter import AssistantFilter, assistant_filter
from echoing._src.assist.learner import AssistantLearner
from echoing._src.assist.options import LearnerOptions
from echoing._src.core.diagnose import diagnose, format_diagnosis
from echoing._src.core.ids import with_ids
from echoing._src.core.loss_table import FeedbackInbox, LossInbox, LossTable
from echoing._src.echo.auto_echo import AutoEcho
from echoing._src.echo.echo import echo
from echoing._src.priority.distributed import distributed_priority_sample
from echoing._src.priority.meter import (
    PrioritizedStep,
    PriorityFeedback,
    PriorityMeter,
    PriorityStep,
)
from echoing._src.priority.sampling import PrioritySampler, priority_sample
from echoing._src.priority.selection import sample_rows, select_rows
from echoing._src.priority.shards import ShardedPriorityTable
from echoing._src.priority.table import PriorityTable
from echoing._src.prune.loss_pruning import LossPruning, loss_prune

__version__ = "0.1.0"

deprecated.register()


def __getattr__(name: str):  # old module paths read as attributes: echoing.loss_table.X
    return deprecated.attribute(__name__, name)


__all__ = [
    "Assistant",
    "AssistantCallback",
    "AssistantFeedCallback",
    "AssistantFeedbackCallback",
    "AssistantFilter",
    "AssistantLearner",
    "AutoEcho",
    "BagOfWords",
    "BossFeatures",
    "FeedbackInbox",
    "LearnerOptions",
    "LossInbox",
    "LossPruning",
    "LossTable",
    "PrioritizedStep",
    "PriorityFeedback",
    "PriorityMeter",
    "PrioritySampler",
    "PriorityStep",
    "PriorityTable",
    "ShardedPriorityTable",
    "__version__",
    "assistant_filter",
    "diagnose",
    "distributed_priority_sample",
    "echo",
    "format_diagnosis",
    "loss_prune",
    "priority_sample",
    "sample_rows",
    "select_rows",
    "with_ids",
]
