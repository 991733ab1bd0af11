"""What an evaluation result records of the machine it ran on."""

import numpy as np
import pytest

from ratiowatch.stream.evaluate.environment import blas_libraries, environment


def test_the_versions_and_the_machine_are_recorded():
    import numba
    import scipy

    env = environment()
    assert (env["numpy"], env["scipy"], env["numba"]) == (np.__version__, scipy.__version__, numba.__version__)
    assert env["machine"] and env["python"].count(".") == 2


def test_the_blas_kernel_numpy_runs_is_recorded():
    pytest.importorskip("threadpoolctl")
    libs = blas_libraries()
    assert isinstance(libs, list) and libs, libs
    assert all(lib["library"] and lib["version"] for lib in libs)
    # OpenBLAS names the kernel it picked for this CPU (the architecture that moves the last bits)
    assert all(lib["architecture"] for lib in libs if lib["library"] == "openblas")


def test_only_the_blas_variables_that_are_set_are_recorded(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    variables = environment()["variables"]
    assert variables["OPENBLAS_CORETYPE"] == "Haswell" and "MKL_NUM_THREADS" not in variables


def test_without_threadpoolctl_the_record_says_how_to_get_the_kernel(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # a runtime install without scikit-learn
    note = blas_libraries()
    assert isinstance(note, str) and "install threadpoolctl" in note
    assert environment()["blas"] == note
