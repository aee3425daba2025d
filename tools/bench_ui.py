"""UI benchmark (a script, not a test): the TUI's responsiveness targets, measured and printed.

    python -m tools.bench_ui [--experiments 5000]

1. replay open: a synthetic session of N experiments (about 12 events each) written to a temporary
   SQLite file, then `autokernel-tui --replay` opened on it until the first screen is drawn
   (target < 2 s for 5,000 experiments);
2. replay step: ←/→ and [ / ] pressed through Pilot, each timed until the screen is idle again
   (target < 50 ms);
3. key response while the engine is busy: the live screen with an engine-like thread that writes
   every event to SQLite and spins the CPU between events; `d` sent as a key and timed until the
   code panel has switched (target < 100 ms).

Keys are sent with `App.simulate_key` (what a terminal key becomes) and timed until the screen's
state has changed, not through Pilot's `press`, which also waits for the whole app to go idle.
Run it on a quiet machine: the numbers scale with the load of the box.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from autokernel.engine.session_state import load_timeline
from autokernel.engine.store import Store
from autokernel.tui.app import AutokernelApp
from autokernel.tui.screens.live import EventInbox, LiveScreen
from autokernel.tui.screens.replay import ReplayScreen
from autokernel.tui.widgets.code import CodePanel

from tools.synthetic import SyntheticSession, write_session


def _summary(name: str, samples_s: list[float], target_ms: float) -> str:
    ms = sorted(1000 * s for s in samples_s)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    verdict = "ok" if p95 < target_ms else "OVER TARGET"
    return (f"{name:<34} median {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms   max {ms[-1]:7.1f} ms   "
            f"(n={len(ms)}, target < {target_ms:.0f} ms: {verdict})")


async def bench_replay(store: Store, steps: int) -> list[str]:
    lines = []
    t0 = time.perf_counter()
    _, timeline = load_timeline(store, "latest")
    fold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    app = AutokernelApp(store, mode="replay", replay="latest")
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, ReplayScreen):
            await pilot.pause(0.001)
        await pilot.pause()
        open_s = time.perf_counter() - t0
        screen = app.screen
        lines.append(f"replay: {len(screen.timeline):,} events, {screen.timeline.final.experiments:,} experiments")
        lines.append(f"{'replay open (read + fold + draw)':<34} {open_s * 1000:7.0f} ms   "
                     f"(read + fold alone {fold_s * 1000:.0f} ms; target < 2000 ms: "
                     f"{'ok' if open_s < 2 else 'OVER TARGET'})")
        for key, name in (("left", "replay step ← (one event back)"), ("right", "replay step → (one event)"),
                          ("left_square_bracket", "replay step [ (one experiment back)")):
            samples = []
            await pilot.press("home" if key == "right" else "end")
            for _ in range(steps):
                before = screen.position
                t = time.perf_counter()
                app.simulate_key(key)  # as a terminal key arrives: handled, state folded, panels updated
                while screen.position == before:
                    await asyncio.sleep(0.0005)
                samples.append(time.perf_counter() - t)
                await pilot.pause()  # let it paint before the next key
            lines.append(_summary(name, samples, 50))
        samples = []
        for pos in range(0, len(screen.timeline), max(1, len(screen.timeline) // steps)):
            t = time.perf_counter()
            screen.go(pos)
            await pilot.pause()
            samples.append(time.perf_counter() - t)
        lines.append(_summary("replay jump (anywhere)", samples, 50))
    return lines


async def bench_live_keys(store: Store, presses: int) -> list[str]:
    inbox = EventInbox()
    session = SyntheticSession(store, [inbox.push], experiments=100_000, approval="auto", busy_s=0.002)
    app = AutokernelApp(store, mode="live", session=session, inbox=inbox)
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, LiveScreen) or app.screen.state.experiments < 3:
            await pilot.pause(0.01)
        code = app.screen.query_one(CodePanel)
        samples = []
        for _ in range(presses):
            before = code.full_source
            t = time.perf_counter()
            app.simulate_key("d")  # as a terminal key arrives, while the engine thread keeps emitting
            while code.full_source == before:
                await asyncio.sleep(0.0005)
            samples.append(time.perf_counter() - t)
            await pilot.pause(0.05)
        received = inbox.received
        redraws = app.screen.redraws
        await pilot.press("q", "y")
        while app.screen is not None and isinstance(app.screen, LiveScreen) and app.screen.engine_running:
            await pilot.pause(0.05)
    return [f"live: engine thread wrote {received:,} events to SQLite meanwhile, {redraws} redraws (coalesced)",
            _summary("key response, engine busy (d)", samples, 100)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_ui", description=__doc__.split("\n")[0])
    p.add_argument("--experiments", type=int, default=5000)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
        t0 = time.perf_counter()
        write_session(store, experiments=args.experiments)
        print(f"wrote a synthetic {args.experiments:,}-experiment session in {time.perf_counter() - t0:.1f} s")
        for line in asyncio.run(bench_replay(store, args.steps)):
            print(line)
        live = Store(Path(tmp) / "live.db")
        for line in asyncio.run(bench_live_keys(live, args.steps // 2)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
