"""Shared fixtures of the Python package's tests (tests/python)."""
import importlib.util
import itertools
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(REPO, "examples", "python")
OP_EXAMPLES = os.path.join(REPO, "examples", "ops")
_fresh = itertools.count()


def load_example(name, folder=EXAMPLES):
    """A fresh copy of examples/python/NAME.py (its BUG globals untouched)."""
    spec = importlib.util.spec_from_file_location("kprop_example_%s_%d" % (name, next(_fresh)),
                                                  os.path.join(folder, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_worker():
    """A fresh copy of python/kprop_worker.py, the standalone exec worker, as a module."""
    return load_example("kprop_worker", os.path.join(REPO, "python"))


@pytest.fixture
def example():
    return load_example


@pytest.fixture
def op_example():
    """A fresh copy of examples/ops/NAME.py (a declared op's NumPy kernel)."""
    return lambda name: load_example(name, OP_EXAMPLES)


@pytest.fixture
def corpus(tmp_path):
    """Counterexamples of one test go to its own temp folder, never the checkout."""
    return str(tmp_path / "corpus")
