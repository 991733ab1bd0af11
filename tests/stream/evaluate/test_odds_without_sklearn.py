"""``ratiowatch eval odds`` without scikit-learn (an optional ``test`` extra; the protocol's splits,
ROC-AUC and baselines are scikit-learn's): one line saying so and how to install it, exit 2, before
any data set is read; also with ``--no-baselines``, which still splits and scores with it."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from cli_util import cache_env


def _without_sklearn(tmp_path) -> dict:
    """The environment with a folder first on PYTHONPATH in which ``import sklearn`` fails as when it
    is not installed."""
    stub = tmp_path / "without-sklearn"
    stub.mkdir()
    (stub / "sklearn.py").write_text("raise ModuleNotFoundError(\"No module named 'sklearn'\", name='sklearn')\n")
    env = cache_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("extra", [[], ["--no-baselines"]], ids=["baselines", "no-baselines"])
def test_eval_odds_without_scikit_learn_exits_2_with_one_line(tmp_path, extra):
    rng = np.random.default_rng(0)
    data = tmp_path / "odds"
    data.mkdir()
    np.savez(data / "toy.npz", X=np.vstack([rng.normal(size=(60, 2)), rng.normal(6.0, 1.0, size=(6, 2))]),
             y=np.r_[np.zeros(60), np.ones(6)])
    r = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "eval", "odds", str(data),
                        "--seeds", "1", "--json", *extra], env=_without_sklearn(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("ratiowatch: compiling")]
    assert lines == ["ratiowatch eval odds: needs scikit-learn (the protocol's splits and ROC-AUC, and its "
                     "baselines), which is not installed; install it with pip install '.[test]'"], r.stderr
