"""Keep the generated config reference in sync with the schema:
``python -m ratiowatch.stream.engine.config_reference`` rewrites ``configs/REFERENCE.md``.

The reference is generated from :mod:`ratiowatch.stream.engine.config` (the same text that
``ratiowatch validate --reference`` prints), and a test fails when the file drifts from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ratiowatch.stream.engine.config import config_reference_markdown

ROOT = Path(__file__).resolve().parents[2]  # stream/engine/config_reference.py -> repository root
REFERENCE = ROOT / "configs" / "REFERENCE.md"


def reference_text() -> str:
    """The generated file's content."""
    return config_reference_markdown() + "\n"


def main() -> int:
    REFERENCE.write_text(reference_text())
    print(f"updated {REFERENCE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
