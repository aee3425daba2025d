"""Shared test set-up: every test gets its own cache folder and session database, never the user's."""

from __future__ import annotations

import os

import pytest


def _point_user_dirs(mp: pytest.MonkeyPatch, base) -> None:
    mp.setenv("AUTOKERNEL_CACHE_DIR", str(base / "cache"))
    mp.setenv("AUTOKERNEL_DB", str(base / "sessions.db"))
    mp.setenv("XDG_DATA_HOME", str(base / "data"))


@pytest.fixture(autouse=True, scope="session")
def _isolated_user_dirs_for_shared_fixtures(tmp_path_factory):
    """The same for module-scoped fixtures (a whole KernelBench batch), which run before any test's own."""
    with pytest.MonkeyPatch.context() as mp:
        _point_user_dirs(mp, tmp_path_factory.mktemp("shared-userdirs"))
        yield


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    _point_user_dirs(monkeypatch, tmp_path_factory.mktemp("userdirs"))


@pytest.fixture(autouse=True)
def _environment_restored():
    """Code a test imports in-process may set variables for its own run (an exported package or a
    ModelNew file sets TRITON_INTERPRET=1 on a machine without a GPU); they must not leak into later
    tests' subprocesses (a Triton compile for sm_90 then ran the kernels in the interpreter instead)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "sessions.db"
