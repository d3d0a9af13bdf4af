"""Fixtures shared by the tests of several modules (the root conftest.py decides what nbval collects).

The book's analysis (``book/analysis``) is imported as the pages import it, with ``book/`` on the path.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book"))

from fake_data import make_mnist


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A tiny MNIST and empty folders for records and checkpoints; never the repository's runs/."""
    make_mnist(tmp_path / "data", n_train=64, n_test=32)
    monkeypatch.setenv("PAPERLIB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PAPERLIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("PAPERLIB_SMOKE", raising=False)
    return tmp_path
