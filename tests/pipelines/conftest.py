"""Shared fixtures: one tiny MNIST-1D stored once per test session, and configs over it."""

import pytest

import echoing
import pipelines

# Sizes of the tiny MNIST-1D every test shares (generation is ~1.5 ms per example).
TINY_TRAIN, TINY_EVAL = 200, 50


@pytest.fixture(scope="session")
def mnist1d_dir(tmp_path_factory) -> str:
    """A data_dir holding a prepared tiny MNIST-1D (generated once per session)."""
    path = str(tmp_path_factory.mktemp("mnist1d_data"))
    pipelines.make_datasets(_tiny_config(path), seed=0)
    return path


@pytest.fixture
def tiny_config(mnist1d_dir):
    """``tiny_config(**overrides)`` -> a data config over the shared tiny MNIST-1D."""
    return lambda **overrides: _tiny_config(mnist1d_dir, **overrides)


@pytest.fixture
def echo_at():
    """``echo_at(point, factor, buffer_size=None, seed=0)`` -> the ``insertions`` that echo at
    ``point``, seeded as the trainer's echo technique is (``stage_seed(seed, "echo")``)."""

    def insertions(point: str, factor: float, buffer_size: int | None = None, seed: int = 0):
        echo = echoing.echo(
            factor, buffer_size=buffer_size, seed=pipelines.stage_seed(seed, "echo")
        )
        return [(point, "echo", echo)]

    return insertions


@pytest.fixture
def tiny_sizes():
    return TINY_TRAIN, TINY_EVAL


def _tiny_config(data_dir: str, **overrides):
    config = pipelines.default_data_config()
    config.data_dir = data_dir
    config.num_train, config.num_eval = TINY_TRAIN, TINY_EVAL
    config.batch_size, config.eval_batch_size = 8, 16
    config.shuffle_buffer = 64
    for key, value in overrides.items():
        config[key] = value
    return config
