"""Fixtures shared by the tests of several modules (the root conftest.py decides what nbval collects)."""

import pytest
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
