"""The public surface: every name and import path users use, pinned.

A name leaves this list only with a deprecation warning that has shipped for one release; a
module path that moved keeps importing (with a DeprecationWarning) and gives the same objects.
"""

import importlib

import numpy as np
import pytest

import echoing
import echoing.keras
import echoing.meters
import echoing.techniques

PUBLIC = {
    echoing: {
        "Assistant",
        "AssistantCallback",
        "AssistantFeedCallback",
        "AssistantFeedbackCallback",
        "AssistantFilter",
        "AssistantLearner",
        "LearnerOptions",
        "AutoEcho",
        "BagOfWords",
        "BossFeatures",
        "FeedbackInbox",
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
    },
    echoing.keras: {
        "AutoEchoCallback",
        "LossFeedback",
        "PrioritizedModel",
        "PriorityModel",
        "fit_inputs",
    },
    echoing.meters: {"EchoMeters", "ElementCounter"},
    echoing.techniques: {
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
    },
}

# Module paths that code outside the library imported before the family folders
# (echoing/_src/{core,echo,prune,assist,priority}); each with a name it must still give.
OLD_PATHS = {
    "echoing.assistant": "Assistant",
    "echoing.assistant_callback": "AssistantCallback",
    "echoing.assistant_filter": "assistant_filter",
    "echoing.assistant_learner": "AssistantLearner",
    "echoing.auto_echo": "AutoEcho",
    "echoing.bag_of_words": "BagOfWords",
    "echoing.batch_selection": "select_rows",
    "echoing.boss_features": "BossFeatures",
    "echoing.diagnose": "format_diagnosis",
    "echoing.echo": "echo",
    "echoing.ids": "with_ids",
    "echoing.loss_pruning": "loss_prune",
    "echoing.loss_table": "LossTable",
    "echoing.priority_distributed": "distributed_priority_sample",
    "echoing.priority_feedback": "PriorityFeedback",
    "echoing.priority_sampling": "priority_sample",
    "echoing.priority_shards": "ShardedPriorityTable",
    "echoing.priority_table": "PriorityTable",
    "echoing.techniques.base": "Technique",
    "echoing.techniques.pruning": "PruningTechnique",
    "echoing.techniques.echo": "EchoTechnique",
    "echoing.techniques.auto_echo": "AutoEchoTechnique",
    "echoing.techniques.assistant": "AssistantTechnique",
    "echoing.techniques.priority": "PriorityTechnique",
    "echoing.techniques.batch_selection": "InBatchSelection",
}


def _public_home(name):
    for module, names in PUBLIC.items():
        if name in names:
            return getattr(module, name)
    raise AssertionError(f"{name} is in no public module")


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda module: module.__name__)
def test_every_public_name_is_exported_and_listed(module):
    names = PUBLIC[module]
    missing = sorted(name for name in names if not hasattr(module, name))
    assert not missing, f"{module.__name__} lost {missing}"
    assert names <= set(module.__all__), sorted(names - set(module.__all__))
    # __all__ lists names, not modules: `echoing.keras` is reached as an attribute.
    unlisted = sorted(set(module.__all__) - names - {"__version__"})
    assert not unlisted, f"{module.__name__}.__all__ has unpinned {unlisted}: pin them here"


def test_the_package_has_a_version_and_its_public_modules():
    assert isinstance(echoing.__version__, str) and echoing.__version__.count(".") >= 1
    assert "__version__" in echoing.__all__
    for module in ("keras", "meters", "techniques"):
        assert getattr(echoing, module) is importlib.import_module(f"echoing.{module}")
        assert module not in echoing.__all__


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_an_old_module_path_still_gives_the_same_object(path):
    name = OLD_PATHS[path]
    module = importlib.import_module(path)
    with pytest.warns(
        DeprecationWarning, match=rf"{path} is deprecated .*: use echoing\S*\.{name}"
    ):
        value = getattr(module, name)
    assert value is _public_home(name)


def test_an_old_module_path_read_as_an_attribute_still_works():
    with pytest.warns(DeprecationWarning, match=r"echoing\.loss_table is deprecated"):
        assert echoing.loss_table.LossTable is echoing.LossTable
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        echoing.no_such_module  # noqa: B018


# Public names renamed for one word per technique (issue 30): priority sampling's "priority",
# and "feedback" for the per-example losses the loop reports (no longer for priorities). Old ->
# new, each a deprecated subclass of the new class that warns when it is built, for one release.
RENAMED = {
    (echoing, "PrioritizedStep"): "echoing.PriorityStep",
    (echoing.keras, "PrioritizedModel"): "echoing.keras.PriorityModel",
    (echoing, "PriorityFeedback"): "echoing.PriorityMeter",
    (echoing, "LossInbox"): "echoing.FeedbackInbox",
    (echoing, "AssistantFeedCallback"): "echoing.AssistantFeedbackCallback",
    (echoing.techniques, "LossCallback"): "echoing.techniques.FeedbackCallback",
}


def _build_renamed(module, old):
    """Builds ``module.old`` with arguments its new class accepts."""
    import keras

    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    table = echoing.PriorityTable(4)
    if old == "PrioritizedStep":
        return echoing.PrioritizedStep(net, loss, keras.optimizers.SGD(), table)
    if old == "PrioritizedModel":
        return echoing.keras.PrioritizedModel(net, per_example_loss=loss, table=table)
    if old == "PriorityFeedback":
        return echoing.PriorityFeedback(table, net.trainable_variables)
    if old == "LossInbox":
        return echoing.LossInbox(4)
    if old == "AssistantFeedCallback":
        examples = {"inputs": np.zeros((4, 2), np.float32), "label": np.zeros(4, np.int64)}
        learner = echoing.AssistantLearner(
            echoing.Assistant(num_classes=2, input_shape=(2,)), examples=examples
        )
        try:
            return echoing.AssistantFeedCallback(learner, echoing.FeedbackInbox(4))
        finally:
            learner.close()
    return getattr(module, old)(lambda ids, losses, step: None)


@pytest.mark.parametrize(("module", "old"), list(RENAMED), ids=[old for _, old in RENAMED])
def test_a_renamed_name_still_builds_its_class_with_a_deprecation_warning(module, old):
    new = RENAMED[module, old]
    assert issubclass(getattr(module, old), _public_home(new.rsplit(".", 1)[1]))
    with pytest.warns(
        DeprecationWarning,
        match=rf"{module.__name__}\.{old} is deprecated and goes in the next release: use "
        rf"{new}, the same",
    ):
        built = _build_renamed(module, old)
    assert isinstance(built, _public_home(new.rsplit(".", 1)[1]))


def test_a_private_name_at_an_old_path_says_it_is_private():
    module = importlib.import_module("echoing.grouping")
    with pytest.warns(DeprecationWarning, match=r"private now \(echoing\._src\.core\.grouping"):
        assert callable(module.uniform)
