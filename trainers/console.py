"""A quiet console for the binary: TF C++ notices, absl INFO and TFDS chatter off by default.

Example (what ``trainers/train.py`` does; ``--verbose`` skips both)::

    from trainers import console

    console.quiet_native_logs()   # before TensorFlow is imported: it reads the level once
    console.import_tensorflow_quietly()
    console.quiet_python_logs()   # after absl has parsed the flags

What is hidden: TensorFlow's C++ log lines (``I0000``/``W0000`` notices, oneDNN and CPU feature
banners, and the ``E0000 ... failed call to cuInit`` a machine without a GPU logs at start-up),
absl INFO records (TFDS "Load dataset info", checkpoint "Sharding callback"), TFDS's WARNING
records (one "Using custom data configuration" per dataset built) and its progress bars, and
gcsfs's records of gs:// requests it retries or gives up on. Errors still surface as Python
exceptions with their messages; our own warnings still print.

"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings

# TF_CPP_MIN_LOG_LEVEL=3 hides C++ INFO, WARNING and ERROR lines; fatal ones still print.
_NATIVE_LEVEL = "3"


def quiet_native_logs() -> None:
    """Hides TensorFlow's C++ log lines, unless the user set ``TF_CPP_MIN_LOG_LEVEL`` already."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", _NATIVE_LEVEL)


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow with file descriptor 2 pointed at /dev/null meanwhile.

    Its shared libraries log oneDNN and CUDA-stub notices while they load, through absl's C++
    logging before anyone can configure it (TF_CPP_MIN_LOG_LEVEL does not reach them). An import
    that fails is re-raised after stderr is back, so its traceback still shows.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        importlib.import_module("tensorflow")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """``Warning: MESSAGE``: the library's warnings say what happened and the fix; the file,
    line and source that Python adds point into the library, not at the user's command. A
    package's own (TensorFlow's, Keras's) says whose it is: ``Warning from tensorflow: ...``."""
    kind = "" if category is UserWarning else f" ({category.__name__})"
    parts = os.path.normpath(filename or "").split(os.sep)
    if "site-packages" in parts[:-2]:
        kind = f" from {parts[parts.index('site-packages') + 1]}{kind}"
    return f"Warning{kind}: {message}\n"


class _DropLibraryChatter(logging.Filter):
    """Drops records below ERROR that TFDS logs (configuration and file notices), and gcsfs's
    records of requests it retries or gives up on (with a traceback each): the error that ends
    the run names the file, the attempts and the fix, and the run's summary counts resumed
    reads."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}gcsfs{os.sep}" in record.pathname:
            return False
        return record.levelno >= logging.ERROR or "tensorflow_datasets" not in record.pathname


def quiet_python_logs() -> None:
    """absl at WARNING, TFDS's warnings and progress bars off, and Python warnings as one line
    each (idempotent)."""
    warnings.formatwarning = _one_line_warning
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)
    handler = absl_logging.get_absl_handler()
    if not any(isinstance(f, _DropLibraryChatter) for f in handler.filters):
        handler.addFilter(_DropLibraryChatter())
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()
