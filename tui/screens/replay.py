"""The replay screen: a stored session through the same panels, fed from the store alone.

Positions are counts of events applied (0 = before the first). ←/→ step one event, [ / ] one
experiment, Home/End the ends, g jumps to an experiment, space plays at the chosen speed.
"""

from __future__ import annotations

import math

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from autokernel.engine.session_state import SessionState, Timeline

from ..widgets.dashboard import Dashboard, cycle_view, view_key_allowed
from ..widgets.footer import KeyFooter
from ..widgets.status import StatusLine
from .dialogs import HelpScreen, JumpDialog

SPEEDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # events per second
TICK_S = 1 / 20


class ReplayBar(Static):
    """Where the replay stands: event n of N, experiment, play state and speed."""


class ReplayScreen(Screen):
    BINDINGS = [
        Binding("left", "step(-1)", "Back", priority=True),
        Binding("right", "step(1)", "Step", priority=True),
        Binding("left_square_bracket", "experiment(-1)", "Prev exp", key_display="["),
        Binding("right_square_bracket", "experiment(1)", "Next exp", key_display="]"),
        Binding("home", "goto_start", "Start", show=False, priority=True),
        Binding("end", "goto_end", "End", show=False, priority=True),
        Binding("g", "jump", "Jump to exp"),
        Binding("space", "play", "Play/pause", priority=True),
        Binding("plus,equals_sign", "speed(1)", "Faster", key_display="+"),
        Binding("minus", "speed(-1)", "Slower", key_display="-"),
        Binding("v", "cycle_view", "View: code/chart/events"),
        Binding("d", "toggle_code", "Diff/source"),
        Binding("escape", "back", "Back", show=False),
        Binding("q", "back", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]
    HELP = "Replay: a stored session, step by step, exactly as it was shown live."
    # The footer on a small terminal: short labels, and the speed keys (in the help) left out, so all fit.
    FOOTER_SHORT = {"experiment(-1)": "Prev", "experiment(1)": "Next", "jump": "Jump", "play": "Play",
                    "cycle_view": "View", "toggle_code": "Code"}
    FOOTER_NARROW_DROP = ("speed(1)", "speed(-1)")

    def __init__(self, timeline: Timeline, row: dict, position: int | None = None):
        super().__init__()
        self.timeline = timeline
        self.row = row
        self.position = len(timeline) if position is None else max(0, min(position, len(timeline)))
        self.state: SessionState = SessionState(timeline.session_id)
        self.speed_i = 3
        self.playing = False
        self._timer = None

    def compose(self):
        yield StatusLine(id="status")
        yield ReplayBar(id="replay-bar")
        yield Dashboard(id="dashboard")
        yield KeyFooter()

    def on_mount(self) -> None:
        self._timer = self.set_interval(TICK_S, self._tick, pause=True)
        self.show()

    # -- drawing --------------------------------------------------------------------------------
    def show(self) -> None:
        self.state = self.timeline.state_at(self.position)
        self.query_one(Dashboard).show(self.state)
        self.query_one(StatusLine).show(self.state)
        self._show_bar()

    def _show_bar(self) -> None:
        n = len(self.timeline)
        c = self.state.candidate
        total = self.timeline.final.experiments
        exp = f"experiment {c.experiment} of {total}" if c else f"before the first of {total} experiments"
        play = "[b $success]playing[/]" if self.playing else "[b]paused[/]"
        self.query_one(ReplayBar).update(
            f"[b $accent]replay[/] event {self.position}/{n} │ {exp} │ "
            f"{play} at {SPEEDS[self.speed_i]} ev/s │ {self.timeline.session_id}")

    def go(self, position: int) -> None:
        position = max(0, min(position, len(self.timeline)))
        if position != self.position:
            self.position = position
            self.show()
        else:
            self._show_bar()

    # -- keys -----------------------------------------------------------------------------------
    def action_step(self, delta: int) -> None:
        self._stop_playing()
        self.go(self.position + delta)

    def action_experiment(self, direction: int) -> None:
        self._stop_playing()
        self.go(self.timeline.next_experiment(self.position, direction))

    def action_goto_start(self) -> None:
        self._stop_playing()
        self.go(0)

    def action_goto_end(self) -> None:
        self._stop_playing()
        self.go(len(self.timeline))

    def action_jump(self) -> None:
        self._stop_playing()

        def jump(n: int | None) -> None:
            if n is None:
                return
            pos = self.timeline.position_of_experiment(n)
            if pos is None:
                self.notify(f"no experiment {n} (the last is {self.timeline.final.experiments})", severity="warning")
                return
            self.go(pos)

        self.app.push_screen(JumpDialog(self.timeline.final.experiments), jump)

    def action_play(self) -> None:
        if self.playing:
            self._stop_playing()
        else:
            if self.position >= len(self.timeline):
                self.position = 0
                self.show()
            self.playing = True
            self._timer.resume()
        self._show_bar()

    def action_speed(self, direction: int) -> None:
        self.speed_i = max(0, min(len(SPEEDS) - 1, self.speed_i + direction))
        self._show_bar()

    def _tick(self) -> None:
        # events per tick at this speed; fractional speeds step every few ticks
        per_tick = SPEEDS[self.speed_i] * TICK_S
        self._acc = getattr(self, "_acc", 0.0) + per_tick
        step = math.floor(self._acc)
        if step <= 0:
            return
        self._acc -= step
        self.go(self.position + step)
        if self.position >= len(self.timeline):
            self._stop_playing()

    def _stop_playing(self) -> None:
        if self.playing:
            self.playing = False
            self._timer.pause()
            self._show_bar()

    def action_toggle_code(self) -> None:
        self.query_one(Dashboard).toggle_code(self.state)

    def action_cycle_view(self) -> None:
        cycle_view(self)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return view_key_allowed(self, action)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self, self.HELP))

    def action_back(self) -> None:
        self._stop_playing()
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.exit()
