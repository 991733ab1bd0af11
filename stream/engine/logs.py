"""Structured JSON logs: one JSON object per line on stderr, via stdlib logging.

Fields passed through ``extra={...}`` become top-level keys of the JSON object.

Examples
--------
>>> import logging
>>> rec = logging.LogRecord("ratiowatch", logging.INFO, __file__, 1, "started %s", ("x",), None)
>>> rec.keys = 3
>>> import json; d = json.loads(JsonFormatter().format(rec))
>>> d["msg"], d["level"], d["keys"]
('started x', 'INFO', 3)
"""

from __future__ import annotations

import json
import logging
import sys
import time

# attributes every LogRecord has; anything else came from `extra=` and is emitted as a field
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "INFO", stream=None) -> None:
    """Route the ``ratiowatch`` loggers to ``stream`` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("ratiowatch")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
