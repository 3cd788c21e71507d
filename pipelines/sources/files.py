"""Globs and whole-file reads of local or gs:// paths, shared by the file sources.

Example::

    from pipelines.sources import files

    paths = files.glob("/data/train-*.txt", "train_files")  # sorted; an error if none match
    data = files.read_bytes(paths[0])

gs:// goes through gcsfs (``pipelines.sources.gcs``), which honours ``STORAGE_EMULATOR_HOST``
and retries each HTTP request up to ``request_attempts`` times; local paths go through
``tf.io.gfile``, with ``~`` expanded.
"""

from __future__ import annotations

import errno
import glob as stdlib_glob
import os

import tensorflow as tf

from pipelines.sources import gcs


def glob(pattern: str, key: str, *, request_attempts: int = gcs.DEFAULT_REQUEST_ATTEMPTS):
    """The sorted paths matching ``pattern``, the data config's ``key``.

    Raises:
      ValueError: nothing matches, or gcsfs cannot list the bucket (naming the likely cause).
    """
    if pattern.startswith("gs://"):
        filesystem = gcs.filesystem(request_attempts)
        try:
            paths = sorted("gs://" + path for path in filesystem.glob(pattern))
        except Exception as error:  # gcsfs raises many types (auth, HTTP, OSError)
            reason = (str(error).strip().splitlines() or [""])[0]
            raise ValueError(
                f"cannot read data config {key}={pattern!r} through gcsfs ({type(error).__name__}: "
                f"{reason}) after {request_attempts} attempts; check the network, the bucket "
                "name, your credentials, or STORAGE_EMULATOR_HOST for an emulator (data config "
                "gcs_request_attempts sets the attempts: fewer fail sooner)."
            ) from error
    else:
        try:
            paths = sorted(tf.io.gfile.glob(os.path.expanduser(pattern)))
        except UnicodeDecodeError:  # TensorFlow's paths are UTF-8 strings
            message = not_utf8(_bytes_glob(pattern), f"data config {key}={pattern!r}")
            raise ValueError(message) from None
    if not paths:
        raise ValueError(
            f"data config {key}={pattern!r} matches no file; check the path and glob (e.g. "
            f"'/data/train-*' or 'gs://bucket/train-*')."
        )
    return paths


def not_utf8(paths: list, what: str) -> str:
    """The message for ``paths`` (str or bytes) whose names are not UTF-8, which TensorFlow's
    string tensors cannot hold: named, with the fix."""
    shown = ", ".join(os.fsencode(path).decode("utf-8", "backslashreplace") for path in paths[:3])
    return (
        f"{what}: names not in UTF-8 ({len(paths)} in all, e.g. {shown}: accented names from "
        "a Latin-1 system), which TensorFlow cannot take as paths; rename them in UTF-8 (e.g. "
        "convmv -f latin1 -t utf8 --notest -r DIR), or move them out."
    )


def _bytes_glob(pattern: str) -> list[bytes]:
    """The local paths ``pattern`` matches whose names do not decode as UTF-8."""
    matches = stdlib_glob.glob(os.fsencode(os.path.expanduser(pattern)))
    return [path for path in matches if not is_utf8(path)]


def is_utf8(path: str | bytes) -> bool:
    """Whether a path's name is UTF-8 (a str from ``os`` keeps other bytes as surrogates)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_bytes(path: str, *, request_attempts: int = gcs.DEFAULT_REQUEST_ATTEMPTS) -> bytes:
    """The whole file at ``path`` (local or gs://)."""
    if path.startswith("gs://"):
        return gcs.filesystem(request_attempts).cat_file(path)
    with tf.io.gfile.GFile(os.path.expanduser(path), "rb") as file:
        return file.read()


def cannot_store(what: str, directory: str, error: BaseException) -> ValueError:
    """The error for a generated data set that could not be written (a full disk, no
    permission): one paragraph naming the directory, the cause and the flag to change.

    Example::

        raise cannot_store("MNIST-1D", "/data", OSError(28, "No space left on device"))
    """
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
    reason = reason.strip().splitlines()[0]
    # The fix the cause calls for: a full disk needs space, a missing or read-only place another.
    if getattr(error, "errno", None) == errno.ENOSPC or "space" in reason.lower():
        fix = "free some space there or choose another directory"
    elif "permission" in reason.lower() or "read-only" in reason.lower():
        fix = "make it writable or choose another directory"
    else:
        fix = "create it (or its parent) or choose another directory"
    return ValueError(
        f"cannot store {what} in {directory} ({reason}); {fix} with --config.data.data_dir=DIR "
        "(it is generated once, then read)."
    )
