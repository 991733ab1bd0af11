"""Peer segmenters run on the same series in the same evaluation: ruptures and claspy.

* ``zero``: no change points at all, the floor every detector must beat (on TCPD it beats most
  published methods, van den Burg and Williams 2020);
* ``pelt``, ``binseg``: ruptures ``Pelt`` and ``Binseg`` with the RBF cost (Truong, Oudre and Vayatis
  2020), library defaults otherwise (``min_size=2``, ``jump=5``, the kernel width from the median
  heuristic) and the BIC-like penalty ``pen = log T`` (ruptures has no default penalty; the RBF
  cost of a segment is at most its length, so ``log T`` plays the role of BIC's ``(d/2) log T``
  per change). ruptures' RBF cost holds the full T x T Gram matrix, and its PELT evaluates O(T^2)
  segment costs one Python call at a time (1,500 points: about 20 s against 0.5 s for BinSeg), so
  series longer than :data:`RUPTURES_MAX` (1,000 samples for PELT, 5,000 for BinSeg) are averaged
  over blocks of ``ceil(T / RUPTURES_MAX)`` samples first and the change points mapped back to
  block starts. ruptures is a ``bench`` / ``test`` extra.
* ``claspy``, ``class``: claspy 0.2.8's offline ``BinaryClaSPSegmentation`` (Schaefer, Ermshaus
  and Leser 2021) and streaming ``StreamingClaSPSegmentation`` (ClaSS, Ermshaus, Schaefer and Leser
  2024). claspy pins numpy, scipy and scikit-learn below the project's versions, so it lives in its
  own virtual environment (``make peers`` builds ``.venv-peers``) and runs as a subprocess
  (:mod:`ratiowatch.stream.evaluate.peers_claspy`): series go out as ``.npy`` files, change points come back as JSON lines.
  Its results are cached per series (``.peers_cache/`` in a checkout, else
  ``$XDG_CACHE_HOME/ratiowatch/peers``, default ``~/.cache/ratiowatch/peers``; ``$RATIOWATCH_PEERS_CACHE``
  wins; keyed by the series' bytes, the method and the claspy version), since ClaSS takes minutes
  on a 10,000-point series. A cache that cannot be written skips the claspy peers with a note.

Missing values are carried forward (then backward) before a peer sees the series; multivariate
series go to ruptures and to ``BinaryClaSPSegmentation`` as they are, and not to ClaSS (univariate):
that peer reports them as failed with the reason.

Examples
--------
>>> import numpy as np
>>> fill_missing_peers(np.array([np.nan, 1.0, np.nan, 3.0]))
array([1., 1., 1., 3.])
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from ratiowatch.stream.commands.interrupts import failure_reason

RUPTURES_PEERS = ("pelt", "binseg")
CLASPY_PEERS = ("claspy", "class")
ALL_PEERS = ("zero",) + RUPTURES_PEERS + CLASPY_PEERS
RUPTURES_MAX = {"pelt": 1000, "binseg": 5000}
CLASPY_VERSION = "0.2.8"
VENV_ENV = "RATIOWATCH_PEERS_VENV"
CACHE_ENV = "RATIOWATCH_PEERS_CACHE"
_CLASPY_METHOD = {"claspy": "binseg", "class": "class"}


def checkout_root() -> Path | None:
    """The ratiowatch checkout holding this package, or None when it is installed.

    A checkout is the folder two levels above this file (``<root>/stream/evaluate/peers.py``) when
    its ``pyproject.toml`` is ratiowatch's own: an install into a virtual environment inside
    another project must not take that project's root for ours.
    """
    root = Path(__file__).resolve().parents[2]
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return root if isinstance(project, dict) and project.get("name") == "ratiowatch" else None


def repo_root() -> Path:
    """The checkout holding this package (else the installed package's folder)."""
    return checkout_root() or Path(__file__).resolve().parents[2]


def peers_python() -> Path | None:
    """The peers environment's interpreter (``$RATIOWATCH_PEERS_VENV`` or ``<repo>/.venv-peers``), or None."""
    venv = Path(os.environ.get(VENV_ENV) or repo_root() / ".venv-peers")
    py = venv / "bin" / "python"
    return py if py.is_file() else None


def missing_venv_message() -> str:
    return ("claspy peers skipped: no peers environment (build it with `make peers`, which creates "
            f".venv-peers with claspy=={CLASPY_VERSION}, or point ${VENV_ENV} at one)")


def claspy_problem(python: Path) -> str | None:
    """Why the peers environment of ``python`` cannot run claspy (None: it can), as the note of the
    skipped peers. Checked once, before any series: otherwise every series would come back as a
    failed run, scored 0 and averaged in as if claspy had run."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run([str(python), "-c", "import numpy, claspy, importlib.metadata as m; "
                               "print(m.version('claspy'))"], capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = str(exc)
    else:
        if proc.returncode == 0:
            found = (proc.stdout.strip().splitlines() or [""])[-1]
            if found == CLASPY_VERSION:
                return None
            # the cache is keyed by the pinned version: another one's results would pass for it
            return (f"claspy peers skipped: {python} has claspy {found or '(version unknown)'}, and the peers are "
                    f"pinned to claspy=={CLASPY_VERSION}; build the peers environment with `make peers` or point "
                    f"${VENV_ENV} at one with that version")
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {proc.returncode}"
    return (f"claspy peers skipped: claspy is not importable by {python} ({reason}); build the peers "
            f"environment with `make peers` (claspy=={CLASPY_VERSION}) or point ${VENV_ENV} at one")


def fill_missing_peers(x: np.ndarray) -> np.ndarray:
    """Carry the last seen value forward (then the first one backward) in each channel."""
    x = np.array(x, dtype=np.float64)
    flat = x.ndim == 1
    x2 = x[:, None] if flat else x
    for j in range(x2.shape[1]):
        col = x2[:, j]
        ok = np.isfinite(col)
        if not ok.any():
            col[:] = 0.0
            continue
        idx = np.where(ok, np.arange(col.size), 0)
        np.maximum.accumulate(idx, out=idx)
        first = int(np.argmax(ok))
        idx[:first] = first
        x2[:, j] = col[idx]
    return x2[:, 0] if flat else x2


def _block_means(x: np.ndarray, block: int) -> np.ndarray:
    m = -(-x.shape[0] // block)
    pad = m * block - x.shape[0]
    xp = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) if pad else x
    return xp.reshape(m, block, *x.shape[1:]).mean(axis=1)


def run_ruptures(x: np.ndarray, algo: str) -> list[int]:
    """Change points of ruptures ``Pelt`` / ``Binseg`` (RBF cost, pen = log T), see the module docstring."""
    import ruptures as rpt

    x = fill_missing_peers(x)
    t_len = x.shape[0]
    block = max(1, -(-t_len // RUPTURES_MAX[algo]))
    xs = _block_means(x, block) if block > 1 else x
    if xs.shape[0] < 4:
        return []
    cls = {"pelt": rpt.Pelt, "binseg": rpt.Binseg}[algo]
    bkps = cls(model="rbf").fit(xs).predict(pen=float(np.log(xs.shape[0])))
    return sorted({min(t_len - 1, int(b) * block) for b in bkps if 0 < b < xs.shape[0]})


def cache_dir() -> Path:
    """Where claspy's results are cached: ``$RATIOWATCH_PEERS_CACHE``, else ``.peers_cache/`` in a
    checkout, else the user's cache (``$XDG_CACHE_HOME/ratiowatch/peers``, default
    ``~/.cache/ratiowatch/peers``): an installed package's folder may be read-only, and is not a
    place for data."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    root = checkout_root()
    if root is not None:
        return root / ".peers_cache"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ratiowatch" / "peers"


def _ensure_writable_cache(cache: Path) -> None:
    """Create ``cache`` and check that a file can be written in it, before claspy runs for minutes;
    a RuntimeError (the claspy peers are skipped with a note, the other peers still report)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as exc:
        raise RuntimeError(f"cannot write its result cache {cache} ({exc.strerror or exc}); set {CACHE_ENV} "
                           "to a writable folder") from None


def _key(method: str, x: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(f"{method}|claspy=={CLASPY_VERSION}|{x.shape}|".encode())
    h.update(np.ascontiguousarray(x, dtype=np.float64).tobytes())
    return f"{method}-{h.hexdigest()[:24]}.json"


def _call_runner(python: Path, method: str, items: list[tuple[str, str]], warmup: int = 0):
    """Run :mod:`.peers_claspy` with ``python`` on ``(name, npy path)`` items; yield its JSON records."""
    runner = Path(__file__).with_name("peers_claspy.py")
    req = json.dumps({"method": method, "warmup": int(warmup),
                      "series": [{"name": n, "path": p} for n, p in items]})
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen([str(python), str(runner)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, env=env)
        try:
            proc.stdin.write(req)
            proc.stdin.close()
        except BrokenPipeError:  # the interpreter died before reading: its stderr says why
            pass
        chatter = []  # lines that are not the runner's records (a library printing to stdout)
        for line in proc.stdout:
            text = line.strip()
            try:
                rec = json.loads(text) if text.startswith("{") else None
            except json.JSONDecodeError:
                rec = None
            if isinstance(rec, dict):
                yield rec
            elif text:
                chatter = (chatter + [text])[-5:]
        code = proc.wait()
        if code != 0:
            err.seek(0)
            said = err.read().strip()[-500:] or (f"no stderr; its stdout ended with: {chatter[-1][:200]}" if chatter
                                                 else "no stderr")
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            raise RuntimeError(f"claspy runner failed ({python}; {how}): {said}")


def claspy_streaming_rate(x: np.ndarray, python: Path | None = None, warmup: int = 2000) -> dict:
    """ClaSS's throughput on ``x`` (uncached; its kernels compiled first on ``warmup`` values).

    ``points_per_s`` counts every sample (ClaSS's own warm-up of ``min(T, 10000)`` samples
    included); ``stream_points_per_s`` only the samples after that warm-up.
    """
    python = python or peers_python()
    if python is None:
        raise FileNotFoundError(missing_venv_message())
    with tempfile.TemporaryDirectory(prefix="ratiowatch-peers-") as tmp:
        path = Path(tmp) / "x.npy"
        np.save(path, np.asarray(x, dtype=np.float64), allow_pickle=False)
        rec = next(iter(_call_runner(python, "class", [("x", str(path))], warmup=warmup)))
    out = {"points": rec["length"], "seconds": rec["seconds"],
           "points_per_s": round(rec["length"] / max(rec["seconds"], 1e-9), 1), "error": rec["error"]}
    out.update({k: rec[k] for k in ("stream_points", "stream_seconds", "stream_points_per_s") if k in rec})
    return out


def run_claspy(series: Mapping[str, np.ndarray], peer: str, python: Path | None = None,
               cache: Path | None = None, progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """claspy change points of every series (cached), run by the peers environment's ``python``.

    Returns ``{name: {"change_points", "alarm_index", "seconds", "error", "cached"}}``.
    """
    method = _CLASPY_METHOD[peer]
    python = python or peers_python()
    if python is None:
        raise FileNotFoundError(missing_venv_message())
    cache = cache or cache_dir()
    _ensure_writable_cache(cache)
    out: dict[str, dict] = {}
    todo = []
    with tempfile.TemporaryDirectory(prefix="ratiowatch-peers-") as tmp:
        for name, x in series.items():
            x = np.asarray(x, dtype=np.float64)
            if x.ndim == 2 and x.shape[1] == 1:
                x = x[:, 0]
            if x.ndim != 1 and method == "class":
                out[name] = {"change_points": [], "alarm_index": None, "seconds": 0.0, "cached": False,
                             "error": "claspy's ClaSS is univariate; series has shape " + str(x.shape)}
                continue
            x = fill_missing_peers(x)
            f = cache / _key(method, x)
            if f.is_file():
                out[name] = {**json.loads(f.read_text()), "cached": True}
                continue
            path = Path(tmp) / f"{len(todo)}.npy"
            np.save(path, x, allow_pickle=False)
            todo.append((name, str(path), f))
        if todo:
            files = {n: f for n, _, f in todo}
            for rec in _call_runner(python, method, [(n, p) for n, p, _ in todo]):
                name = rec.pop("name")
                res = {k: v for k, v in rec.items() if k != "method"}
                if res["error"] is None:
                    files[name].write_text(json.dumps(res))
                out[name] = {**res, "cached": False}
                if progress is not None:
                    progress(f"{peer} {name}: {res['change_points']} ({res['seconds']} s)")
            for n, _, _ in todo:
                out.setdefault(n, {"change_points": [], "alarm_index": None, "seconds": 0.0, "cached": False,
                                   "error": "peers runner returned no result"})
    return out


def run_peers(series: Mapping[str, np.ndarray], peers: Iterable[str] = ALL_PEERS,
              progress: Callable[[str], None] | None = None) -> tuple[dict[str, dict[str, dict]], list[str]]:
    """``({peer: {name: result}}, notes)`` for every available peer; unavailable ones are noted and skipped."""
    results: dict[str, dict[str, dict]] = {}
    notes: list[str] = []
    peers = list(peers)
    if "zero" in peers:
        results["zero"] = {name: {"change_points": [], "seconds": 0.0, "error": None} for name in series}
    if any(p in RUPTURES_PEERS for p in peers):
        try:
            import ruptures  # noqa: F401
        except ModuleNotFoundError:
            notes.append("ruptures peers skipped: ruptures is not installed (pip install -e '.[bench]')")
            peers = [p for p in peers if p not in RUPTURES_PEERS]
    for p in [p for p in peers if p in RUPTURES_PEERS]:
        results[p] = {}
        for name, x in series.items():
            t0 = time.perf_counter()
            try:
                cps, err = run_ruptures(x, p), None
            except Exception as exc:
                cps, err = [], failure_reason(exc)
            results[p][name] = {"change_points": cps, "seconds": round(time.perf_counter() - t0, 3), "error": err}
            if progress is not None:
                progress(f"{p} {name}: {cps if err is None else err} ({results[p][name]['seconds']} s)")
    claspy_peers = [p for p in peers if p in CLASPY_PEERS]
    if claspy_peers:
        python = peers_python()
        problem = missing_venv_message() if python is None else claspy_problem(python)
        if problem:
            notes.append(problem)
        else:
            for p in claspy_peers:
                try:
                    results[p] = run_claspy(series, p, python=python, progress=progress)
                except RuntimeError as exc:  # the other peers still report
                    notes.append(f"{p} peer failed: {exc}")
    return results, notes
