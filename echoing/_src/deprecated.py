"""Module paths from before the family folders, importable for one more release with a warning.

``from echoing.loss_pruning import loss_prune`` still works and warns that ``loss_prune`` is
``echoing.loss_prune`` now; the public homes are ``echoing``, ``echoing.keras``,
``echoing.meters`` and ``echoing.techniques``.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings

# Old path -> where its code lives now (private: users import from the public modules).
MOVED = {
    "echoing.assistant": "echoing._src.assist.assistant",
    "echoing.assistant_callback": "echoing._src.assist.callbacks",
    "echoing.assistant_filter": "echoing._src.assist.filter",
    "echoing.assistant_learner": "echoing._src.assist.learner",
    "echoing.auto_echo": "echoing._src.echo.auto_echo",
    "echoing.bag_of_words": "echoing._src.assist.bag_of_words",
    "echoing.batch_selection": "echoing._src.priority.selection",
    "echoing.boss_features": "echoing._src.assist.boss_features",
    "echoing.diagnose": "echoing._src.core.diagnose",
    "echoing.echo": "echoing._src.echo.echo",
    "echoing.fit_timing": "echoing._src.core.fit_timing",
    "echoing.grouping": "echoing._src.core.grouping",
    "echoing.ids": "echoing._src.core.ids",
    "echoing.loss_pruning": "echoing._src.prune.loss_pruning",
    "echoing.loss_table": "echoing._src.core.loss_table",
    "echoing.priority_distributed": "echoing._src.priority.distributed",
    "echoing.priority_feedback": "echoing._src.priority.meter",
    "echoing.priority_sampling": "echoing._src.priority.sampling",
    "echoing.priority_shards": "echoing._src.priority.shards",
    "echoing.priority_sources": "echoing._src.core.sources",
    "echoing.priority_table": "echoing._src.priority.table",
    "echoing.techniques.assistant": "echoing._src.assist.technique",
    "echoing.techniques.auto_echo": "echoing._src.echo.auto_technique",
    "echoing.techniques.base": "echoing._src.core.technique",
    "echoing.techniques.batch_selection": "echoing._src.priority.selection_technique",
    "echoing.techniques.config_checks": "echoing._src.core.config_checks",
    "echoing.techniques.echo": "echoing._src.echo.technique",
    "echoing.techniques.priority": "echoing._src.priority.technique",
    "echoing.techniques.pruning": "echoing._src.prune.technique",
    "echoing.types": "echoing._src.core.types",
}
PUBLIC_MODULES = ("echoing", "echoing.keras", "echoing.meters", "echoing.techniques")


class _MovedModule(types.ModuleType):
    """Stands at an old path; each name read from it warns and comes from the new module."""

    def __init__(self, old: str, new: str):
        super().__init__(old)
        self._new = new

    def __getattr__(self, name: str):
        if name.startswith("__"):  # the import system's probes: not a user's read
            raise AttributeError(name)
        value = getattr(importlib.import_module(self._new), name)
        home = next(
            (
                public
                for public in PUBLIC_MODULES
                if getattr(importlib.import_module(public), name, None) is value
            ),
            None,
        )
        where = f"use {home}.{name}" if home else f"it is private now ({self._new}.{name})"
        warnings.warn(
            f"{self.__name__} is deprecated and goes in the next release: {where}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return value


def attribute(package: str, name: str):
    """``package.name`` for an old module path read as an attribute (``echoing.loss_table``)."""
    module = sys.modules.get(f"{package}.{name}")
    if isinstance(module, _MovedModule):
        return module
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def register() -> None:
    """Puts a ``_MovedModule`` at every old path not already imported."""
    for old, new in MOVED.items():
        sys.modules.setdefault(old, _MovedModule(old, new))
