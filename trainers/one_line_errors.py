"""The binary's errors as one line: ``error: ...`` and an exit status, not a traceback.

Example::

    from trainers import one_line_errors

    with one_line_errors.reported(verbose=False):
        raise ValueError("data config source='tfds' needs data config name")
    # stderr: error: --config.data.source='tfds' needs --config.data.name; exit status 1
"""

from __future__ import annotations

import contextlib
import sys

import tensorflow as tf

import pipelines
from pipelines.config import MOVED_ECHO_KEYS
from trainers import flag_errors


@contextlib.contextmanager
def reported(*, verbose: bool):
    """A ``ValueError``/``TypeError`` (a config or data value that cannot work; the toolkit's
    messages name the value and the flag or file to change) ends the binary with that message
    as ``error: ...`` on stderr, exit status 1, instead of a traceback; ``verbose`` (the
    binary's ``--verbose``) keeps the traceback (for a bug report)."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if verbose:
            raise
        print(f"error: {_as_data_flags(str(error))}", file=sys.stderr)
        sys.exit(1)
    except tf.errors.InvalidArgumentError as error:
        # The input pipeline's own data checks (a corrupt image, a label out of range) fail
        # inside the graph; their message names the file or record and the fix.
        check = data_check_message(error.message)
        if check is None or verbose:
            raise
        print(f"error: {_as_data_flags(check)}", file=sys.stderr)
        sys.exit(1)


def _as_data_flags(message: str) -> str:
    """``message`` with the data config's fields named as ``--config.data.*`` flags."""
    keys = set(pipelines.default_data_config().keys()) - set(MOVED_ECHO_KEYS)
    return flag_errors.as_data_flags(message, sorted(keys))


def data_check_message(message: str) -> str | None:
    """The text of one of the pipelines' data checks in a graph error's ``message`` (its
    ``tf.debugging.Assert`` items joined), or None when the error is not one of them.

    Example::

        data_check_message("... assertion failed: [bad image:] [a.jpg] [- set data config x]")
        # 'bad image: a.jpg - set data config x'
    """
    if "assertion failed: [" not in message:
        return None
    text = message.split("assertion failed: ", 1)[1].splitlines()[0].strip()
    text = text.replace("\\'", "'")  # the graph's message escapes the quotes of its strings
    if not any(marker in text for marker in _DATA_CHECK_MARKERS):
        return None
    return " ".join(item.strip() for item in text.removeprefix("[").removesuffix("]").split("] ["))


# Every data check of the pipelines names the data config field that fixes it.
_DATA_CHECK_MARKERS = ("data config",)
