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

import os
import tempfile
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
