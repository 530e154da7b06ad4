"""The Examples sections of every public module of regimes run as doctests.

Modules are found by walking the package (``public_module`` is parametrised in
tests/conftest.py), so a new module's examples are run without a new test.
"""

from __future__ import annotations

import doctest
import importlib

DOCTEST_PACKAGE = "regimes"


def test_examples_run(public_module, run_doctests):
    module = importlib.import_module(public_module)
    run_doctests(doctest.DocTestFinder(exclude_empty=True).find(module))
