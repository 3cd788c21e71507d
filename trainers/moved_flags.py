"""The command line's flags for fields that moved or were renamed, read for one more release.

Example::

    from trainers import moved_flags, run_config

    config = run_config.default_config()
    moved_flags.rename_priority_flags(config, {"pgd": True})  # FutureWarning: now priority
    print(config.priority)  # True
"""

from __future__ import annotations

from absl import app

import pipelines
from echoing._src.priority import technique as priority_technique


def move_echo_flags(config, overrides: dict) -> None:
    """``--config.data.echo*`` (echo's old place) on the command line sets echo's field over the
    config file's, with a FutureWarning; together with the new flag it is a usage error.
    ``overrides``: the command line's ``--config.*`` values (``config_flags``); only there can a
    value the user gave be told from one the config file set (``run_config.resolve_config``
    cannot)."""
    given = [key for key in pipelines.config.MOVED_ECHO_KEYS if f"data.{key}" in overrides]
    for key in given:
        if key in overrides:
            raise app.UsageError(
                f"--config.data.{key} and --config.{key} both set echo's {key}; keep only "
                f"--config.{key} (--config.data.{key} is its old place)."
            )
    if given:
        pipelines.moved_echo_fields(config.data)  # the FutureWarning, naming the new flags
    for key in given:
        config[key], config.data[key] = overrides[f"data.{key}"], None


def rename_priority_flags(config, overrides: dict) -> None:
    """``--config.pgd*`` (priority sampling's old names) on the command line sets the renamed
    field (``--config.priority*``) over the config file's, with a FutureWarning; together with
    the new flag it is a usage error, for the reason of ``move_echo_flags``."""
    given = {
        old: new for old, (new, _) in priority_technique.RENAMED_KEYS.items() if old in overrides
    }
    for old, new in given.items():
        if new in overrides:
            raise app.UsageError(
                f"--config.{old} and --config.{new} both set priority sampling's {new}; keep "
                f"only --config.{new} (--config.{old} is its old name)."
            )
    if given:
        priority_technique.renamed_fields(config)  # the FutureWarning, naming the new flags
    for old, new in given.items():
        config[new], config[old] = overrides[old], None
