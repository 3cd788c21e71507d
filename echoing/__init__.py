"""echoing: graph-level tf.data transformations that change what reaches the accelerator.

Example::

    import tensorflow as tf
    import echoing

    ds = tf.data.Dataset.range(8).apply(echoing.echo(2, buffer_size=16, seed=0))
"""

from echoing import keras as keras  # public modules
from echoing import meters as meters
from echoing import techniques as techniques
from echoing.assistant import Assistant
from echoing.assistant_callback import AssistantCallback, AssistantFeedCallback
from echoing.assistant_filter import AssistantFilter, assistant_filter
from echoing.assistant_learner import AssistantLearner
from echoing.auto_echo import AutoEcho
from echoing.bag_of_words import BagOfWords
from echoing.batch_selection import sample_rows, select_rows
from echoing.boss_features import BossFeatures
from echoing.diagnose import diagnose, format_diagnosis
from echoing.echo import echo
from echoing.ids import with_ids
from echoing.loss_pruning import LossPruning, loss_prune
from echoing.loss_table import LossInbox, LossTable
from echoing.priority_distributed import distributed_priority_sample
from echoing.priority_feedback import PrioritizedStep, PriorityFeedback
from echoing.priority_sampling import PrioritySampler, priority_sample
from echoing.priority_shards import ShardedPriorityTable
from echoing.priority_table import PriorityTable

__version__ = "0.1.0"

__all__ = [
    "Assistant",
    "AssistantCallback",
    "AssistantFeedCallback",
    "AssistantFilter",
    "AssistantLearner",
    "AutoEcho",
    "BagOfWords",
    "BossFeatures",
    "LossInbox",
    "LossPruning",
    "LossTable",
    "PrioritizedStep",
    "PriorityFeedback",
    "PrioritySampler",
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
