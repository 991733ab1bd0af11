"""Shared helpers of the deploy tests: file locations, YAML loading, metric names in PromQL.

Examples
--------
>>> sorted(promql_metric_names('sum by (kind) (rate(ratiowatch_alerts_total{job="x"}[5m])) * 60'))
['ratiowatch_alerts_total']
>>> sorted(exported_metric_names("# TYPE a_total counter\\n# TYPE h histogram\\nh_bucket{le=\\"1\\"} 0\\n"))
['a_total', 'h_bucket', 'h_count', 'h_sum']
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import deploy_yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

try:  # PyYAML is not a project dependency; use it when present, the subset reader otherwise
    import yaml as _pyyaml
except ImportError:  # pragma: no cover - depends on the environment
    _pyyaml = None


def load_yaml_all(path: Path) -> list[Any]:
    """All documents of a deploy/ YAML file; with PyYAML present, both readers must agree."""
    text = path.read_text()
    docs = deploy_yaml.load_all(text)
    if _pyyaml is not None:
        reference = [d for d in _pyyaml.safe_load_all(text) if d is not None]
        assert docs == reference, f"{path}: the subset YAML reader disagrees with PyYAML"
    return docs


def load_yaml(path: Path) -> Any:
    docs = load_yaml_all(path)
    assert len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}"
    return docs[0]


def exported_metric_names(exposition: str) -> set[str]:
    """Series names a Prometheus text exposition offers, including families without samples yet.

    Labelled metrics (alerts by kind, bad records by reason, ...) have no samples until a first
    label value is seen, but their ``# TYPE`` line is there from the start.
    """
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            elif kind == "summary":
                names |= {name, f"{name}_sum", f"{name}_count"}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
             "and", "or", "unless", "inf", "nan", "Inf", "NaN"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (bare identifiers that are not functions or keywords)."""
    s = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)                 # Grafana variables
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', s)  # string literals
    s = re.sub(r"\{[^}]*\}", "", s)                             # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)                            # range / subquery selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)
    names = set()
    for m in re.finditer(r"(?<![0-9A-Za-z_:.])[A-Za-z_:][A-Za-z0-9_:]*", s):
        name = m.group(0)
        if name in _KEYWORDS or re.match(r"\s*\(", s[m.end():]):
            continue  # keyword or function call
        names.add(name)
    return names


def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "ratiowatch.json").read_text())


def dashboard_panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) of every query target."""
    return [(p["title"], t["expr"]) for p in dashboard_panels(dash) for t in p.get("targets", [])]


def grafana_to_promql(expr: str, rate_interval: str = "1m") -> str:
    """Substitute the dashboard's variables as Grafana would with "All" selected."""
    return (expr.replace("$__rate_interval", rate_interval)
            .replace("$instance", ".*").replace("$key", ".*"))
