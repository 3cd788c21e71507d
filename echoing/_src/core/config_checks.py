"""Value checks for the config fields techniques add (clear messages naming key and value).

Example::

    from echoing.techniques import config_checks

    config_checks.fraction("priority_top_ratio", 0.1)  # passes
    # config_checks.fraction("priority_top_ratio", 2.0)  -> ValueError naming the key and value
"""

from __future__ import annotations

from echoing._src.core.checks import in_interval


def fraction(key: str, value) -> None:
    # Types are the config's business (a type-safe ConfigDict); ranges are checked here.
    if not in_interval(value, 0, 1):
        raise ValueError(f"config {key} must be a number in [0, 1], got {value!r}.")


def refuse_fresh_evaluation(config, technique: str) -> None:
    """Refuses ``eval_every_fresh_examples``, which assumes batch / echo factor fresh per step."""
    if config.eval_every_fresh_examples:
        raise ValueError(
            "config eval_every_fresh_examples counts fresh examples as batch_size / echo factor "
            f"per step, which does not hold when {technique}; set it to 0 and use "
            "eval_every_steps."
        )


def refuse_options_when_off(config, defaults: dict, *, switch: str, example: str) -> None:
    """Refuses a technique's options set away from their ``defaults`` (key -> default) while
    the technique is off: the run would silently train the baseline. ``switch`` names the field
    that turns it on, ``example`` a config argument that does (e.g. ``"prune=1,prune_ratio=0.3"``).
    """
    changed = [
        f"{key}={config[key]!r}" for key, default in defaults.items() if config[key] != default
    ]
    if changed:
        raise ValueError(
            f"config {', '.join(changed)} with {switch} off: the technique is off, so the run "
            f"would train without it. Turn it on (e.g. --config=configs/mnist1d.py:{example}) "
            "or leave its options at their defaults."
        )
