"""gs:// access through gcsfs: the filesystem, its per-request retries, and file opening.

Example::

    from pipelines.sources import gcs

    filesystem = gcs.filesystem(request_attempts=6)  # honours STORAGE_EMULATOR_HOST
    stream, size = gcs.opener(filesystem, block_size=8 << 20)("gs://bucket/train.tfrecord")

Two retry layers, one on top of the other:

1. gcsfs (per HTTP request, ``gcsfs.retry.retry_request``): a request that fails with HTTP 408,
   429 or 500-504, a dropped or refused connection, or a bad payload is retried, waiting
   ``min(2**(k-1) + U(0, 1), 32)`` s before try k + 1 (about 1, 2, 4, 8, 16 s), up to
   ``request_attempts`` tries in all; 404 and 403 are not retried. gcsfs fixes the count (6)
   when its class is defined, so ``filesystem`` re-applies gcsfs's own decorator with the
   count asked for; the predicate and backoff stay gcsfs's.
2. ``record_reader`` (per file): when gcsfs gives up with an error ``is_retriable`` accepts (the
   same predicate), the file is reopened at the first record not yet delivered; see
   ``record_reader.RetryPolicy``.

With the defaults (6 tries per request, 3 per file, 1 s doubling) an outage of about 1.5 to 2
minutes (3 x ~31-36 s of gcsfs backoff, plus 1 + 2 s) is ridden out; a longer one ends in
``record_reader.ObjectReadError`` naming the object and the last error.
"""

from __future__ import annotations

import asyncio
import functools
import os

DEFAULT_REQUEST_ATTEMPTS = 6


def filesystem(request_attempts: int = DEFAULT_REQUEST_ATTEMPTS):
    """A gcsfs filesystem; anonymous against ``STORAGE_EMULATOR_HOST`` when it is set.

    gcsfs is imported here, not at module import, because it reads its feature switches from the
    environment on import. Its experimental zonal/HNS bucket probe makes every bucket access wait
    ~60 s against an emulator, so it is off unless the user turned it on.

    Args:
      request_attempts: tries per HTTP request, gcsfs's own retry (see the module docstring).
    """
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    cls = _filesystem_class(request_attempts)
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return cls(token="anon")
    return cls()


@functools.cache
def _filesystem_class(request_attempts: int):
    import gcsfs
    from gcsfs import retry

    if request_attempts == gcsfs.GCSFileSystem.retries:
        return gcsfs.GCSFileSystem
    undecorated = gcsfs.GCSFileSystem._request.__wrapped__  # set by gcsfs's `decorator`

    class RetryingFileSystem(gcsfs.GCSFileSystem):
        retries = request_attempts
        _request = retry.retry_request(retries=request_attempts)(undecorated)

    RetryingFileSystem.__name__ = f"GCSFileSystem{request_attempts}Attempts"
    return RetryingFileSystem


def is_retriable(error: BaseException) -> bool:
    """gcsfs's own predicate (5xx, 408, 429, connection and payload errors), plus timeouts."""
    from gcsfs import retry

    return retry.is_retriable(error) or isinstance(error, (asyncio.TimeoutError, TimeoutError))


def opener(filesystem, *, block_size: int):
    """``path -> (stream, size)`` for ``record_reader``, reading ``block_size``-byte ranges.

    The readahead cache turns each small ``read()`` into a slice of one range request; without
    it each read is a round trip through gcsfs's event loop (~30 ms each under load, measured).
    """

    def open_file(path: str):
        stream = filesystem.open(path, "rb", block_size=block_size, cache_type="readahead")
        return stream, stream.size

    return open_file
