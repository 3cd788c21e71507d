"""Moved to ``trainers.passm.parameter_server``; the loop both backends share (``PhasedTrainer``)
is in ``trainers.passm.phased``.

This path stays importable, with a ``DeprecationWarning``, for one more release.
"""

from trainers.passm import _moved

_moved.alias(__name__, "trainers.passm.parameter_server")
