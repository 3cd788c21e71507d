"""The asynchronous trainer's modules from before they moved into ``trainers.passm``.

``trainers.async_partitioned`` and the like still import, for one more release: the old name is
the new module itself (the same object, so a patch through either name reaches it), with a
``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Makes the module named ``old`` the module ``new``, warning once that it moved."""
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old path goes in the next release).",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)
    if new == "trainers.passm.parameter_server":
        _add_phased_names(module)
    sys.modules[old] = module


def _add_phased_names(module) -> None:
    """``trainers.async_partitioned`` held the shared loop too: its names stay reachable."""
    phased = importlib.import_module("trainers.passm.phased")
    for name in dir(phased):
        if not name.startswith("__") and not hasattr(module, name):
            setattr(module, name, getattr(phased, name))
