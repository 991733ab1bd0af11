"""The bytes of a checkpoint: one versioned ``.npz`` that both checkpoint stores hold (a file in the
local directory, a record's value in the Kafka changelog), never pickled.

Arrays are npz members; all scalars, strings and the pipeline's metadata go into one JSON document
stored in the same file as a uint8 member, so a checkpoint is self-contained. Loading uses
``allow_pickle=False``; object arrays are refused on save.

Examples
--------
>>> import numpy as np
>>> payload = encode({"theta": np.arange(2.0), "sigma": 0.5}, {"count": 7}, "host-1")
>>> state, meta = decode_bytes(payload, "example")
>>> state["theta"].tolist(), state["sigma"], meta["count"], meta_of_bytes(payload)["count"]
([0.0, 1.0], 0.5, 7, 7)
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "ratiowatch-checkpoint"
FORMAT_VERSION = 1
JSON_MEMBER = "__json__"


def encode(state: dict[str, Any], meta: dict[str, Any], key: str) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for name, value in state.items():
        if name == JSON_MEMBER:
            raise ValueError(f"state name {JSON_MEMBER!r} is reserved; rename that state entry")
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                raise ValueError(f"state[{name!r}] is an object array; checkpoints hold numeric arrays only")
            arrays[name] = value
        elif isinstance(value, (bool, np.bool_)):
            scalars[name] = {"t": "bool", "v": bool(value)}
        elif isinstance(value, (int, np.integer)):
            scalars[name] = {"t": "int", "v": int(value)}
        elif isinstance(value, (float, np.floating)):
            # repr round-trips float64 exactly; JSON has no NaN/inf so keep them as text
            scalars[name] = {"t": "float", "v": repr(float(value))}
        elif isinstance(value, str):
            scalars[name] = {"t": "str", "v": value}
        elif value is None:
            scalars[name] = {"t": "none", "v": None}
        else:
            raise ValueError(f"state[{name!r}] has type {type(value).__name__}; checkpoints hold numpy arrays, "
                             "floats, ints, bools, strings or None")
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "key": key, "scalars": scalars, "meta": meta}
    arrays[JSON_MEMBER] = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode(data: np.lib.npyio.NpzFile, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    if JSON_MEMBER not in data.files:
        raise ValueError(f"{path}: not a ratiowatch checkpoint (no {JSON_MEMBER} member)")
    doc = json.loads(bytes(data[JSON_MEMBER]).decode())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a ratiowatch checkpoint (format {doc.get('format')!r})")
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format version {doc.get('version')} is not supported by this "
                         f"build (expects {FORMAT_VERSION}); delete it to start the key from scratch")
    state: dict[str, Any] = {name: data[name] for name in data.files if name != JSON_MEMBER}
    for name, item in doc["scalars"].items():
        t, v = item["t"], item["v"]
        state[name] = float(v) if t == "float" else v
    return state, doc["meta"]


def decode_bytes(payload: bytes, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state, meta)`` from a checkpoint's bytes (a file's content or a changelog record's value)."""
    try:
        data = np.load(io.BytesIO(payload), allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{where}: unreadable checkpoint ({exc})") from None
    try:
        return decode(data, Path(where))
    except (OSError, EOFError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: unreadable checkpoint ({exc})") from None
    finally:
        data.close()


def meta_of_bytes(payload: bytes) -> dict[str, Any]:
    """Only the metadata of a checkpoint's bytes (the arrays are not read)."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as data:
        return json.loads(bytes(data[JSON_MEMBER]).decode()).get("meta", {})
