"""The run's workdir: created with a clear error, and written by one run at a time (a lock).

Example::

    from trainers import workdir_lock

    with workdir_lock.WorkdirLock("/tmp/run"):
        ...  # another process's WorkdirLock("/tmp/run") raises WorkdirInUseError meanwhile

``WorkdirLock`` is held for the run (``trainers.experiment.run`` throughout, and
``metrics_writer.MetricsWriter`` while it is open), so a second run in a busy workdir is refused
with a ``WorkdirInUseError`` naming the process that holds it, before it can drop the other's
metrics rows or remove its checkpoint save in progress.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import socket
import sys
import threading

import tensorflow as tf

LOCK_FILENAME = "run.lock"


def make_workdir(workdir: str) -> None:
    """Creates ``workdir`` (local or gs://) and its parents.

    Raises:
      ValueError: naming the directory, why it cannot be created and the fix (the binary
        prints it as one line).
    """
    try:
        tf.io.gfile.makedirs(workdir)
    except (tf.errors.OpError, OSError) as error:
        reason = error.message if isinstance(error, tf.errors.OpError) else str(error)
        raise ValueError(
            f"cannot create the workdir {workdir!r} ({reason.splitlines()[0]}); choose a "
            "directory you can write, e.g. --workdir=/tmp/run."
        ) from None


class WorkdirInUseError(RuntimeError):
    """Another run (another process, or another thread of this one) holds the workdir's lock."""


@dataclasses.dataclass
class _Hold:
    """This process's hold of one workdir lock: the locked file, its thread, and nesting depth."""

    fd: int
    thread: int
    depth: int = 1


# Lock file (real path) -> this process's hold. flock locks belong to an open file description,
# so a second os.open of the file in this process would conflict with the first: a thread that
# holds the lock (experiment.run) nests further holds (its MetricsWriter) through this table.
_HOLDS: dict[str, _Hold] = {}
_HOLDS_GUARD = threading.Lock()
_UNLOCKED_NOTED: set[str] = set()


class WorkdirLock:
    """An exclusive lock on ``workdir`` (``fcntl.flock`` on ``workdir/run.lock``) for one run.

    ``acquire`` writes this process's pid, host, start time and command into the lock file and
    keeps it locked until ``release`` (or the end of a ``with`` block, also on an exception).
    The kernel drops the lock when its process dies, so a killed run does not block the next,
    and the file's stale contents are overwritten. The thread that holds a workdir may acquire
    it again (nested holds are counted); another thread or process is refused. Workdirs in
    object storage (``gs://``) are not locked (no file locks there): one line on stderr says so.

    Example::

        with WorkdirLock("/tmp/run"):
            ...  # train; WorkdirLock("/tmp/run") in another process raises WorkdirInUseError

    Raises:
      WorkdirInUseError: from ``acquire``, when another run holds the lock; the message names
        its process (pid, host, start, command) and the fix.
    """

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.path = os.path.join(_local_path(workdir), LOCK_FILENAME)
        self._key: str | None = None

    def acquire(self) -> WorkdirLock:
        if self._key is not None:
            raise RuntimeError(f"this WorkdirLock of {self.workdir} is already acquired.")
        if not _is_local(self.workdir):
            if self.workdir not in _UNLOCKED_NOTED:
                _UNLOCKED_NOTED.add(self.workdir)
                print(
                    f"Note: {self.workdir} is not locked (object storage has no file locks); "
                    "make sure no other run writes to it at the same time.",
                    file=sys.stderr,
                )
            return self
        key = os.path.realpath(self.path)
        with _HOLDS_GUARD:
            hold = _HOLDS.get(key)
            if hold is not None:
                if hold.thread != threading.get_ident():
                    raise WorkdirInUseError(
                        _in_use_message(self.workdir, self.path, "another thread of this process")
                    )
                hold.depth += 1
                self._key = key
                return self
            make_workdir(os.path.dirname(self.path))
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe_holder(fd)
                os.close(fd)
                raise WorkdirInUseError(_in_use_message(self.workdir, self.path, holder)) from None
            except OSError as error:  # a file system without locks (some network mounts)
                os.close(fd)
                print(
                    f"Note: {self.workdir} cannot be locked ({error.strerror}); make sure no "
                    "other run writes to it at the same time.",
                    file=sys.stderr,
                )
                return self
            _write_holder(fd)
            _HOLDS[key] = _Hold(fd, threading.get_ident())
            self._key = key
        return self

    def release(self) -> None:
        """Releases this hold (the lock itself once no nested hold remains); idempotent."""
        key, self._key = self._key, None
        if key is None:
            return
        with _HOLDS_GUARD:
            hold = _HOLDS[key]
            hold.depth -= 1
            if hold.depth == 0:
                del _HOLDS[key]
                # Emptied, not removed: removing would let a run that opened the old file lock
                # it while another locks a new one.
                os.ftruncate(hold.fd, 0)
                os.close(hold.fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv)[:300],
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


def _describe_holder(fd: int) -> str:
    """The lock file's holder as "process PID on host HOST (started ..., command ...)"."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        pid, host = holder["pid"], holder["host"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        # Not written yet (the other run is starting), or written by something else.
        return "another process (it has not written its pid into the lock file)"
    details = ", ".join(
        f"{name} {holder[name]}" for name in ("started", "command") if holder.get(name)
    )
    return f"process {pid} on host {host}" + (f" ({details})" if details else "")


def _in_use_message(workdir: str, path: str, holder: str) -> str:
    return (
        f"the workdir {workdir} is in use by another run: {holder} holds {path}. Two runs in one "
        "workdir overwrite each other's checkpoints and metrics: wait for it to finish (or stop "
        "it), or pass another --workdir."
    )


def check_not_in_use(workdir: str) -> None:
    """Raises ``WorkdirInUseError`` if another process holds ``workdir``'s lock right now.

    A check, not a hold, for callers that did not take the lock (``make_manager`` on its own):
    a shared lock conflicts with a run's exclusive one and is dropped at once."""
    path = os.path.join(_local_path(workdir), LOCK_FILENAME)
    if not _is_local(workdir) or not os.path.exists(path):
        return
    with _HOLDS_GUARD:
        if os.path.realpath(path) in _HOLDS:
            return  # this process's run
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkdirInUseError(_in_use_message(workdir, path, _describe_holder(fd))) from None
        except OSError:
            return  # no locks on this file system
        finally:
            os.close(fd)
