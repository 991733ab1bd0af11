"""Every docstring example in the packages runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import ratiowatch
import ratiowatch.connectors
import ratiowatch.core
import ratiowatch.stream


def _modules():
    yield ratiowatch.__name__
    for pkg in (ratiowatch.core, ratiowatch.stream, ratiowatch.connectors):
        yield pkg.__name__
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"
