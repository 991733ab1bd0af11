"""The package layout shows the architecture: dependencies point one way, with no cycle.

core imports nothing of ours; connectors (records, sources, sinks, metrics, checkpoint bytes)
imports nothing of ours either; the engine is the runtime's only importer of connectors (the
daemon's benchmark builds a daemon too); and the engine's subpackages form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _unit(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return f"stream.{parts[1]}" if parts[0] == "stream" else parts[0]


def _imports() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for top in ("ratiowatch", "core", "stream", "connectors"):
        for path in (REPO / top).rglob("*.py"):
            src = _unit(path)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    if parts[0] != "ratiowatch" or len(parts) < 2:
                        continue
                    dst = f"stream.{parts[2]}" if parts[1] == "stream" and len(parts) > 2 else parts[1]
                    if dst != src:
                        edges.setdefault(src, set()).add(dst)
    return edges


def test_core_and_connectors_import_nothing_else_of_ours():
    edges = _imports()
    assert edges.get("core", set()) == set()
    assert edges.get("connectors", set()) == set()


def test_only_the_engine_and_the_daemon_benchmark_import_connectors():
    importers = {src for src, dsts in _imports().items() if "connectors" in dsts}
    assert importers <= {"stream.engine", "stream.bench"}


def test_no_cycle_between_packages():
    edges = _imports()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges.get(node, ()):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(path + [nxt])
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in list(edges):
        if node not in state:
            visit(node, [node])
