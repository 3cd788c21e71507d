"""--config.data.echo* on the command line: echo's old flags still work, for one release."""

from pathlib import Path

import pytest
from absl import app

from trainers import train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_an_old_flag_sets_echo_over_the_config_file_with_a_warning(parse_binary_flags):
    # configs/text_lm.py sets echo_insert=after_decode itself; the user's old flag wins.
    argv = ["train", f"--config={CONFIGS / 'text_lm.py'}", "--workdir=/x"]
    config = parse_binary_flags(
        [*argv, "--config.data.echo=2", "--config.data.echo_insert=after_batch"]
    )
    with pytest.warns(FutureWarning, match=r"\['echo', 'echo_insert'\] moved"):
        train._move_echo_flags(config)
    assert (config.echo, config.echo_insert) == (2.0, "after_batch")
    assert config.data.echo is None and config.data.echo_insert is None


@pytest.mark.parametrize("new", ["--config.echo=1", "--config.echo=3"])
def test_an_old_and_a_new_flag_for_one_field_are_refused(new, parse_binary_flags):
    # --config.echo=1 is the default's value, yet the user gave it: not silently overridden.
    argv = ["train", f"--config={CONFIGS / 'mnist1d.py'}:smoke", "--workdir=/x"]
    config = parse_binary_flags([*argv, "--config.data.echo=2", new])
    with pytest.raises(app.UsageError, match=r"--config.data.echo and --config.echo both set"):
        train._move_echo_flags(config)
