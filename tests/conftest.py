"""Shared test set-up: every test gets its own cache folder and session database, never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.mktemp("userdirs")
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("AUTOKERNEL_DB", str(base / "sessions.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(base / "data"))


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "sessions.db"
