"""Every ``>>>`` example in the package's docstrings runs and prints what it shows."""
import doctest
import importlib
import pkgutil

import pytest

import ddnumba


def _modules():
    import ddnumba.kernels
    names = ["ddnumba", "ddnumba.kernels"]
    for m in pkgutil.walk_packages(ddnumba.__path__, "ddnumba."):
        names.append(m.name)
    # installed as ddnumba.kernels from the repository's top-level kernels/
    for m in pkgutil.walk_packages(ddnumba.kernels.__path__, "ddnumba.kernels."):
        names.append(m.name)
    return sorted(set(names))


def _examples():
    finder = doctest.DocTestFinder()
    out = []
    for name in _modules():
        mod = importlib.import_module(name)
        for t in finder.find(mod, name):
            if t.examples:
                out.append(t)
    return out


EXAMPLES = _examples()


def test_the_package_has_examples():
    # the examples this file runs must not silently disappear
    names = {t.name for t in EXAMPLES}
    assert "ddnumba.operators.output.Captured.new_updates" in names
    assert "ddnumba.kernels.merge.merge" in names
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("test", EXAMPLES, ids=lambda t: t.name)
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"{test.name}: {runner.failures} example(s) failed"
    assert runner.tries == len(test.examples)
