"""Moved to ``trainers.passm.experiment``.

This path stays importable, with a ``DeprecationWarning``, for one more release.
"""

from trainers.passm import _moved

_moved.alias(__name__, "trainers.passm.experiment")
