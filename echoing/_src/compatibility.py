"""Which techniques one run can combine: one table, instead of checks inside each technique.

Example::

    from echoing._src import compatibility

    sorted(compatibility.INCOMPATIBLE)[0]  # ('auto_echo', 'echo')

``check(config)`` refuses a run config that turns on two techniques of a pair below, naming both
settings and why; ``echoing.techniques.check_config`` calls it after each technique has checked
its own fields.
"""

from __future__ import annotations

# Technique -> the config setting that turns it on, as the message shows it (None: off).
SWITCHES = {
    "echo": lambda config: f"echo={config.echo}" if config.echo != 1 else None,
    "auto_echo": lambda config: (
        f"auto_echo_max_factor={config.auto_echo_max_factor}"
        if config.auto_echo_max_factor
        else None
    ),
    "assist": lambda config: "assist=True" if config.assist else None,
    "prune": lambda config: "prune=True" if config.prune else None,
    "priority": lambda config: "priority=True" if config.priority else None,
    "select": lambda config: (
        f"select_ratio={config.select_ratio}" if config.select_ratio < 1 else None
    ),
}

_PRIORITY_DRAWS = (
    "priority sampling draws the train batches from a priority table, not from the input "
    "pipeline, so that pipeline's stages would never run"
)
# (technique, technique) -> why one run cannot have both.
INCOMPATIBLE = {
    ("auto_echo", "echo"): "AutoEcho sets the echo factor itself; set echo=1",
    ("priority", "echo"): _PRIORITY_DRAWS,
    ("priority", "auto_echo"): _PRIORITY_DRAWS,
    ("priority", "assist"): _PRIORITY_DRAWS,
    ("priority", "prune"): _PRIORITY_DRAWS,
    ("select", "priority"): "priority sampling chooses its own batches",
    ("assist", "prune"): (
        "the Assistant's filter drops a share of the examples pruning keeps, and the run counts "
        "pruning's epochs in trained examples, so they would stretch over more passes than "
        "prune_epochs and the passes past them would not be pruned (measured: 6 passes for 4 "
        "epochs, the last 2 unpruned)"
    ),
}


def check(config) -> None:
    """Raises ValueError naming the first incompatible pair ``config`` turns on."""
    for (first, second), why in INCOMPATIBLE.items():
        setting, other = SWITCHES[first](config), SWITCHES[second](config)
        if setting and other:
            raise ValueError(
                f"config {setting} cannot be combined with {other}: {why}; turn one of them off."
            )
