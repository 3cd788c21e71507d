"""Tests for the live echo factor and the AutoEcho controller."""

import os
import re
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import echoing
from echoing import echo


@pytest.mark.parametrize("implementation", ["vectorized", "per_element"])
def test_a_live_factor_changes_an_already_built_dataset(implementation):
    factor = tf.Variable(2.0)
    dataset = tf.data.Dataset.range(50).apply(echo(factor, seed=0, implementation=implementation))
    assert len(list(dataset)) == 100
    factor.assign(3.0)
    assert len(list(dataset)) == 150
    factor.assign(1.5)
    counts = np.bincount([int(x) for x in dataset], minlength=50)
    assert set(np.unique(counts)) == {1, 2}


def _outputs_before_the_new_factor(dataset_fn, *, consumed=10, pause=0.0):
    """Outputs of ``dataset_fn().apply(auto.echo())`` that pass after the controller moves the
    factor from 1 to 3 before the first input echoed 3 times, ``consumed`` outputs in and
    ``pause`` seconds later (the consumer busy, as with a training step).

    Every input is distinct, so at factor 1 no output repeats; the first run of three equal
    outputs is the first input that read the new factor.
    """
    auto = echoing.AutoEcho(max_factor=8.0)
    iterator = iter(dataset_fn().apply(auto.echo()))
    for _ in range(consumed):
        next(iterator)
    time.sleep(pause)
    auto.factor.assign(3.0)
    keys = []
    for element in iterator:
        keys.append(
            repr(
                [
                    t.to_list() if hasattr(t, "to_list") else t.numpy().tolist()
                    for t in tf.nest.flatten(element, expand_composites=False)
                ]
            )
        )
        if len(keys) >= 3 and keys[-1] == keys[-2] == keys[-3]:
            return len(keys) - 3
    raise AssertionError("the new factor never showed")


def _examples(count, shape=(), dtype=tf.int64):
    return tf.data.Dataset.range(count).map(lambda i: tf.fill(shape, tf.cast(i, dtype)))


def _labelled(count):
    return tf.data.Dataset.range(count).map(
        lambda i: {"inputs": tf.fill([40], tf.cast(i, tf.float32)), "label": i % 10, "id": i}
    )


def _tokens(count):
    # Variable-length sequences (text): 1 to 5 tokens.
    return tf.data.Dataset.range(count).map(lambda i: tf.fill([i % 5 + 1], i))


# (elements, the most outputs that may pass at the old factor). Examples are decided in groups
# (256 on the vectorised path, which a parallel copying map may compute up to about one per core
# ahead; 64 per element): a few batches. Batches are training steps: the factor must take effect
# at the next batch (it read 54-92 batches late before echo read it per batch). Nothing in the
# per-batch stage reads ahead, so none passes here (the batch in progress, already put out,
# keeps its count); 1 is the contract, the next batch. What read ahead was tf.data's injected
# final prefetch: under load 1-5 batches passed, now turned off (echo._no_injected_prefetch).
_AHEAD = 256 * (2 + (os.cpu_count() or 1))
FACTOR_LAGS = {
    "scalar examples": (lambda: _examples(2000 + 2 * _AHEAD), _AHEAD),
    "labelled examples": (lambda: _labelled(2000 + 2 * _AHEAD), _AHEAD),
    "large examples": (lambda: _examples(200, [128, 128, 3], tf.uint8), 64),
    "batches of scalars": (lambda: _examples(4000).batch(8), 1),
    "batches, drop_remainder": (lambda: _examples(4000, [40]).batch(8, drop_remainder=True), 1),
    "labelled batches": (lambda: _labelled(8000).batch(32), 1),
    "labelled batches, drop_remainder, prefetched": (
        lambda: _labelled(8000).batch(32, drop_remainder=True).prefetch(2),
        1,
    ),
    "image batches": (lambda: _examples(2000, [32, 32, 3], tf.uint8).batch(16), 1),
    "padded token batches": (lambda: _tokens(4000).padded_batch(8), 1),
    "ragged token batches": (lambda: _tokens(4000).ragged_batch(8), 1),
}


@pytest.mark.parametrize("elements", list(FACTOR_LAGS))
def test_a_new_factor_takes_effect_within_a_bounded_number_of_outputs(elements):
    dataset_fn, most = FACTOR_LAGS[elements]
    assert _outputs_before_the_new_factor(dataset_fn) <= most


BATCH_KINDS = [elements for elements, (_, most) in FACTOR_LAGS.items() if most == 1]


@pytest.mark.parametrize("elements", BATCH_KINDS)
def test_a_new_factor_takes_effect_at_the_next_batch_after_a_training_step(elements):
    # 50 ms between the last batch taken and the update, as a training step takes: whatever
    # runs ahead of the consumer has time to fill. tf.data's injected final prefetch let 2-8
    # batches pass here in every run; without the pause only when the machine was loaded.
    dataset_fn, most = FACTOR_LAGS[elements]
    assert _outputs_before_the_new_factor(dataset_fn, pause=0.05) <= most


def test_per_batch_echo_turns_off_the_injected_prefetch_and_only_it():
    def inject_prefetch(dataset):
        return dataset.options().experimental_optimization.inject_prefetch

    batches = tf.data.Dataset.range(8).batch(2)
    assert inject_prefetch(batches.apply(echo(tf.Variable(2.0)))) is False
    # Examples and static factors read no live factor per element: tf.data's defaults stay.
    assert inject_prefetch(tf.data.Dataset.range(8).apply(echo(tf.Variable(2.0)))) is None
    assert inject_prefetch(batches.apply(echo(2))) is None
    assert inject_prefetch(batches.apply(echo(1.5, seed=0))) is None
    # A setting of the user's after echo wins.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = True
    assert inject_prefetch(batches.apply(echo(tf.Variable(2.0))).with_options(options)) is True


def test_a_live_factor_must_be_a_float_scalar():
    with pytest.raises(TypeError, match=r"scalar float tf\.Variable, got dtype int32"):
        echo(tf.Variable(2))
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        echo(tf.Variable([1.0, 2.0]))


def _simulate(auto, upstream_seconds, compute_seconds, *, loops=40, noise=0.0, seed=0):
    """A pipelined loop of 20-step inner loops: a step takes max(t_up / e, t_down) and waits
    for input for the rest.

    With ``noise``, each loop's upstream and compute times vary uniformly by ± ``noise``.
    ``upstream_seconds`` may be a function of the loop index (upstream changing speed).
    """
    rng = np.random.default_rng(seed)
    factors = []
    for index in range(loops):
        factor = float(auto.factor.numpy())
        upstream = upstream_seconds(index) if callable(upstream_seconds) else upstream_seconds
        upstream *= (1 + noise * rng.uniform(-1, 1)) / factor
        compute = compute_seconds * (1 + noise * rng.uniform(-1, 1))
        step_seconds = max(upstream, compute)
        factors.append(
            auto.observe(
                seconds=20 * step_seconds,
                input_wait_seconds=20 * (step_seconds - compute),
                steps=20,
            )
        )
    return factors


@pytest.mark.parametrize(
    "upstream_seconds,low,high",
    [
        (0.040, 3.4, 4.0),  # R = 4: settles just under R (where about 10% of the time waits)
        (0.060, 5.1, 6.0),  # R = 6
        (0.200, 8.0, 8.0),  # R = 20: clipped at max_factor
        (0.005, 1.0, 1.0),  # not input-bound: stays at 1, echo costs nothing
        (0.0105, 1.0, 1.05),  # R = 1.05: a 5% wait is not worth echo
    ],
)
def test_controller_moves_the_factor_towards_r(upstream_seconds, low, high):
    auto = echoing.AutoEcho(max_factor=8.0)
    factors = _simulate(auto, upstream_seconds, 0.010)
    settled = factors[-10:]
    assert low - 1e-6 <= min(settled) and max(settled) <= high + 1e-6


def test_controller_reaches_r_within_a_few_observations():
    auto = echoing.AutoEcho(max_factor=8.0)
    factors = _simulate(auto, 0.060, 0.010, loops=6)  # R = 6
    assert factors[0] == pytest.approx(3.5)  # halfway to the first estimate, R itself
    assert factors[3] >= 5.4


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "upstream_seconds,low,high",
    [
        (0.040, 2.9, 4.4),  # R = 4: within 28% under and 10% over (the noise is ±16%)
        (0.060, 4.3, 6.6),  # R = 6
        (0.005, 1.0, 1.0),  # not input-bound: noise alone never echoes
    ],
)
def test_controller_is_steady_under_timing_noise(upstream_seconds, low, high, seed):
    auto = echoing.AutoEcho(max_factor=8.0)
    factors = _simulate(auto, upstream_seconds, 0.010, loops=60, noise=0.08, seed=seed)
    settled = factors[-20:]
    assert low <= min(settled) and max(settled) <= high


def test_controller_follows_upstream_changing_speed():
    auto = echoing.AutoEcho(max_factor=8.0)
    # R = 6 for 30 observations, then upstream gets 3x faster (R = 2), then slower (R = 4).
    phases = {0: 0.060, 30: 0.020, 90: 0.040}

    def upstream(index):
        return phases[max(start for start in phases if start <= index)]

    factors = _simulate(auto, upstream, 0.010, loops=120)
    assert 5.1 <= factors[29] <= 6.0
    assert min(factors[80:90]) >= 1.7 and max(factors[80:90]) <= 2.0
    assert 3.4 <= factors[-1] <= 4.0


def _bursty(auto, *, burst_batches, period, compute_seconds, loops=600, steps=20):
    """Upstream delivers ``burst_batches`` fresh batches at once every ``period`` seconds (a
    reader fetching big blocks); returns (end time, factor) of each inner loop."""
    now, buffered, next_burst, trace = 0.0, float(burst_batches), period, []
    for _ in range(loops):
        factor, start, wait = float(auto.factor.numpy()), now, 0.0
        for _ in range(steps):
            while next_burst <= now:
                buffered, next_burst = buffered + burst_batches, next_burst + period
            while buffered < 1.0 / factor:  # blocked until the next burst
                wait, now = wait + next_burst - now, next_burst
                buffered, next_burst = buffered + burst_batches, next_burst + period
            buffered -= 1.0 / factor
            now += compute_seconds
        auto.observe(seconds=now - start, input_wait_seconds=wait, steps=steps)
        trace.append((now, factor))
    return np.array(trace)


def test_controller_averages_a_bursty_upstream_to_its_mean_rate():
    auto = echoing.AutoEcho(max_factor=8.0)
    # 100 batches every 4 s: 40 ms per fresh batch on average, R = 4, in bursts that last
    # about 20 inner loops, so loops alternate between long stalls and no wait at all.
    trace = _bursty(auto, burst_batches=100, period=4.0, compute_seconds=0.010)
    ends, factors = trace[:, 0], trace[:, 1]
    durations = np.diff(ends, prepend=0.0)
    late = ends > ends[-1] / 2
    mean_factor = np.sum(factors[late] * durations[late]) / np.sum(durations[late])
    assert 3.4 <= mean_factor <= 4.6


def test_the_window_forgets_exponentially_and_estimates_r_from_its_sums():
    auto = echoing.AutoEcho(initial_factor=2.0, window_seconds=1.0, smoothing=0.0)
    # 1 s, half of it waiting, 10 steps at e = 2 (5 fresh batches): R = 2 / (1 - 0.5) = 4.
    assert auto.observe(seconds=1.0, input_wait_seconds=0.5, steps=10) == pytest.approx(4.0)
    # 1 s without waiting, 10 steps at e = 4 (2.5 fresh batches); the first second is weighted
    # by exp(-1 s / 1 s).
    forget = np.exp(-1.0)
    time, wait = forget * 1.0 + 1.0, forget * 0.5
    steps, fresh = forget * 10 + 10, forget * 5 + 2.5
    factor = auto.observe(seconds=1.0, input_wait_seconds=0.0, steps=10)
    assert auto.last_wait_fraction == pytest.approx(wait / time)  # 13%: still input-bound
    assert factor == pytest.approx(steps / fresh * time / (time - wait), rel=1e-6)


def test_a_zero_window_judges_each_observation_alone():
    auto = echoing.AutoEcho(initial_factor=2.0, window_seconds=0.0, smoothing=0.0, decay=0.5)
    auto.observe(seconds=1.0, input_wait_seconds=0.5, steps=10)
    factor = auto.observe(seconds=1.0, input_wait_seconds=0.0, steps=10)
    assert auto.last_wait_fraction == 0.0
    assert factor == pytest.approx(1.0 + (4.0 - 1.0) * 0.5)  # decayed for 1 s from 4


def test_controller_decays_to_one_when_input_stops_being_the_bottleneck():
    auto = echoing.AutoEcho(initial_factor=4.0, decay=0.5)
    for _ in range(30):
        auto.observe(seconds=1.0, input_wait_seconds=0.0, steps=10)
    assert float(auto.factor.numpy()) == pytest.approx(1.0, abs=1e-6)
    assert auto.last_wait_fraction == 0.0


def test_the_controller_stage_reads_its_factor():
    auto = echoing.AutoEcho(initial_factor=3.0)
    dataset = tf.data.Dataset.range(10).apply(auto.echo(seed=0))
    assert len(list(dataset)) == 30
    auto.factor.assign(1.0)
    assert len(list(dataset)) == 10


UNOBSERVED = (
    r"echoing\.AutoEcho: its echo stage has put out {} {} \(copies included\) and nothing has "
    r"called observe\(\)"
)


def test_reads_after_a_fit_with_the_callback_are_said_with_the_factor_it_left(capfd):
    # Issue 33: a fit with AutoEchoCallback took the factor to 8, and a later fit without the
    # callback echoed a pipeline that kept up 8 times for 1,200 steps, in silence (the check
    # was silenced for good by the first observation).
    auto = echoing.AutoEcho(initial_factor=1.0, max_factor=8)
    callback = echoing.keras.AutoEchoCallback(auto)
    batches = tf.data.Dataset.range(2400).batch(2).apply(auto.echo())
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    fit_batches = batches.map(lambda b: (tf.cast(b[:, None], tf.float32), tf.zeros([2, 1])))
    model.fit(fit_batches.apply(callback.stamp), steps_per_epoch=5, callbacks=[callback], verbose=0)
    assert "AutoEcho: its echo stage" not in capfd.readouterr().err  # observed: nothing to say
    auto.factor.assign(3.0)  # where the fit might have left it
    assert sum(1 for _ in batches.take(1100)) == 1100  # no callback, no observe()
    err = capfd.readouterr().err
    assert len(re.findall(UNOBSERVED.format(r"10\d\d", "batches"), err)) == 1, err  # 3 a read
    assert "so the factor stays at 3 " in err


def test_a_factor_nothing_observes_is_said_once_on_stderr(capfd):
    # Issue 33: auto.echo() in fit without AutoEchoCallback (or a loop without observe) echoed
    # at the initial factor for ever, in silence.
    auto = echoing.AutoEcho(initial_factor=1.0)
    batches = tf.data.Dataset.range(2400).batch(2).apply(auto.echo())
    assert sum(1 for _ in batches) == 1200
    err = capfd.readouterr().err
    assert len(re.findall(UNOBSERVED.format(1000, "batches"), err)) == 1, err
    assert "so the factor stays at 1 " in err
    assert "AutoEchoCallback(auto) in callbacks" in err and "auto.observe(seconds=" in err
    assert sum(1 for _ in batches) == 1200
    assert "AutoEcho" not in capfd.readouterr().err  # once


def test_an_example_stage_nothing_observes_is_said_past_its_shuffle_buffer(capfd, monkeypatch):
    from echoing._src.echo.auto_echo import UnobservedCheck

    monkeypatch.setattr(UnobservedCheck, "EXAMPLES", 1000)
    auto = echoing.AutoEcho(initial_factor=2.0)
    examples = tf.data.Dataset.range(2000).apply(auto.echo(buffer_size=500, seed=0))
    iterator = iter(examples)
    for _ in range(2 * 1400):  # counted where the factor is read, a group of 256 at a time
        next(iterator)
    err = capfd.readouterr().err
    assert re.search(UNOBSERVED.format(1536, "examples"), err), err  # past 1000 + 500
    assert "so the factor stays at 2 " in err


def test_a_factor_that_is_observed_or_driven_is_not_warned_about(capfd):
    auto = echoing.AutoEcho()
    batches = tf.data.Dataset.range(2400).batch(2).apply(auto.echo())
    for step, _ in enumerate(batches):
        if step == 900:  # a loop observing late, but before the check's count
            auto.observe(seconds=0.01, input_wait_seconds=0.0, steps=1)
    driven = echoing.AutoEcho()
    driven.unobserved_check.silence()  # what AutoEchoCallback and the trainer do
    assert sum(1 for _ in tf.data.Dataset.range(2400).batch(2).apply(driven.echo())) == 1200
    assert "AutoEcho" not in capfd.readouterr().err


def test_the_check_leaves_auto_echo_checkpoints_as_they_were(tmp_path):
    auto = echoing.AutoEcho(initial_factor=3.0)
    assert [v.name for v in auto.variables] == [auto.factor.name]
    path = tf.train.Checkpoint(auto=auto).save(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path)]
    assert [name for name in saved if name.startswith("auto/")] == [
        "auto/factor/.ATTRIBUTES/VARIABLE_VALUE"
    ]
    restored = echoing.AutoEcho()
    tf.train.Checkpoint(auto=restored).restore(path).assert_consumed()
    assert float(restored.factor.numpy()) == 3.0


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"max_factor": 0.5}, ValueError, r"max_factor must be in \[1\.0, 1000\.0\], got 0\.5"),
        # Above echo's MAX_FACTOR the stage would fail while iterating; refused at once instead.
        ({"max_factor": 2000}, ValueError, r"max_factor must be in \[1\.0, 1000\.0\], got 2000"),
        ({"max_factor": float("inf")}, ValueError, r"got inf"),
        ({"initial_factor": 9.0}, ValueError, r"initial_factor must be in \[1\.0, 8\.0\]"),
        ({"smoothing": 1.5}, ValueError, r"smoothing must be in \[0\.0, 1\.0\]"),
        ({"decay": "slow"}, TypeError, r"decay must be a number, got 'slow'"),
    ],
)
def test_bad_controller_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        echoing.AutoEcho(**kwargs)


@pytest.mark.parametrize(
    ("seconds", "input_wait_seconds", "steps", "message"),
    [
        (0.0, 0.0, 1, r"seconds must be > 0, got 0\.0"),
        (float("nan"), 0.0, 1, r"seconds must be > 0, got nan"),
        (0.01, -0.001, 1, r"input_wait_seconds must be in \[0, seconds=0\.01\], got -0\.001"),
        (0.01, 0.02, 1, r"input_wait_seconds must be in \[0, seconds=0\.01\], got 0\.02"),
        (0.01, float("nan"), 1, r"got nan"),
        (0.01, 0.0, 0, r"steps must be an int >= 1, got 0"),
        (0.01, 0.0, 2.5, r"steps must be an int >= 1, got 2\.5"),
    ],
)
def test_observe_rejects_impossible_measurements(seconds, input_wait_seconds, steps, message):
    auto = echoing.AutoEcho(initial_factor=2.0)
    with pytest.raises(ValueError, match=message):
        auto.observe(seconds=seconds, input_wait_seconds=input_wait_seconds, steps=steps)
    assert float(auto.factor.numpy()) == 2.0  # a refused observation changes nothing


def test_echo_on_the_trainer_side_of_a_tf_data_service():
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    worker = tf.data.experimental.service.WorkerServer(
        # Default worker address: localhost on a free port (what it registers as; it listens on
        # every interface, see pipelines/service.py).
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher.target.split("://")[1]
        )
    )
    try:
        assert dispatcher.target.startswith("grpc://localhost:")
        upstream = tf.data.Dataset.range(20).map(lambda x: x * 10)  # runs on the service worker
        dataset = upstream.apply(
            tf.data.experimental.service.distribute(
                processing_mode="parallel_epochs", service=dispatcher.target
            )
        ).apply(echo(2))
        values = [int(x) for x in dataset]
        assert values == [10 * i for i in range(20) for _ in range(2)]
    finally:
        worker.stop()
        dispatcher.stop()
