"""Per-key checkpoints: one versioned ``.npz`` file per key, written atomically, never pickled.

A checkpoint holds a detector state (``dict[str, ndarray | float | int | str]``) plus pipeline
metadata (last source position, last timestamp, sample count). Arrays are stored as npz members; all
scalars, strings and the metadata go into one JSON document stored in the same file as a uint8
member, so a file is self-contained and is replaced in one ``os.replace``. Loading uses
``allow_pickle=False``; object arrays are refused on save.

Write protocol: temp file in the same directory -> flush -> fsync -> rename over the old file ->
fsync the directory. A crash at any point leaves either the old or the new file, never a torn one,
plus perhaps the temp file, which the next daemon to lock the directory removes.

A daemon holds an advisory lock on its directory (:meth:`CheckpointStore.lock`, ``flock`` of
``ratiowatch.lock`` in it) for its whole life: exclusive for a file or stdin source, shared for the
processes of a Kafka consumer group, which share a directory by design. The kernel drops the lock
when the process ends, however it ends (``kill -9`` too), so it is never stale.

Examples
--------
>>> import tempfile, numpy as np
>>> store = CheckpointStore(tempfile.mkdtemp())
>>> path = store.save("host-1", {"theta": np.arange(3.0), "sigma": 0.5, "method": "rulsif"}, {"count": 7})
>>> state, meta = store.load("host-1")
>>> state["theta"].tolist(), state["sigma"], state["method"], meta["count"]
([0.0, 1.0, 2.0], 0.5, 'rulsif', 7)
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ratiowatch.connectors.checkpoint_format import (FORMAT, FORMAT_VERSION, JSON_MEMBER as _JSON_MEMBER,  # noqa: F401
                                                  decode as _decode,
                                                  decode_bytes, encode as _encode, meta_of_bytes)

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no lock
    fcntl = None  # type: ignore[assignment]

#: the seq cache keeps the entries of the keys written most recently: at least this many, and at
#: most :data:`_SEQ_CACHE_PER_BATCH` times the largest batch written (a batch holds keys in memory
#: only, so this follows the keys in memory, not every key ever checkpointed), never more than
#: :data:`_SEQ_CACHE_MAX`
_SEQ_CACHE_MIN = 1024
_SEQ_CACHE_PER_BATCH = 4
_SEQ_CACHE_MAX = 200_000
#: what :meth:`CheckpointStore.scan` lists (matched as ``Path.glob`` matches it)
_CKPT_GLOB = "*.ckpt.npz"
_CKPT_NAME = re.compile(fnmatch.translate(_CKPT_GLOB)).fullmatch
LOCK_NAME = "ratiowatch.lock"
#: the names of this module's temp files (``tempfile.mkstemp(prefix=".tmp-", suffix=".part")``); a
#: process killed between writing one and renaming it leaves it behind
_TMP_NAME = re.compile(r"\.tmp-[A-Za-z0-9_]+\.part")
_TMP_PREFIX, _TMP_SUFFIX = ".tmp-", ".part"
#: under a shared lock another live process of the group may be writing its temp files right now; a
#: write renames its temp file within seconds (a checkpoint that took minutes would have set off the
#: checkpoint-age alert long before), so one untouched for this long belongs to a dead writer
SHARED_TMP_MIN_AGE_S = 600.0


class UnusableFileError(ValueError):
    """A checkpoint directory, its lock or an offsets file in it cannot be used. ``str()`` is one
    line: the path, what is wrong, what to do (the daemon reports it as a start-up error)."""


class DirectoryInUseError(UnusableFileError):
    """Another process holds the checkpoint directory's lock."""


def _blocking_file(path: Path) -> Path | None:
    """The nearest of ``path`` and its ancestors that exists and is not a directory."""
    for p in (path, *path.parents):
        try:
            if p.exists():
                return None if p.is_dir() else p
        except OSError:
            return None
    return None


def _directory_problem(directory: Path, exc: OSError) -> str:
    blocker = _blocking_file(directory)
    if blocker == directory:
        return (f"{directory}: the checkpoint directory is a file, not a directory; move that file, or choose "
                "another checkpoint.dir")
    if blocker is not None:
        return (f"{directory}: cannot create the checkpoint directory: {blocker} is a file, not a directory; move "
                "that file, or choose another checkpoint.dir")
    if isinstance(exc, PermissionError):
        return (f"{directory}: cannot create the checkpoint directory (permission denied); give the daemon's user "
                "write access there, or choose another checkpoint.dir")
    return f"{directory}: cannot create the checkpoint directory ({exc.strerror or exc}); choose another checkpoint.dir"


def _key_filename(key: str) -> str:
    # Readable prefix + hash: any key string maps to a safe, unique, stable file name.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:40]
    # surrogatepass: any str has bytes to hash (a valid key's are its UTF-8 ones)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe}-{digest}.ckpt.npz"


class CheckpointStore:
    """A directory of per-key checkpoint files (shared by the processes of one consumer group)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # else a daemon would only fail at its first checkpoint, with errno's words
            raise UnusableFileError(_directory_problem(self.directory, exc)) from None
        # least recently written first; written by the thread of each write (a periodic checkpoint's
        # writer thread and the loop's evictions), hence the lock
        self._seq_cache: OrderedDict[str, tuple[tuple[int, int, int, int], int]] = OrderedDict()
        self._seq_cache_bound = _SEQ_CACHE_MIN
        self._seq_cache_lock = threading.Lock()
        self._lock_fd: int | None = None

    # --- the directory's lock ----------------------------------------------------------------
    def lock(self, exclusive: bool = True) -> None:
        """Lock the directory for this store's life (until :meth:`close` or the process ends).

        ``exclusive``: no other process may use the directory (two daemons reading one source into
        one directory would each fold part of the records into the same keys' checkpoints and
        commit each other's offsets). ``exclusive=False``: shared with other shared holders only
        (the processes of one Kafka consumer group, whose keys have one owner at a time).
        Raises :class:`DirectoryInUseError` naming the holder's pid where it can be found.
        """
        if fcntl is None or self._lock_fd is not None:
            return
        path = self.directory / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UnusableFileError(f"{path}: cannot create the checkpoint directory's lock file "
                                    f"({exc.strerror or exc}); give the daemon's user write access to "
                                    f"{self.directory}, or choose another checkpoint.dir") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            holders = _lock_holders(fd)
            os.close(fd)
            who = f"pid {', '.join(map(str, holders))}" if holders else "pid unknown"
            raise DirectoryInUseError(
                f"{self.directory}: the checkpoint directory is in use by another ratiowatch daemon ({who}); "
                "stop that one first, or give this one its own checkpoint.dir (only the processes of one Kafka "
                "consumer group may share a directory)") from None
        except OSError as exc:  # a filesystem without locks (some network mounts): run unlocked, say so
            os.close(fd)
            logging.getLogger("ratiowatch.checkpoint").warning(
                "cannot lock the checkpoint directory; another daemon using it would not be noticed",
                extra={"path": str(path), "error": exc.strerror or str(exc)})
            return
        # the pid is for the message of a daemon refused later; shared holders are several, and
        # /proc/locks names them all, so they leave the file empty rather than one of them in it
        try:
            os.ftruncate(fd, 0)
            if exclusive:
                os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        self._lock_fd = fd
        self._remove_leftover_temp_files(exclusive)

    def _remove_leftover_temp_files(self, exclusive: bool) -> int:
        """Remove the temp files of writes that a killed process never renamed (only the lock holder
        may: an unlocked store might share the directory with a live writer). Under an exclusive lock
        no other process writes here, so all of them go; under a shared one (a Kafka consumer group)
        only those older than :data:`SHARED_TMP_MIN_AGE_S`, which no live writer still holds.
        Nothing but this module's temp file names is touched. Returns the number removed."""
        cutoff = None if exclusive else time.time() - SHARED_TMP_MIN_AGE_S
        removed = size = 0
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        for e in entries:
            if not _TMP_NAME.fullmatch(e.name):
                continue
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
                if cutoff is not None and st.st_mtime > cutoff:
                    continue
                os.unlink(e.path)
            except OSError:  # gone meanwhile, or not ours to remove: it is only a leftover
                continue
            removed += 1
            size += st.st_size
        if removed:
            logging.getLogger("ratiowatch.checkpoint").info(
                "removed temp files left by interrupted checkpoint writes",
                extra={"path": str(self.directory), "files": removed, "bytes": size})
        return removed

    def close(self) -> None:
        """Release the directory's lock (if this store holds it)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file releases the flock

    def path(self, key: str) -> Path:
        return self.directory / _key_filename(key)

    def save(self, key: str, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Path:
        """Atomically write ``key``'s checkpoint; the previous one stays valid until the rename."""
        meta = dict(meta or {})
        target = self.path(key)
        if "seq" not in meta:  # monotonically increasing checkpoint version per key
            meta["seq"] = self._read_meta_seq(target) + 1
        payload = _encode(state, meta, key)
        atomic_write_bytes(target, payload)
        self._remember(target, int(meta["seq"]))
        return target

    def save_many(self, items: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> int:
        """Checkpoint many keys at once: same per-file atomicity as :meth:`save`, one sync.

        All temp files are written first, made durable together (``syncfs`` of the directory's
        filesystem where available, else one fsync per file), then renamed one by one; the
        directory is fsynced once at the end. Per-file fsyncs were most of a checkpoint's cost.
        """
        payloads = []
        for key, state, meta in items:
            meta = dict(meta)
            if "seq" not in meta:
                meta["seq"] = self._read_meta_seq(self.path(key)) + 1
            payloads.append((key, self.encode(key, state, meta), int(meta["seq"])))
        return self.write_many(payloads)

    @staticmethod
    def encode(key: str, state: dict[str, Any], meta: dict[str, Any]) -> bytes:
        """The file content of a checkpoint (what :meth:`write_many` writes)."""
        return _encode(state, meta, key)

    def write_many(self, payloads: list[tuple[str, bytes, int]]) -> int:
        """Write encoded checkpoints ``(key, payload, seq)`` atomically (see :meth:`save_many`).

        Only file I/O: safe to run on a writer thread while the caller goes on (the daemon does).
        """
        if not payloads:
            return 0
        tmps: list[tuple[str, Path]] = []
        try:
            for key, payload, _ in payloads:
                fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=self.directory)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(payload)
                tmps.append((tmp, self.path(key)))
            _sync_files([t for t, _ in tmps], self.directory)
            for tmp, target in tmps:
                os.replace(tmp, target)
        except BaseException:
            for tmp, _ in tmps:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            raise
        _fsync_dir(self.directory)
        self._seq_cache_bound = max(self._seq_cache_bound, min(_SEQ_CACHE_MAX, _SEQ_CACHE_PER_BATCH * len(payloads)))
        for (key, _, seq), (_, target) in zip(payloads, tmps):
            self._remember(target, seq)
        return len(payloads)

    def _read_meta_seq(self, target: Path) -> int:
        if not target.exists():
            return 0
        try:
            with np.load(target, allow_pickle=False) as data:  # only the JSON member is read
                return int(json.loads(bytes(data[_JSON_MEMBER]).decode())["meta"].get("seq", 0))
        except (ValueError, OSError, KeyError, zipfile.BadZipFile):
            return 0

    # The fencing check reads a key's seq before every checkpoint of it. Reading it back from the
    # npz costs ~0.25 ms; a file this store wrote itself and nobody replaced since is recognised by
    # its stat signature instead (a rename by another process brings a new inode and new times).
    # Only a cache: a key whose entry was dropped is read back from its file, with the same result.
    # The keys written again are those in memory; a key evicted for good was written a last time,
    # and its entry is the first to go once the keys written after it fill the bound.
    def _remember(self, target: Path, seq: int) -> None:
        try:
            st = os.stat(target)
        except OSError:
            return
        name = str(target)
        with self._seq_cache_lock:
            cache = self._seq_cache
            cache.pop(name, None)
            cache[name] = ((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), seq)
            while len(cache) > self._seq_cache_bound:
                cache.popitem(last=False)

    def seq(self, key: str) -> int:
        """Version number of ``key``'s checkpoint on disk (0 when there is none)."""
        target = self.path(key)
        cached = self._seq_cache.get(str(target))
        if cached is not None:
            try:
                st = os.stat(target)
            except OSError:
                return 0
            if (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == cached[0]:
                return cached[1]
        return self._read_meta_seq(target)

    def load(self, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(state, meta)`` of ``key``, or None if it has no checkpoint. A file holding another
        key's checkpoint (copied or renamed under this key's file name) is refused: restoring it
        would continue this key from another key's state."""
        target = self.path(key)
        if not target.exists():
            return None
        state, meta, stored = self._load_path(target)
        if stored != key:
            raise ValueError(f"{target}: this file holds the checkpoint of key {stored!r}, not of {key!r} (copied "
                             f"or renamed from another key's file?); delete it to start {key!r} from scratch, or "
                             f"move it back to {_key_filename(stored) if isinstance(stored, str) else 'its own name'}")
        return state, meta

    def load_entry(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(state, meta)`` of an entry :meth:`scan` listed."""
        return self.load_path(path)

    @staticmethod
    def load_path(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        state, meta, _key = CheckpointStore._load_path(path)
        return state, meta

    @staticmethod
    def _load_path(path: Path) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """``(state, meta, the key stored in the file)``; a file that is not a readable checkpoint
        is a ``ValueError`` naming it and saying what to do."""
        todo = "delete it to start the key from scratch, or put back a good copy"
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as exc:
            if "pickle" not in str(exc):
                raise ValueError(f"{path}: unreadable checkpoint ({exc}); {todo}") from None
            # numpy takes any file that is neither an .npz archive nor an .npy array for a pickle,
            # and its advice (allow_pickle) is not ours to give: checkpoints are never pickled
            raise ValueError(f"{path}: unreadable checkpoint (not an .npz archive: a damaged file, or another "
                             f"program's); {todo}") from None
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: unreadable checkpoint ({exc}); {todo}") from None
        if not isinstance(data, np.lib.npyio.NpzFile):  # a bare .npy array
            raise ValueError(f"{path}: unreadable checkpoint (a single .npy array, not an .npz archive); {todo}")
        try:
            state, meta = _decode(data, path)
            stored = json.loads(bytes(data[_JSON_MEMBER]).decode()).get("key")
            return state, meta, stored
        except (OSError, EOFError, KeyError, TypeError, AttributeError, zipfile.BadZipFile,
                json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc}); {todo}") from None
        finally:
            data.close()

    def scan(self) -> list[tuple[str, dict[str, Any], Path]]:
        """``(key, meta, path)`` of every checkpoint, most recently written first (only the JSON
        member of each file is read; unreadable or foreign files are skipped)."""
        return list(self.iter_scan())

    def iter_scan(self) -> Iterator[tuple[str, dict[str, Any], Path]]:
        """:meth:`scan`, one entry at a time: the files are ordered by their directory entries'
        times alone, and each is opened only when the iteration reaches it, so a restore that stops
        after its first few keys reads no more files than that (the directory keeps one file per
        key ever checkpointed)."""
        for p in self._paths_most_recent_first():
            try:
                entry = None
                with np.load(p, allow_pickle=False) as data:
                    doc = json.loads(bytes(data[_JSON_MEMBER]).decode())
                if doc.get("format") == FORMAT and doc.get("version") == FORMAT_VERSION:
                    entry = (doc["key"], doc.get("meta", {}), p)
            except Exception:  # noqa: BLE001 - a foreign or torn file is not ours to judge here
                continue
            if entry is not None:
                yield entry

    def _paths_most_recent_first(self) -> list[Path]:
        """The checkpoint files by modification time, newest first; files of one time keep the
        directory's order (the order ``Path.glob`` lists them in). Only their stat is read."""
        directory = self.directory
        if not directory.is_dir():
            return []
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if _CKPT_NAME(e.name)]
        except PermissionError:
            return []
        found = []
        for e in entries:
            try:
                found.append((e.stat().st_mtime_ns, directory / e.name))
            except OSError:  # gone meanwhile, or a dangling link: not a checkpoint to restore
                continue
        found.sort(key=lambda t: -t[0])  # stable: ties stay in directory order
        return [p for _, p in found]

    def keys(self) -> list[str]:
        out = []
        for p in sorted(self.directory.glob("*.ckpt.npz")):
            try:
                with np.load(p, allow_pickle=False) as data:
                    out.append(json.loads(bytes(data[_JSON_MEMBER]).decode())["key"])
            except Exception:  # noqa: BLE001 - a foreign file in the directory is not ours to judge
                continue
        return out

    # --- small JSON side files (source offsets of the file source) ---------------------------
    def save_json(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.directory / name, json.dumps(obj).encode())

    def load_json(self, name: str) -> Any:
        p = self.directory / name
        if not p.exists():
            return None
        return json.loads(p.read_text())

    def load_json_checked(self, name: str, what: str = "file") -> Any:
        """:meth:`load_json`, with a file that cannot be read or is not JSON reported as an
        :class:`UnusableFileError` naming it (``what`` names the file's role)."""
        p = self.directory / name
        todo = "delete it to read the source from the start, or restore it"
        try:
            text = p.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise UnusableFileError(f"{p}: the {what} is not valid JSON (not UTF-8); {todo}") from None
        except OSError as exc:
            raise UnusableFileError(f"{p}: cannot read the {what} ({exc.strerror or exc}); make it readable, "
                                    f"or {todo}") from None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise UnusableFileError(f"{p}: the {what} is not valid JSON ({exc}); {todo}") from None

    def load_offsets(self, name: str) -> dict[str, int] | None:
        """An offsets file (``{partition: next offset}``), checked: None when there is none;
        :class:`UnusableFileError` naming the file when it is unreadable, not JSON, or not such an
        object (a source would otherwise fail on it with words that name neither the file nor
        what to do)."""
        p = self.directory / name
        todo = "delete it to read the source from the start, or restore it"
        obj = self.load_json_checked(name, "offsets file")
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise UnusableFileError(f"{p}: the offsets file holds a JSON {_json_type(obj)}, not an object of "
                                    f"partition -> next offset; {todo}")
        for part, off in obj.items():
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise UnusableFileError(f"{p}: the offsets file's offset of {part!r} is {json.dumps(off)}, not a "
                                        f"non-negative integer; {todo}")
        return obj


def _json_type(obj: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(obj), type(obj).__name__)


def _lock_holders(fd: int) -> list[int]:
    """The pids holding a lock on ``fd``'s file: from /proc/locks (Linux), else the pid an
    exclusive holder wrote into it."""
    try:
        st = os.fstat(fd)
        ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        exact, same_inode = [], []
        with open("/proc/locks") as fh:
            for line in fh:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a waiter's line has "->" second)
                if len(parts) >= 6 and parts[1] == "FLOCK":
                    if parts[5] == ident:
                        exact.append(int(parts[4]))
                    elif parts[5].rsplit(":", 1)[-1] == str(st.st_ino):  # overlay mounts report another device
                        same_inode.append(int(parts[4]))
        if exact or same_inode:
            return sorted(set(exact or same_inode))
    except (OSError, ValueError):
        pass
    try:
        text = os.pread(fd, 64, 0).decode().strip()
        return [int(text)] if text.isdigit() else []
    except (OSError, ValueError):
        return []


def atomic_write_bytes(target: Path, payload: bytes) -> None:
    """temp file in the same directory -> fsync -> rename -> fsync directory."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some filesystems refuse directory fsync; the rename is still atomic
        pass


def _syncfs(directory: Path) -> bool:
    """syncfs(2) of the filesystem holding ``directory``; False when unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        return fn(fd) == 0
    finally:
        os.close(fd)


def _sync_files(paths: list[str], directory: Path) -> None:
    if len(paths) > 1 and _syncfs(directory):
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
