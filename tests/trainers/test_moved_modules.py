"""The asynchronous trainer's modules moved into trainers/passm/; the old paths still import."""

import importlib
import sys

import pytest

MOVED = {
    "trainers.async_experiment": "trainers.passm.experiment",
    "trainers.async_partitioned": "trainers.passm.parameter_server",
    "trainers.async_state": "trainers.passm.state",
    "trainers.block_partition": "trainers.passm.blocks",
    "trainers.passm_schedule": "trainers.passm.schedule",
}


@pytest.mark.parametrize(("old", "new"), MOVED.items())
def test_an_old_path_is_the_new_module_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}; import it from there"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_old_parameter_server_path_still_holds_the_shared_loop():
    sys.modules.pop("trainers.async_partitioned", None)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("trainers.async_partitioned")
    from trainers.passm import phased

    assert old.PhasedTrainer is phased.PhasedTrainer
    assert old.ParameterServerLostError is phased.ParameterServerLostError
