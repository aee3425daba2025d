"""Helpers shared by the TUI tests (not a test module): real stores with synthetic sessions, text of widgets."""

from __future__ import annotations

from pathlib import Path

from textual.content import Content

from autokernel.engine.store import Store
from tools.synthetic import write_session


def stored_session(path: Path, experiments: int = 12, seed: int = 7, approval: str = "auto") -> tuple[Store, str]:
    """A real SQLite session file holding one synthetic session."""
    store = Store(path)
    sid = write_session(store, experiments=experiments, seed=seed, approval=approval)
    return store, sid


def text_of(widget) -> str:
    """What a Static-like panel shows, without its markup."""
    c = widget.content
    return Content.from_markup(c).plain if isinstance(c, str) else str(c)


async def wait_for(pilot, condition, timeout: float = 10.0, step: float = 0.05) -> None:
    """Let the app run until `condition()` holds; fail the test if it never does."""
    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(step)
        waited += step


def sync(fn):
    """Run an async test body with asyncio.run (no pytest async plugin needed)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
