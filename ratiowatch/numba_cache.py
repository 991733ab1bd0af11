"""Where numba keeps the compiled kernels, and one line on stderr while it compiles them.

The kernels are compiled on first use and cached on disk (``@njit(cache=True)``): the first run
after an install or an upgrade spends 20-30 s compiling (longer on a busy machine), later
processes load the cache in about a second. numba caches next to the sources (``__pycache__``)
when that directory is writable, else under the user's cache directory; when neither is (a
read-only install run by a user without a writable home: a container, a hardened service), it
refuses to load the kernels at all (``RuntimeError: cannot cache function ...: no locator
available``). :func:`configure_cache` therefore
points ``NUMBA_CACHE_DIR`` at a writable directory when the package directory is not writable:
``$XDG_CACHE_HOME/ratiowatch/numba`` (default ``~/.cache/ratiowatch/numba``), else
``<tmp>/ratiowatch-numba-<uid>`` (skipped when there is no usable temporary directory). When none
of these can be written, the kernels are compiled in memory in every process, as without
``cache=True`` (the same machine code, only not kept): a kernel that numba cannot cache is then
compiled uncached instead of raising, and the note at the first compile asks for a writable
``NUMBA_CACHE_DIR``. It must run before numba is imported (``import ratiowatch`` does it, and
every ``ratiowatch.*`` import runs it first); an explicit ``NUMBA_CACHE_DIR`` wins when it can be
used (it exists or can be created, and is writable); one that cannot is said once
on stderr and replaced as if it were not set. The package directory stands for the folders of the kernels' sources: one installed tree. ``ratiowatch warmup`` fills the cache ahead
of time (the Docker image runs it at build time).

Examples
--------
>>> import os, tempfile
>>> mine = os.path.join(tempfile.mkdtemp(), "cache")
>>> env = {"NUMBA_CACHE_DIR": mine}
>>> configure_cache(environ=env, package_dir=tempfile.mkdtemp()) == mine
True
>>> env = {"XDG_CACHE_HOME": tempfile.mkdtemp()}
>>> configure_cache(environ=env, package_dir=tempfile.mkdtemp()) is None  # writable: numba's default
True
>>> ro = os.path.join(tempfile.mkdtemp(), "a-file")
>>> _ = open(ro, "w").close()
>>> got = configure_cache(environ=env, package_dir=os.path.join(ro, "pkg"))  # cannot be created
>>> got == os.path.join(env["XDG_CACHE_HOME"], "ratiowatch", "numba") == env["NUMBA_CACHE_DIR"]
True
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
COMPILE_SECONDS = "20-30 s"


def _writable_dir(path: Path) -> bool:
    """Whether ``path`` exists or can be created, and a file can be written in it (as numba checks)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def _usable_dir(path: Path) -> bool:
    """Whether ``path`` is a writable directory or could be created as one, without creating it
    (an explicit ``NUMBA_CACHE_DIR`` that numba creates when it first writes there)."""
    try:
        if path.is_dir():
            return _writable_dir(path)
        probe = path
        while not probe.exists():  # the nearest existing ancestor must be a writable directory
            if probe.parent == probe:
                return False
            probe = probe.parent
        return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
    except OSError:  # a folder on the way that may not be searched
        return False


_warned = False


def _warn_unusable(path: str, instead: str) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    try:
        print(f"ratiowatch: NUMBA_CACHE_DIR={path} cannot be used (it cannot be created, or is not a writable "
              f"directory); caching the numba kernels {instead} instead", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the note is not worth a failure
        pass


def user_cache_dir(environ: MutableMapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/ratiowatch/numba`` (default ``~/.cache/ratiowatch/numba``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ratiowatch" / "numba"


def configure_cache(environ: MutableMapping[str, str] | None = None,
                    package_dir: str | os.PathLike | None = None) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` when the package directory is not writable; return the directory in force.

    Returns the explicit or chosen cache directory, or None when numba caches next to the sources
    (its default, the package being writable). Call it before numba is imported. An explicit
    directory that cannot be used is said once on stderr and replaced by the choice made without it.
    """
    env = os.environ if environ is None else environ
    explicit = env.get(ENV)
    if explicit:
        if _usable_dir(Path(explicit)):
            return explicit
        del env[ENV]
    global _in_memory
    got = _choose(env, package_dir)
    nowhere = got is _NOWHERE
    if nowhere:
        got = None
    if explicit:
        _warn_unusable(explicit, "in memory on every start" if nowhere else
                       f"in {got}" if got else "next to the installed package (__pycache__)")
        _reload_numba_config(env)
    if nowhere and env is os.environ:
        _in_memory = True
        _compile_uncached_when_nowhere_to_cache()
    return got


_NOWHERE = object()
_in_memory = False


def _compile_uncached_when_nowhere_to_cache() -> None:
    """Make ``@njit(cache=True)`` compile in memory when numba finds no place for the cache.

    numba raises ``RuntimeError: cannot cache function ...: no locator available`` when the
    kernel is defined (at import, so even ``ratiowatch --help`` would fail); its dispatcher keeps
    a no-op cache until ``enable_caching`` succeeds, so ignoring that one failure leaves the kernel
    compiled per process, exactly as without ``cache=True``. numba is imported here, early, only in
    this case: nothing in the process could be cached anyway.
    """
    from numba.core.dispatcher import Dispatcher

    original = Dispatcher.enable_caching
    if getattr(original, "_uncached_fallback", False):
        return

    def enable_caching(self):
        try:
            original(self)
        except RuntimeError:  # no locator: the dispatcher's NullCache stays, compiling in memory
            pass

    enable_caching._uncached_fallback = True
    Dispatcher.enable_caching = enable_caching


def _reload_numba_config(env: MutableMapping[str, str]) -> None:
    if env is os.environ and "numba" in sys.modules:  # too late for numba's import-time config
        from numba.core import config

        config.reload_config()


def _choose(env: MutableMapping[str, str], package_dir: str | os.PathLike | None) -> str | None:
    pkg = Path(package_dir) if package_dir is not None else Path(__file__).resolve().parent
    if _writable_dir(pkg / "__pycache__"):
        return None
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    for cand in (user_cache_dir(env), _temp_candidate(f"ratiowatch-numba-{uid}")):
        if cand is not None and _writable_dir(cand):
            env[ENV] = str(cand)
            _reload_numba_config(env)
            return str(cand)
    return _NOWHERE  # configure_cache makes the kernels compile in memory


def _temp_candidate(name: str) -> Path | None:
    """``<tmp>/name``, or None when no temporary directory is usable (gettempdir raises then, and
    this runs at ``import ratiowatch``: even ``--help`` must not fail on it)."""
    try:
        return Path(tempfile.gettempdir()) / name
    except OSError:
        return None


def cache_location() -> str:
    """Where the kernels are cached, in words (for messages)."""
    if _in_memory:
        return ("nowhere: no writable directory, so they are compiled in memory on every start; set "
                f"{ENV} to a writable directory to keep them")
    return os.environ.get(ENV) or "next to the installed package (__pycache__)"


_announced = False
_registered = False


def announce_compilation(stream=None, say=None) -> None:
    """Print one line to ``stream`` (default: the current stderr) the first time numba compiles a
    kernel in this process, or pass it to ``say`` (e.g. a logger's ``info``); registering again is
    a no-op.

    Nothing is printed when every kernel comes from the cache: numba signals ``numba:compile``
    only on a cache miss.
    """
    global _registered
    if _registered:
        return
    from numba.core import event

    class _Once(event.Listener):
        def on_start(self, ev):
            global _announced
            if _announced:
                return
            _announced = True
            if _in_memory:
                msg = f"compiling the numba kernels (about {COMPILE_SECONDS}; cached {cache_location()})"
            else:
                msg = (f"compiling the numba kernels (once after an install or upgrade, about {COMPILE_SECONDS}; "
                       f"cached in {cache_location()})")
            try:
                if say is not None:
                    say(msg)
                else:
                    print(f"ratiowatch: {msg}", file=sys.stderr if stream is None else stream, flush=True)
            except (OSError, ValueError):  # stderr closed: the note is not worth a failure
                pass

        def on_end(self, ev):
            pass

    event.register("numba:compile", _Once())
    _registered = True
