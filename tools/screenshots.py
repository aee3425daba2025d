"""Take SVG screenshots of the live, replay and sessions screens from the running app.

    python -m tools.screenshots --db PATH --session ID|latest --out screenshots/

The replay screens open the stored session exactly as `autokernel-tui --replay` does. The live
screen is the real `LiveScreen`, fed the stored events through its event inbox in place of a
running engine (up to the first candidate that waited for approval, or to the end), so it shows
what that session looked like while it ran. Nothing is drawn that the store does not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from pathlib import Path

from autokernel.engine import events as ev
from autokernel.engine.errors import UserError
from autokernel.engine.store import Store
from autokernel.tui.app import AutokernelApp
from autokernel.tui.screens.live import EventInbox, LiveScreen


class StoredPlayback:
    """Stands in for a running session: hands stored events to the live screen, then idles until stopped."""

    def __init__(self, events: list[ev.Event], session_id: str, upto: int):
        self.events, self.session_id, self.upto = events, session_id, upto
        self.listeners: list = []
        self._stopped = threading.Event()
        self.paused = False

    def run(self) -> dict:
        for e in self.events[: self.upto]:
            for listener in self.listeners:
                listener(e)
        self._stopped.wait()
        return {}

    def stop(self) -> None:
        self._stopped.set()

    # a recorded session takes no orders
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def skip_target(self) -> None: ...
    def set_approval(self, mode: str) -> None: ...
    def approve(self, candidate_id: str) -> bool: return False
    def reject(self, candidate_id: str) -> bool: return False


def live_cut(events: list[ev.Event]) -> int:
    """Where to freeze the live screen: just after the first approval request, else the last experiment's timing."""
    for i, e in enumerate(events):
        if isinstance(e, ev.AwaitingApproval):
            return i + 1
    last_bench = max((i for i, e in enumerate(events) if isinstance(e, ev.BenchResult)), default=None)
    return last_bench + 1 if last_bench is not None else len(events)


async def _shoot(app: AutokernelApp, size: tuple[int, int], path: Path, keys=(), ready=None) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if ready is not None:
            for _ in range(200):
                if ready():
                    break
                await pilot.pause(0.05)
        await pilot.pause(0.2)
        if keys:
            await pilot.press(*keys)
            await pilot.pause(0.1)
        app.save_screenshot(filename=path.name, path=str(path.parent))
        print(f"wrote {path}")


def take(store: Store, ref: str, out: Path, size: tuple[int, int] = (120, 40)) -> list[Path]:
    row = store.session(ref)
    sid = row["id"]
    events = [e for _, e in store.events(sid)]
    out.mkdir(parents=True, exist_ok=True)
    w, h = size
    shots: list[Path] = []

    def shoot(app, path, size=size, keys=(), ready=None):
        asyncio.run(_shoot(app, size, path, keys, ready))
        shots.append(path)

    shoot(AutokernelApp(store, mode="replay", replay=sid), out / f"replay-{w}x{h}.svg")
    shoot(AutokernelApp(store, mode="replay", replay=sid), out / "replay-80x24.svg", size=(80, 24))
    failed = [i for i, e in enumerate(events) if isinstance(e, ev.StageResult) and e.status in ("fail", "crash", "timeout")]
    if failed:  # a failure and its reason, one event after it was shown
        back = len(events) - failed[-1] - 1
        shoot(AutokernelApp(store, mode="replay", replay=sid), out / f"replay-failure-{w}x{h}.svg",
              keys=("left",) * back)
    shoot(AutokernelApp(store, mode="sessions"), out / "sessions.svg", size=(w, 20))

    cut = live_cut(events)
    frozen_at = events[cut - 1].ts
    for live_size in (size, (80, 24)):  # the large layout and the compact one an SSH terminal gets
        playback = StoredPlayback(events, sid, cut)
        inbox = EventInbox()
        playback.listeners.append(inbox.push)
        app = AutokernelApp(store, mode="live", session=playback, inbox=inbox, clock=lambda: frozen_at)

        def drawn(app: AutokernelApp = app) -> bool:
            return isinstance(app.screen, LiveScreen) and app.screen.state.n_events >= cut

        shoot(app, out / f"live-{live_size[0]}x{live_size[1]}.svg", size=live_size, ready=drawn)
    return shots


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.split("\n")[0])
    p.add_argument("--db", default=None, help="session database (default: $AUTOKERNEL_DB or the user's)")
    p.add_argument("--session", default="latest", help="session id, prefix or latest")
    p.add_argument("--out", default="screenshots", help="folder for the SVG files")
    p.add_argument("--size", default="120x40", help="terminal size WxH for the large shots")
    args = p.parse_args(argv)
    try:
        w, h = (int(x) for x in args.size.lower().split("x"))
        take(Store(args.db), args.session, Path(args.out), (w, h))
    except ValueError:
        print(f"screenshots: error: --size {args.size!r}: use WIDTHxHEIGHT, e.g. 120x40", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"screenshots: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
