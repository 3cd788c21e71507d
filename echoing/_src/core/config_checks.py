"""Value checks for the config fields techniques add (clear messages naming key and value).

Example::

    from echoing._src.core import config_checks

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


# Each technique's switch, its options (config key -> default) and a config argument that turns
# it on with one: an option set while its technique is off would silently train the baseline.
OPTIONS_WHEN_OFF = {
    "priority": (
        {"priority_top_ratio": 0.1, "priority_renew_ratio": 0.9},
        "priority=1,top_ratio=0.2",
    ),
    "prune": (
        {"prune_ratio": 0.5, "prune_anneal": 0.125, "prune_epochs": 0},
        "prune=1,prune_ratio=0.3",
    ),
    "assist": (
        {
            "assist_base_prob": 0.3,
            "assist_reweight": False,
            "assist_asynchronous": True,
            "assist_train_every": 1,
        },
        "assist=1,assist_base_prob=0.5",
    ),
}


def refuse_options_when_off(config, switch: str) -> None:
    """Refuses ``switch``'s options (``OPTIONS_WHEN_OFF``) set away from their defaults while
    the technique is off: the run would silently train the baseline. (An option given at its
    default value is the binary's to catch: it knows what the command line gave.)"""
    defaults, example = OPTIONS_WHEN_OFF[switch]
    changed = [
        f"{key}={config[key]!r}" for key, default in defaults.items() if config[key] != default
    ]
    if changed:
        raise ValueError(options_when_off_message(changed, switch, example))


def options_when_off_message(given: list[str], switch: str, example: str) -> str:
    return (
        f"config {', '.join(given)} with {switch} off: the technique is off, so the run would "
        f"train without it. Turn it on (e.g. --config=configs/mnist1d.py:{example}) or leave "
        "its options out."
    )
