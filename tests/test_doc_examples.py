"""The examples in the package's docstrings run (doctest), so its documentation stays true.

Examples that need what a test machine lacks (a running TF Serving, a trained run
directory) carry ``# doctest: +SKIP``; every other example runs as written.
"""

import doctest
import importlib
import pkgutil

import pytest

import keras_electra

MODULES = sorted(m.name for m in pkgutil.walk_packages(keras_electra.__path__, "keras_electra."))


@pytest.mark.parametrize("name", ["keras_electra", *MODULES])
def test_the_docstring_examples_run(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, report=False)
    assert result.failed == 0, capsys.readouterr().out[-3000:]


def test_the_package_has_examples():
    attempted = 0
    for name in MODULES:
        finder = doctest.DocTestFinder()
        attempted += sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
    assert attempted > 100, attempted
