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


def _simulate(auto, upstream_seconds, compute_seconds, steps=40):
    """A pipelined loop: each step takes max(t_up / e, t_down)."""
    factors = []
    for _ in range(steps):
        factor = float(auto.factor.numpy())
        step_seconds = max(upstream_seconds / factor, compute_seconds)
        factors.append(auto.observe(step_seconds=step_seconds, compute_seconds=compute_seconds))
    return factors


@pytest.mark.parametrize(
    "upstream_seconds,compute_seconds,max_factor,low,high",
    [
        (0.040, 0.010, 8.0, 3.5, 4.0),  # R = 4: settles just under R (no wait, fresh data)
        (0.060, 0.010, 8.0, 5.2, 6.0),  # R = 6
        (0.200, 0.010, 8.0, 8.0, 8.0),  # R = 20: clipped at max_factor
        (0.005, 0.010, 8.0, 1.0, 1.0),  # not input-bound: stays at 1, echo is free
    ],
)
def test_controller_moves_the_factor_towards_r(
    upstream_seconds, compute_seconds, max_factor, low, high
):
    auto = echoing.AutoEcho(max_factor=max_factor)
    factors = _simulate(auto, upstream_seconds, compute_seconds)
    settled = factors[-10:]
    assert low - 1e-6 <= min(settled) and max(settled) <= high + 1e-6


def _simulate_shared_host(auto, upstream_seconds, compute_seconds, slowdown, noise, seed):
    """As _simulate, but the step's real compute is ``slowdown`` x the reported measurement (the
    input pipeline shares the host) and every step time has uniform relative noise ±``noise``."""
    rng = np.random.default_rng(seed)
    factors = []
    for _ in range(60):
        factor = float(auto.factor.numpy())
        step_seconds = max(upstream_seconds / factor, compute_seconds * slowdown)
        step_seconds *= 1 + noise * rng.uniform(-1, 1)
        factors.append(auto.observe(step_seconds=step_seconds, compute_seconds=compute_seconds))
    return factors


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "upstream_seconds,slowdown,low,high",
    [
        # R = upstream / real compute. The reported compute is 1.3x too low (host contention):
        # trusting it would push the factor to R·1.3, or to max_factor when not input-bound.
        (0.052, 1.3, 3.4, 4.4),  # R = 4
        (0.078, 1.3, 5.2, 7.0),  # R = 6
        (0.005, 1.3, 1.0, 1.4),  # not input-bound: decaying to 1 despite the 30% "wait"
        (0.005, 1.0, 1.0, 1.1),  # not input-bound, honest measurement: noise must not echo
        (0.060, 1.0, 5.2, 6.4),  # R = 6, honest measurement, noisy steps
    ],
)
def test_controller_learns_the_real_compute_floor_under_contention_and_noise(
    upstream_seconds, slowdown, low, high, seed
):
    auto = echoing.AutoEcho(max_factor=8.0)
    factors = _simulate_shared_host(auto, upstream_seconds, 0.010, slowdown, 0.08, seed)
    settled = factors[-10:]
    assert low <= min(settled) and max(settled) <= high
    assert auto.compute_floor == pytest.approx(0.010 * slowdown, rel=0.1)


def test_controller_decays_to_one_when_input_stops_being_the_bottleneck():
    auto = echoing.AutoEcho(initial_factor=4.0, decay=0.5)
    for _ in range(30):
        auto.observe(step_seconds=0.01, compute_seconds=0.01)
    assert float(auto.factor.numpy()) == pytest.approx(1.0, abs=1e-6)
    assert auto.last_wait_fraction == pytest.approx(0.0, abs=1e-5)


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


def test_observe_rejects_non_positive_times():
    with pytest.raises(ValueError, match=r"must be > 0, got 0\.0 and 0\.01"):
        echoing.AutoEcho().observe(step_seconds=0.0, compute_seconds=0.01)


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
