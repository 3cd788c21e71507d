"""Tests for the live echo factor and the AutoEcho controller."""

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


def test_a_live_factor_must_be_a_float_scalar():
    with pytest.raises(TypeError, match=r"scalar float tf\.Variable, got dtype int32"):
        echo(tf.Variable(2))
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        echo(tf.Variable([1.0, 2.0]))


def _simulate(auto, upstream_seconds, compute_seconds, *, steps=40, noise=0.0, seed=0):
    """A pipelined loop: a step takes max(t_up / e, t_down) and waits for input for the rest.

    With ``noise``, each step's upstream and compute times vary uniformly by ± ``noise``.
    ``upstream_seconds`` may be a function of the observation index (upstream changing speed).
    """
    rng = np.random.default_rng(seed)
    factors = []
    for index in range(steps):
        factor = float(auto.factor.numpy())
        upstream = upstream_seconds(index) if callable(upstream_seconds) else upstream_seconds
        upstream *= (1 + noise * rng.uniform(-1, 1)) / factor
        compute = compute_seconds * (1 + noise * rng.uniform(-1, 1))
        step_seconds = max(upstream, compute)
        factors.append(
            auto.observe(step_seconds=step_seconds, input_wait_seconds=step_seconds - compute)
        )
    return factors


@pytest.mark.parametrize(
    "upstream_seconds,low,high",
    [
        (0.040, 3.6, 4.0),  # R = 4: settles just under R (the wait left is under 10%)
        (0.060, 5.4, 6.0),  # R = 6
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
    factors = _simulate(auto, 0.060, 0.010, steps=6)  # R = 6
    assert factors[0] == pytest.approx(3.5)  # halfway to the first estimate, R itself
    assert factors[3] >= 5.4


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "upstream_seconds,low,high",
    [
        (0.040, 3.0, 4.6),  # R = 4: within 25% under and 15% over (the noise is ±16%)
        (0.060, 4.5, 6.9),  # R = 6
        (0.005, 1.0, 1.0),  # not input-bound: noise alone never echoes
    ],
)
def test_controller_is_steady_under_timing_noise(upstream_seconds, low, high, seed):
    auto = echoing.AutoEcho(max_factor=8.0)
    factors = _simulate(auto, upstream_seconds, 0.010, steps=60, noise=0.08, seed=seed)
    settled = factors[-20:]
    assert low <= min(settled) and max(settled) <= high


def test_controller_follows_upstream_changing_speed():
    auto = echoing.AutoEcho(max_factor=8.0)
    # R = 6 for 30 observations, then upstream gets 3x faster (R = 2), then slower (R = 4).
    phases = {0: 0.060, 30: 0.020, 90: 0.040}

    def upstream(index):
        return phases[max(start for start in phases if start <= index)]

    factors = _simulate(auto, upstream, 0.010, steps=120)
    assert 5.4 <= factors[29] <= 6.0
    assert min(factors[80:90]) >= 1.8 and max(factors[80:90]) <= 2.0
    assert 3.6 <= factors[-1] <= 4.0


def test_controller_decays_to_one_when_input_stops_being_the_bottleneck():
    auto = echoing.AutoEcho(initial_factor=4.0, decay=0.5)
    for _ in range(30):
        auto.observe(step_seconds=0.01, input_wait_seconds=0.0)
    assert float(auto.factor.numpy()) == pytest.approx(1.0, abs=1e-6)
    assert auto.last_wait_fraction == 0.0


def test_the_controller_stage_reads_its_factor():
    auto = echoing.AutoEcho(initial_factor=3.0)
    dataset = tf.data.Dataset.range(10).apply(auto.echo(seed=0))
    assert len(list(dataset)) == 30
    auto.factor.assign(1.0)
    assert len(list(dataset)) == 10


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"max_factor": 0.5}, ValueError, r"max_factor must be in \[1\.0, inf\], got 0\.5"),
        ({"initial_factor": 9.0}, ValueError, r"initial_factor must be in \[1\.0, 8\.0\]"),
        ({"smoothing": 1.5}, ValueError, r"smoothing must be in \[0\.0, 1\.0\]"),
        ({"decay": "slow"}, TypeError, r"decay must be a number, got 'slow'"),
    ],
)
def test_bad_controller_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        echoing.AutoEcho(**kwargs)


@pytest.mark.parametrize(
    ("step_seconds", "input_wait_seconds", "message"),
    [
        (0.0, 0.0, r"step_seconds must be > 0, got 0\.0"),
        (float("nan"), 0.0, r"step_seconds must be > 0, got nan"),
        (0.01, -0.001, r"input_wait_seconds must be in \[0, step_seconds=0\.01\], got -0\.001"),
        (0.01, 0.02, r"input_wait_seconds must be in \[0, step_seconds=0\.01\], got 0\.02"),
        (0.01, float("nan"), r"got nan"),
    ],
)
def test_observe_rejects_impossible_times(step_seconds, input_wait_seconds, message):
    auto = echoing.AutoEcho(initial_factor=2.0)
    with pytest.raises(ValueError, match=message):
        auto.observe(step_seconds=step_seconds, input_wait_seconds=input_wait_seconds)
    assert float(auto.factor.numpy()) == 2.0  # a refused observation changes nothing


def test_echo_on_the_trainer_side_of_a_tf_data_service():
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    worker = tf.data.experimental.service.WorkerServer(
        # Default worker address: localhost on a free port (loopback only).
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
