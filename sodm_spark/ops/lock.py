"""The lock of a models directory (:class:`RetrainLock`): one retraining at a time, on the local
disk or any store by URI, without kernel locks (docs/operations.md, "Scheduled retraining").

The lock is a file, ``.retrain.lock``, created only if absent and holding the run's pid, host,
start time and a token. Locally it is created whole with ``os.link`` (``O_EXCL`` where there
are no hard links). A lock whose holder died is taken over: on this host when its pid is gone
(or is another process now: the start time differs, or the host rebooted); from another host
(a shared disk) once it is older than ``stale_seconds``. One run at a time takes a stale lock
over (a marker named after the lock's token, created only if absent, guards the swap), so two
runs never hold it at once; a live holder on this host is never taken over.

On other stores the lock is created if absent where the store can (HDFS through the Spark
session's Hadoop file system); elsewhere (object stores, pyarrow, which has no exclusive
create) it is written, read back after ``settle_seconds`` and held only if it still carries
this run's token. That is best-effort: two runs starting within that moment can both win, so
the scheduler should start one retraining at a time there.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import socket
import time
import uuid
from pathlib import Path

from ..data.storage import LocalStore, join, local_path, read_replaced, store_for, uri_scheme

LOCK_NAME = ".retrain.lock"
_TOKEN = re.compile(r"^[0-9a-f]{8,64}$")
_TAKEOVER_SECONDS = 60.0  # a takeover marker this old belongs to a run that died taking over
_BEING_WRITTEN_SECONDS = 10.0  # an empty lock file younger than this is being written (O_EXCL)


class LockedError(RuntimeError):
    """Another run holds the lock."""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """The state letter and start time (clock ticks after boot) of ``pid``, None without /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _alive(holder: dict) -> bool:
    """Whether the process a lock record of this host names still runs (not a zombie, not
    another process that got its pid since: its start time differs, or the host rebooted)."""
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    if pid <= 0 or (holder.get("boot") and holder["boot"] != _boot_id()):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    except (OverflowError, OSError):
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    recorded = holder.get("process_start")
    return stat[0] not in "ZX" and (recorded is None or str(recorded) == stat[1])


def _write_new(path, data: bytes) -> None:
    """Create ``path`` holding ``data``, synced; FileExistsError if it exists."""
    handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(handle, data)
        os.fsync(handle)
    finally:
        os.close(handle)


class RetrainLock:
    """The lock of a models directory (module docstring): ``with RetrainLock(directory):``.

    ``taken_over``: the record of the dead run whose lock this one took over (``{}`` when it
    was unreadable), else None. ``stale_seconds``: a lock from another host older than this is
    taken over; a live holder on this host is never taken over (stop it first), only named as
    probably hung once it is older. ``store``: the store of a URI ``directory`` (default: by the
    path). ``settle_seconds``: how long a lock written to a store without create-if-absent
    waits before reading it back.
    """

    def __init__(self, directory, stale_seconds: float = 6 * 3600.0, store=None,
                 settle_seconds: float = 1.0):
        self._local = isinstance(store, LocalStore) or (store is None and
                                                         uri_scheme(directory) in (None, "file"))
        self._given = store  # by URI and not given: found when the lock is taken
        self.path = Path(local_path(directory)) / LOCK_NAME if self._local else \
            StorePath(join(str(directory), LOCK_NAME))
        self.stale_seconds, self.settle_seconds = stale_seconds, settle_seconds
        self.taken_over: dict | None = None
        self._token: str | None = None

    @property
    def _store(self):
        """The store of a lock by URI (None for the local disk)."""
        if self._local:
            return None
        if self._given is None:
            self._given = store_for(self.path.rpartition("/")[0])
        return self._given

    @property
    def _file(self) -> Path:
        """The lock's file, for the methods of a lock on the local disk."""
        assert isinstance(self.path, Path)  # a lock by URI has a StorePath
        return self.path

    def _record(self) -> bytes:
        self._token = uuid.uuid4().hex
        stat = _proc_stat(os.getpid())
        return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.time(), "token": self._token, "boot": _boot_id(),
                           "process_start": stat[1] if stat else None}).encode()

    def _stale(self, holder: dict) -> bool:
        if not holder.get("pid"):
            return True  # unreadable: ours are written whole, so nobody is writing this one
        if holder.get("host") == socket.gethostname():
            return not _alive(holder)
        return time.time() - _started(holder) > self.stale_seconds

    def _refuse(self, holder: dict, why: str = "") -> LockedError:
        started = _started(holder)
        if why:
            hint = why
        elif started and time.time() - started > self.stale_seconds:
            hint = (f"; it has held it for {(time.time() - started) / 3600:.1f} h, longer than "
                    f"{self.stale_seconds / 3600:g} h: if that run hangs, stop it")
        else:
            hint = "; wait for it to finish"
        return LockedError(f"another retrain (pid {holder.get('pid')} on {holder.get('host')}, "
                           f"started {time.ctime(started)}) holds {self.path}{hint}.")

    def acquire(self) -> None:
        try:
            if self._store is None:
                self._acquire_local()
            else:
                self._acquire_in_store()
        except BaseException:
            self._token = None  # not held: release() does nothing
            raise

    # the local disk ---------------------------------------------------------------------

    def _read_local(self):
        """(identity, record) of the lock file; None if there is none; record None while an
        ``O_EXCL``-created file is still empty."""
        try:
            with open(self.path, "rb") as stream:
                raw, status = stream.read(1 << 16), os.fstat(stream.fileno())
        except FileNotFoundError:
            return None
        if not raw and time.time() - status.st_mtime < _BEING_WRITTEN_SECONDS:
            return "", None
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        record = record if isinstance(record, dict) else {}
        token = str(record.get("token", ""))
        identity = token if _TOKEN.match(token) else hashlib.sha1(
            raw + f"{status.st_ino}-{status.st_mtime_ns}".encode()).hexdigest()[:16]
        return identity, record

    def _write_aside(self, data: bytes) -> Path:
        staging = self._file.with_name(f"{self._file.name}.{uuid.uuid4().hex[:12]}.tmp")
        _write_new(staging, data)
        return staging

    def _create_local(self, data: bytes) -> bool:
        staging = self._write_aside(data)
        try:
            os.link(staging, self.path)  # whole, and only if absent
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links on this file system: create it in place
            try:
                _write_new(self.path, data)
            except FileExistsError:
                return False
            return True
        finally:
            staging.unlink(missing_ok=True)

    def _take_over_local(self, identity: str, data: bytes) -> bool:
        """Replace the stale lock ``identity`` by ours; False if another run is doing it or did.
        The marker of level 0 is created by one run only; a higher level only once the one
        below is old enough for its run to have died in the middle of a takeover."""
        for level in itertools.count():
            marker = self._file.with_name(f"{self._file.name}.takeover-{identity}-{level}")
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                try:
                    if time.time() - marker.stat().st_mtime < _TAKEOVER_SECONDS:
                        return False
                except FileNotFoundError:
                    return False  # its run just finished the takeover
                continue
            try:
                seen = self._read_local()
                if seen is None or seen[0] != identity:
                    return False  # released, or taken over already
                os.replace(self._write_aside(data), self.path)
                for old in self._file.parent.glob(f"{self._file.name}.takeover-{identity}-*"):
                    old.unlink(missing_ok=True)
                return True
            finally:
                marker.unlink(missing_ok=True)
        return False  # pragma: no cover - the loop returns

    def _acquire_local(self) -> None:
        self._file.parent.mkdir(parents=True, exist_ok=True)
        data = self._record()
        for _ in range(500):  # only runs taking and releasing it around us make us go round
            if self._create_local(data):
                self._tidy_local()
                return
            seen = self._read_local()
            if seen is None or seen[1] is None:  # released, or being written: look again
                time.sleep(0.01)
                continue
            identity, holder = seen
            if not self._stale(holder):
                raise self._refuse(holder)
            if self._take_over_local(identity, data):
                self.taken_over = holder
                self._tidy_local()
                return
            time.sleep(0.01)
        raise LockedError(f"could not take {self.path}: other runs keep taking and releasing it.")

    def _tidy_local(self) -> None:
        """Staging files and takeover markers that runs which died left beside the lock."""
        for leftover in self._file.parent.glob(f"{self._file.name}.*"):
            try:
                if time.time() - leftover.stat().st_mtime > _TAKEOVER_SECONDS:
                    leftover.unlink()
            except OSError:
                pass

    # a store by URI ---------------------------------------------------------------------

    def _read_in_store(self) -> dict | None:
        data = read_replaced(self._store, str(self.path))
        if data is None:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            return {}
        return record if isinstance(record, dict) else {}

    def _acquire_in_store(self) -> None:
        store, path = self._store, str(self.path)
        store.mkdirs(path.rpartition("/")[0])
        data = self._record()
        previous = self._read_in_store()
        if previous is not None and not self._stale(previous):
            raise self._refuse(previous)
        if previous is None and getattr(store, "exclusive_create", False):
            if not store.create_new(path, data):
                raise self._refuse(self._read_in_store() or {})
        else:
            store.write_bytes(path, data)
            time.sleep(self.settle_seconds)  # a run writing at the same moment lands by then
            now = self._read_in_store() or {}
            if now.get("token") != self._token:
                raise self._refuse(now, "; it took the lock at the same moment as this run")
        self.taken_over = previous

    # -------------------------------------------------------------------------------------

    def release(self) -> None:
        if self._token is None:
            return
        try:
            if self._store is None:
                seen = self._read_local()
                if seen is not None and (seen[1] or {}).get("token") == self._token:
                    self._file.unlink(missing_ok=True)
            elif (self._read_in_store() or {}).get("token") == self._token:
                self._store.delete(str(self.path))
        finally:
            self._token = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _started(holder: dict) -> float:
    try:
        return float(holder.get("started") or 0.0)
    except (TypeError, ValueError):
        return 0.0


class StorePath(str):
    """A path in a store by URI, with the two pieces of pathlib the jobs use: ``.name`` and
    ``/``."""

    @property
    def name(self) -> str:
        return self.rstrip("/").rpartition("/")[2]

    def __truediv__(self, other) -> "StorePath":
        return StorePath(join(self, str(other)))
