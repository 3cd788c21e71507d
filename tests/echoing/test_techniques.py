"""The technique protocol: which techniques a config builds, and each hook's contract."""

import contextlib
import types

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

import echoing
import pipelines
from echoing import techniques
from trainers import run_config


def _examples(count=64):
    return techniques.ExamplesById(
        {
            "inputs": np.random.default_rng(0).random((count, 8), dtype=np.float32),
            "label": np.arange(count) % 2,
        },
        num_classes=2,
        input_shape=(8,),
    )


def _context(config, num_input_pipelines=1):
    return techniques.Context(
        config=run_config.resolve_config(config),
        stage_seed=lambda stage: pipelines.stage_seed(config.seed, stage),
        num_input_pipelines=num_input_pipelines,
        examples=_examples,
        num_examples=lambda: 64,
    )


def _config(**fields):
    # Not type-safe, so that wrongly typed values reach the checks under test.
    config = ml_collections.ConfigDict(run_config.default_config().to_dict(), type_safe=False)
    for key, value in fields.items():
        if key.startswith("data_"):
            config.data[key[len("data_") :]] = value
        else:
            config[key] = value
    return config


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({}, []),
        ({"echo": 2.0}, ["echo"]),
        ({"echo_buffer_size": 100, "auto_echo_max_factor": 4.0}, ["auto_echo"]),
        ({"auto_echo_max_factor": 4.0}, ["auto_echo"]),
        ({"assist": True}, ["assistant"]),
        ({"echo": 2.0, "assist": True}, ["echo", "assistant"]),
        ({"priority": True}, ["priority"]),
        ({"prune": True, "echo": 2.0}, ["echo", "prune"]),
        ({"select_ratio": 0.5, "assist": True}, ["assistant", "select"]),
    ],
)
def test_a_config_builds_the_techniques_it_names_in_registry_order(fields, names):
    built = techniques.from_config(_context(_config(**fields)))
    try:
        assert [technique.name for technique in built] == names
    finally:
        for technique in built:
            technique.close()


def test_extra_techniques_come_right_after_echo():
    extra = techniques.Stages([("before_augment", "mine", lambda ds: ds)])
    built = techniques.from_config(_context(_config(echo=2.0, assist=True)), extra=[extra])
    try:
        assert [technique.name for technique in built] == ["echo", "stages", "assistant"]
    finally:
        for technique in built:
            technique.close()


def test_echo_stage_uses_the_pipelines_echo_seed_and_point():
    config = _config(echo=1.5, echo_insert="after_batch", echo_buffer_size=8)
    (technique,) = techniques.from_config(_context(config))
    (insertion,) = technique.stages()
    assert (insertion.point, insertion.name) == ("after_batch", "echo")
    assert technique.echo_factor() == 1.5
    # Same seed as pipelines.make_datasets's own echo stage: the same stream.
    again = techniques.EchoTechnique(
        1.5, insert="after_batch", buffer_size=8, seed=pipelines.stage_seed(0, "echo")
    )
    first = list(tf.data.Dataset.range(20).apply(insertion.transformation).as_numpy_iterator())
    second = list(
        tf.data.Dataset.range(20).apply(again.stages()[0].transformation).as_numpy_iterator()
    )
    assert first == second


def _feedback(traced, wait=0.75):
    return techniques.Feedback(
        ids=None,
        losses=None,
        step=10,
        steps=10,
        seconds=1.0,
        input_wait_seconds=wait,
        traced=traced,
    )


def test_auto_echo_ignores_the_traced_loop_and_logs_the_wait_once():
    technique = techniques.AutoEchoTechnique(4.0, insert="after_batch", seed=0)
    technique.observe(_feedback(traced=True))
    assert technique.scalars() == {"echo_factor": 1.0}
    technique.observe(_feedback(traced=False))
    scalars = technique.scalars()
    assert scalars["input_wait_fraction"] == pytest.approx(0.75)
    assert scalars["echo_factor"] > 1.0
    assert "input_wait_fraction" not in technique.scalars()


def test_feedback_callback_receives_ids_losses_and_step():
    seen = []
    technique = techniques.FeedbackCallback(
        lambda ids, losses, step: seen.append((ids, losses, step))
    )
    assert technique.wants_losses
    technique.observe(
        techniques.Feedback(
            ids="ids", losses="losses", step=3, steps=1, seconds=0.1, input_wait_seconds=0.0
        )
    )
    assert seen == [("ids", "losses", 3)]


def test_priority_technique_selects_its_own_batches_and_replaces_gradients():
    technique = techniques.PriorityTechnique(
        _examples(), global_batch_size=8, top_ratio=0.25, renew_ratio=0.5, seed=0
    )
    assert techniques.replaces_gradients(technique)
    assert not technique.input_options().experimental_fetch_to_device
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0)
    batch = next(iter(technique.train_dataset(context)))
    assert batch["inputs"].shape == (8, 8)
    assert not techniques.replaces_gradients(techniques.EchoTechnique(2, insert="after_batch"))


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"echo": 0.0}, ValueError, r"config echo must be a number in \(0, 1000\] \(1.0 = no"),
        # Issue 33: above the stage's bound, or infinite, the message named echo()'s argument.
        ({"echo": 1001.0}, ValueError, r"config echo must be a number in \(0, 1000\]"),
        ({"echo": float("inf")}, ValueError, r"config echo must be .*got inf; e.g. echo=2"),
        ({"echo_buffer_size": -5}, ValueError, "echo_buffer_size must be >= 0"),
        ({"echo_buffer_size": 100}, ValueError, r"echo_buffer_size=100 shuffles .* echo is off"),
        (
            {"echo_insert": "after_shuffle"},
            ValueError,
            "echo_insert='after_shuffle' is not a point",
        ),
        (
            {
                "echo": 2.0,
                "echo_insert": "before_decode",
                "data_source": "image_folder",
                "data_image_size": 32,
            },
            ValueError,
            "re-read and re-decode every repeat",
        ),
        (
            {
                "echo": 2.0,
                "echo_insert": "after_read",
                "data_source": "image_folder",
                "data_image_size": 32,
            },
            ValueError,
            "save no work",
        ),
        (
            {"echo": 3.0, "data_echo": 2.0},
            ValueError,
            r"sets echo's echo twice: data.echo=2.0 \(its old place\) and echo=3.0",
        ),
        ({"auto_echo_max_factor": 0.5}, ValueError, "auto_echo_max_factor must be 0 .off."),
        (
            {"auto_echo_max_factor": 4.0, "echo": 2.0},
            ValueError,
            "sets the echo factor itself",
        ),
        ({"assist": 1}, TypeError, "config: .*'assist'.*cannot be casted to .*bool"),
        ({"assist_base_prob": 1.5}, ValueError, r"assist_base_prob must be a number in \[0, 1\]"),
        ({"assist_train_every": 0}, ValueError, r"assist_train_every must be >= 1, got 0"),
        ({"assist": True, "assist_base_prob": 0.0}, ValueError, "0 could starve training"),
        (
            {"assist": True, "eval_every_fresh_examples": 100},
            ValueError,
            "does not hold when the Assistant filters",
        ),
        (
            {"priority_top_ratio": -0.1},
            ValueError,
            r"priority_top_ratio must be a number in \[0, 1\]",
        ),
        (
            {"priority": True, "strategy": "tpu"},
            ValueError,
            r"config priority=True with strategy='tpu': .* a TPU step .* for priority sampling\.",
        ),
        ({"priority": True, "assist": True}, ValueError, "cannot be combined with assist=True"),
        (  # before: the dispatcher started and served nothing, silently (issue 33)
            {"priority": True, "data_service_address": "local", "checkpoint_iterator": False},
            ValueError,
            r"priority=True with data.service_address='local': .* set data.service_address=''",
        ),
        (  # before: the first checkpoint failed steps in, naming the disk
            {"data_service_address": "local"},
            ValueError,
            r"checkpoint_iterator=True with data.service_address='local': .* set "
            r"--config.checkpoint_iterator=False",
        ),
        (  # :priority=1,top_ratio=0.3 with the default renew_ratio; before, the sampler's
            # message named neither config field
            {"priority": True, "priority_top_ratio": 0.3},
            ValueError,
            r"config priority_top_ratio=0.3 \+ priority_renew_ratio=0.9 = 1.2: .* lower "
            r"priority_renew_ratio to 0.7 or less \(the config argument renew_ratio=0.7, with "
            r"top_ratio=0.3\)\.",
        ),
        (
            {"priority": True, "eval_every_fresh_examples": 100},
            ValueError,
            "does not hold when priority sampling selects batches",
        ),
        ({"select_ratio": 0.0}, ValueError, r"select_ratio must be in \(0, 1\] \(1 = off\)"),
        ({"select_ratio": 1.5}, ValueError, r"select_ratio must be in \(0, 1\]"),
        ({"select_ratio": 0.001, "data_batch_size": 8}, ValueError, "selects no rows"),
        (
            {"select_ratio": 0.5, "priority": True},
            ValueError,
            "priority=True: priority sampling chooses its own batches",
        ),
        (
            {"priority": True, "prune": True},
            ValueError,
            r"config priority=True cannot be combined with prune=True: priority sampling draws the "
            "train batches",
        ),
        (
            {"priority_top_ratio": 0.5, "pgd_top_ratio": 0.2},
            ValueError,
            r"config sets priority sampling's priority_top_ratio twice: pgd_top_ratio=0.2 \(its "
            r"old name\) and priority_top_ratio=0.5; keep only --config.priority_top_ratio\.",
        ),
        ({"select_mode": "best"}, ValueError, r"select_mode='best': expected one of \('top'"),
    ],
)
def test_technique_config_errors_name_the_field(fields, error, message):
    with pytest.raises(error, match=message):
        run_config.resolve_config(_config(**fields))


@pytest.mark.parametrize(
    "insertion", [("after_augment", "x"), ["after_augment", "x", None], (1, "x", None)]
)
def test_stages_refuse_malformed_insertions(insertion):
    with pytest.raises(TypeError, match=r"\(point, name, transformation\) tuples"):
        techniques.Stages([insertion])


class _FailsToClose(techniques.Technique):
    def close(self):
        raise RuntimeError("learner thread failed")


def test_closing_raises_after_a_clean_run_but_never_masks_the_runs_error():
    with pytest.raises(RuntimeError, match="learner thread failed"), _FailsToClose():
        pass
    with pytest.raises(KeyError, match="the run's own error"), _FailsToClose():
        raise KeyError("the run's own error")


def test_two_techniques_that_select_the_batches_are_refused():
    from echoing import meters
    from trainers import inputs

    config = run_config.resolve_config(_config())
    pair = [
        techniques.PriorityTechnique(
            _examples(), global_batch_size=8, top_ratio=0.5, renew_ratio=0.5, seed=seed
        )
        for seed in (0, 1)
    ]
    train_fn, _ = inputs.dataset_fns(config, pair, meters.EchoMeters())
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0)
    with pytest.raises(ValueError, match="each select the train batches themselves"):
        train_fn(context)


def test_echo_keys_in_the_data_section_move_to_the_technique_with_a_warning():
    with pytest.warns(FutureWarning, match=r"\['echo', 'echo_buffer_size'\] moved"):
        config = run_config.resolve_config(_config(data_echo=2.0, data_echo_buffer_size=64))
    assert (config.echo, config.echo_buffer_size, config.echo_insert) == (2.0, 64, "before_augment")
    # Cleared where they were, so the pipeline does not echo a second time.
    assert config.data.echo is None and config.data.echo_buffer_size is None
    (technique,) = techniques.from_config(_context(config))
    assert technique.name == "echo" and technique.echo_factor() == 2.0


def test_priority_samplings_old_keys_are_renamed_with_a_warning():
    with pytest.warns(
        FutureWarning,
        match=r"--config.pgd is now --config.priority, --config.pgd_renew_ratio is now "
        r"--config.priority_renew_ratio; the old ones are read for one more release",
    ):
        config = run_config.resolve_config(_config(pgd=True, pgd_renew_ratio=0.5))
    assert (config.priority, config.priority_top_ratio, config.priority_renew_ratio) == (
        True,
        0.1,
        0.5,
    )
    assert config.pgd is None and config.pgd_renew_ratio is None  # read once, not twice
    # The same value under both names is one setting, not a conflict.
    with pytest.warns(FutureWarning, match="--config.pgd is now --config.priority"):
        assert run_config.resolve_config(_config(pgd=True, priority=True)).priority
    with pytest.warns(FutureWarning, match="--config.pgd_renew_ratio is now"):
        context = _context(_config(priority=True, pgd_renew_ratio=0.5))
    (technique,) = techniques.from_config(context)
    assert technique.name == "priority" and technique._selection["renew_ratio"] == 0.5


def test_priority_gradients_takes_a_meter_and_reads_its_old_keyword_with_a_warning():
    meter = echoing.PriorityMeter(echoing.PriorityTable(4), [tf.Variable(0.0)])
    assert techniques.PriorityGradients(meter).meter is meter
    with pytest.warns(
        DeprecationWarning,
        match=r"PriorityGradients\(feedback=\.\.\.\) is deprecated and goes in the next release: "
        r"use PriorityGradients\(meter=\.\.\.\)",
    ):
        assert techniques.PriorityGradients(feedback=meter).meter is meter
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="both meter= and"):
        techniques.PriorityGradients(meter, feedback=meter)
    with pytest.raises(
        TypeError, match=r"meter must be an echoing\.PriorityMeter or None, got str"
    ):
        techniques.PriorityGradients("meter")


def test_techniques_declare_what_they_change_in_the_step():
    assert techniques.selects_rows(techniques.InBatchSelection(0.5))
    assert techniques.replaces_gradients(techniques.PriorityGradients())
    assert not techniques.selects_rows(techniques.EchoTechnique(2, insert="after_batch"))


def test_a_hook_without_its_declaration_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match="defines select\\(\\) but does not declare selects_rows"):

        class Forgot(techniques.Technique):
            def select(self, batch, score, step):
                return batch

    with pytest.raises(TypeError, match="declares replaces_gradients = True; define gradients"):

        class Claims(techniques.Technique):
            replaces_gradients = True


def test_the_compatibility_table_names_only_techniques_it_can_switch():
    from echoing._src import compatibility

    named = {name for pair in compatibility.INCOMPATIBLE for name in pair}
    assert named <= set(compatibility.SWITCHES)
    for other in ("assist", "prune"):  # echo runs with the Assistant, and with pruning
        compatibility.check(run_config.resolve_config(_config(echo=2.0, **{other: True})))


def test_priority_with_an_augmentation_says_it_does_not_run(load_config):
    # Before: :priority=1 trained without the config's augmentation, and said nothing.
    from echoing._src.priority import technique as priority_technique

    config = run_config.resolve_config(_config(priority=True))
    context = types.SimpleNamespace(config=config)
    message = r"data.augment='mnist1d': priority sampling draws the train batches by id from "
    # The context holds only the config the check reads: what follows it may fail.
    with (
        pytest.warns(UserWarning, match=message + "the decoded examples, so the augmentation"),
        contextlib.suppress(Exception),
    ):
        priority_technique.from_config(context)
    assert load_config("mnist1d", "priority=1,smoke").data.augment == "none"  # its own: quiet
