"""What an evaluation ran on: the versions and the BLAS kernels that can move its last bits.

Two runs of the same code on two machines can differ: OpenBLAS picks a kernel for the CPU at run
time (AVX-512 "SkylakeX", "Haswell", "Zen", ...), and the kernels sum in different orders. One
TSSB series whose test sits at its threshold gets 12 change points with one kernel and 21 with
another (docs/evaluation.md, "The machine"). Every ``ratiowatch eval ... --json`` result therefore
records :func:`environment` (and every ``ratiowatch bench ... --json`` result, with the CPU count
and the load: :func:`ratiowatch.stream.bench.common.environment`), and ``ratiowatch eval compare``
names any difference in it.

Examples
--------
>>> env = environment()
>>> sorted(env)[:4]
['blas', 'machine', 'numba', 'numpy']
>>> env["numpy"] == np.__version__
True
"""

from __future__ import annotations

import os
import platform

import numpy as np

#: environment variables that change which BLAS kernel runs or how many threads it uses
BLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "NUMBA_CPU_NAME")


def blas_libraries() -> list[dict] | str:
    """The BLAS libraries loaded in this process (numpy's and scipy's), each with its version and
    the kernel it picked for this CPU (``architecture``), read by threadpoolctl; a note where
    threadpoolctl is not installed (it comes with scikit-learn, a test extra)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (install threadpoolctl to record the BLAS kernel)"
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS, which the detectors use too)

    return [{"library": info.get("internal_api"), "version": info.get("version"),
             "architecture": info.get("architecture"), "file": os.path.basename(info.get("filepath", ""))}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def environment() -> dict:
    """Versions, the machine, the BLAS libraries with their kernels, and the BLAS-related
    environment variables that are set."""
    import numba
    import scipy

    from ratiowatch import __version__

    return {"ratiowatch": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__, "machine": platform.machine(),
            "blas": blas_libraries(),
            "variables": {k: os.environ[k] for k in BLAS_VARIABLES if k in os.environ}}
