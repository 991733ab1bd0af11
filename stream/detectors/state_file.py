"""A detector's state in one ``.npz`` file: what ``save`` / ``load`` write and read.

Every detector persists the same way: ``to_state()`` returns a flat dict of numpy arrays and JSON
strings, ``from_state(state)`` rebuilds the detector from it, and this module puts such a dict
into one ``.npz`` file. The write is atomic (temporary file, fsync, rename: a crash leaves the
previous file) and the read never unpickles (``allow_pickle=False``).

Examples
--------
>>> import tempfile, numpy as np
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "det.npz"
>>> write_state(path, {"meta": '{"n": 3}', "ring": np.arange(3.0)})
>>> state = read_state(path)
>>> str(state["meta"]), state["ring"].tolist()
('{"n": 3}', [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np


def write_state(path: str | Path, state: dict) -> None:
    """Write ``state`` (arrays and strings) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in state.items()})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(path: str | Path) -> dict:
    """The dict :func:`write_state` wrote (arrays; strings as 0-d string arrays)."""
    with np.load(Path(path), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


class CheckpointEntries(Mapping):
    """The entries of a checkpoint (or of its ``meta``), read so that a missing one is a
    ``ValueError`` that names the checkpoint's class and the key.

    A bare ``KeyError: '_ref_buf'`` from inside ``from_state`` does not tell that the file is
    another detector's, or a truncated one. Only lookups in the checkpoint are translated, never
    errors of the code that reads it; ``in`` and ``get`` keep their usual meaning, for the entries
    that older states lack. :meth:`part` is the view of the entries under a prefix, passed on to
    the class that restores that part: a key missing there is still named in the whole checkpoint.
    """

    def __init__(self, entries, what: str, where: str = "", prefix: str = ""):
        if not isinstance(entries, Mapping):
            raise ValueError(f"not a {what} checkpoint: expected a mapping of names to arrays and strings "
                             f"(what to_state returns){where}; got {type(entries).__name__}")
        self._entries, self._what, self._where, self._prefix = entries, what, where, prefix

    def entry_name(self, key: str) -> str:
        """``key`` as the whole checkpoint names it (with the prefixes of the parts it was read from)."""
        entries, prefix = self, ""
        while isinstance(entries, CheckpointEntries):
            prefix = entries._prefix + prefix
            entries = entries._entries
        return prefix + key

    @property
    def checkpoint_class(self) -> str:
        """The class of the whole checkpoint (a part's class may be another: a view's state is part
        of a time-series anomaly detector's)."""
        entries, what = self, self._what
        while isinstance(entries, CheckpointEntries):
            what = entries._what
            entries = entries._entries
        return what

    def part(self, prefix: str) -> "CheckpointEntries":
        """The entries whose keys start with ``prefix``, under the rest of their keys."""
        return CheckpointEntries(self, self._what, self._where, prefix)

    def __getitem__(self, key):
        try:
            return self._entries[self._prefix + key if self._prefix else key]
        except KeyError:
            raise ValueError(f"not a {self._what} checkpoint, or a truncated one: missing key "
                             f"{self._prefix + str(key)!r}{self._where}") from None

    def __contains__(self, key) -> bool:
        return (self._prefix + key if self._prefix else key) in self._entries

    def get(self, key, default=None):
        return self._entries.get(self._prefix + key if self._prefix else key, default)

    def __iter__(self):
        n = len(self._prefix)
        return (k[n:] for k in self._entries if not n or (isinstance(k, str) and k.startswith(self._prefix)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def open_checkpoint(state, what: str) -> tuple[CheckpointEntries, CheckpointEntries]:
    """``state`` (a ``to_state`` dict: arrays and JSON strings) and its JSON ``"meta"``, both as
    :class:`CheckpointEntries` of the class named ``what``.

    Examples
    --------
    >>> state, meta = open_checkpoint({"meta": '{"n": 3}'}, "Toy")
    >>> meta["n"]
    3
    >>> state["ring"]
    Traceback (most recent call last):
    ...
    ValueError: not a Toy checkpoint, or a truncated one: missing key 'ring'
    """
    state = CheckpointEntries(state, what)
    try:
        meta = json.loads(str(state["meta"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a {what} checkpoint: its meta is not JSON ({exc})") from None
    return state, CheckpointEntries(meta, what, " in its meta")


def state_version(meta: Mapping, what: str, readable: tuple, unversioned: int | None = None) -> int:
    """The checkpoint format version recorded in ``meta``, if this build reads it (``readable``);
    ``unversioned``, if given, is the version of states written before the version was recorded.

    Examples
    --------
    >>> state_version({"version": 2}, "Toy", readable=(1, 2))
    2
    >>> state_version({"version": 3}, "Toy", readable=(1, 2))
    Traceback (most recent call last):
    ...
    ValueError: unsupported Toy state version 3: this build reads versions 1, 2 (is it another class's ...)
    """
    readable_text = ("version " if len(readable) == 1 else "versions ") + ", ".join(map(str, readable))
    if "version" not in meta:
        if unversioned is not None:
            return unversioned
        raise ValueError(f"unsupported {what} state: it records no version (this build reads {readable_text}); "
                         "is it another class's checkpoint?")
    version = meta["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in readable:
        hint = ("is it another class's checkpoint, or one of a newer release, which that release reads?"
                if isinstance(version, int) and not isinstance(version, bool) and version > max(readable)
                else "is it another class's checkpoint, or a damaged one?")
        raise ValueError(f"unsupported {what} state version {version!r}: this build reads {readable_text} "
                         f"({hint})")
    return version


def checkpoint_params(meta: Mapping, cls) -> CheckpointEntries:
    """The constructor parameters recorded in a checkpoint's ``meta`` (``meta["params"]``), refused
    if ``cls`` does not take them all: then it is another class's checkpoint."""
    params = CheckpointEntries(meta["params"], cls.__name__, " in its meta's params")
    unknown = sorted(set(params) - set(inspect.signature(cls).parameters), key=str)
    if unknown:
        raise ValueError(f"not a {cls.__name__} checkpoint: it records parameters {unknown} that "
                         f"{cls.__name__} does not take")
    return params
