"""Checkpoints as an earlier version wrote them, for the tests that such states still load."""

from __future__ import annotations

import json


def written_before(state: dict, param: str, array_prefix: str) -> dict:
    """``state`` as written before ``param`` existed: without it among the parameters in ``meta``
    and without the arrays whose names start with ``array_prefix``."""
    old = {k: v for k, v in state.items() if not k.startswith(array_prefix)}
    meta = json.loads(str(old["meta"]))
    del meta["params"][param]
    old["meta"] = json.dumps(meta)
    return old
