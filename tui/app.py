"""`autokernel-tui`: the live dashboard of an optimize session, its replay, and the sessions list.

    autokernel-tui [MODEL.py] [--agent playbook|MODEL] [--budget 2h] [--approval ask] ...
    autokernel-tui --replay latest          autokernel-tui --sessions      autokernel-tui --resume ID
    autokernel-tui --kernelbench PATH...    (a KernelBench batch: the problem table over the live session)
    autokernel-tui --resume BATCH           (a stopped or killed KernelBench batch goes on, on the same screen)
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from typing import Any, Callable, Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from autokernel.engine.agents.llm import add_timeout_flag, use_timeout_flag
from autokernel.engine.commands.common import add_workers_flags, check_workers, resolve_model_path
from autokernel.engine.commands.optimize import parse_duration
from autokernel.engine.errors import UserError
from autokernel.engine.session_state import load_timeline
from autokernel.engine.store import Store, default_db_path

from .screens.dialogs import ConfirmQuit
from .screens.kernelbench import KernelBenchScreen
from .screens.live import EventInbox, LiveScreen
from .screens.replay import ReplayScreen
from .screens.sessions import SessionsScreen

SessionFactory = Callable[[dict, EventInbox], Any]  # (SessionConfig fields, inbox) -> an OptimizeSession


def default_session_factory(store: Store) -> SessionFactory:
    def make(config: dict, inbox: EventInbox) -> Any:
        from autokernel.engine.session import OptimizeSession, SessionConfig

        return OptimizeSession(SessionConfig(**config), store, listeners=[inbox.push])

    return make


class AutokernelApp(App):
    """One app, four ways in: live (a new or resumed session), a KernelBench batch, replay, or the sessions list.
    In mode `kernelbench`, `session` is the `KernelBenchBatch`."""

    CSS_PATH = "app.tcss"
    TITLE = "autokernel"
    # Ctrl-C is how a terminal user (over SSH too) stops a program: it quits as `q` does (a live session asks
    # first, then stops after its current step, resumable), not Textual's "press ctrl+q" toast.
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
                Binding("ctrl+c", "quit", "Quit", show=False, priority=True)]

    def __init__(self, store: Store, mode: str = "sessions", config: dict | None = None,
                 replay: str | None = None, session_factory: SessionFactory | None = None,
                 clock: Callable[[], float] = time.time, session: Any = None, inbox: EventInbox | None = None):
        super().__init__()
        self.store = store
        self.mode = mode
        self.config = dict(config or {})
        self.replay_ref = replay
        self.session_factory = session_factory or default_session_factory(store)
        self.clock = clock
        self.live_session = session
        self.inbox = inbox
        self.exit_note = ""

    def on_mount(self) -> None:
        if self.mode == "live":
            if self.live_session is None:
                self.inbox = EventInbox()
                self.live_session = self.session_factory(self.config, self.inbox)
            self.push_screen(LiveScreen(self.live_session, self.inbox, clock=self.clock))
        elif self.mode == "kernelbench":
            self.sub_title = "KernelBench"
            self.push_screen(KernelBenchScreen(self.live_session, self.inbox, clock=self.clock))
        elif self.mode == "replay":
            self.push_screen(self._replay_screen(self.replay_ref or "latest"))
        else:
            self.push_screen(SessionsScreen(self.store))

    def _replay_screen(self, ref: str) -> ReplayScreen:
        row, timeline = load_timeline(self.store, ref)
        self.sub_title = f"replay {row['id']}"
        return ReplayScreen(timeline, row)

    # -- called by the sessions screen ----------------------------------------------------------
    def open_replay(self, ref: str) -> None:
        try:
            self.push_screen(self._replay_screen(ref))
        except UserError as e:
            self.notify(str(e), severity="error")

    def open_resume(self, session_id: str) -> None:
        config = dict(self.config, resume=session_id, model_path=None)
        inbox = EventInbox()
        try:
            session = self.session_factory(config, inbox)
        except UserError as e:
            self.notify(str(e), severity="error")
            return
        self.live_session, self.inbox = session, inbox
        self.push_screen(LiveScreen(session, inbox, clock=self.clock))

    def open_batch_resume(self, batch_id: str) -> None:
        """A stopped or killed KernelBench batch goes on, on its own screen (as `--resume BATCH` does)."""
        from autokernel.engine.kernelbench import KernelBenchBatch
        from autokernel.engine.kernelbench_resume import load_batch

        try:
            stored = load_batch(self.store, batch_id, api_base=self.config.get("api_base"))
        except UserError as e:
            self.notify(str(e), severity="error")
            return
        inbox = EventInbox()
        self.live_session, self.inbox = KernelBenchBatch.resuming(stored, self.store, listeners=[inbox.push]), inbox
        self.mode = "kernelbench"  # leaving prints the score, as after `--kernelbench`
        self.sub_title = "KernelBench"
        self.push_screen(KernelBenchScreen(self.live_session, inbox, clock=self.clock))

    # -- quitting -------------------------------------------------------------------------------
    def action_quit(self) -> None:
        """A live session (under a help or other dialog too) asks first; asked twice, or elsewhere, leave now."""
        live = next((s for s in reversed(self.screen_stack) if isinstance(s, LiveScreen)), None)
        if live is None or isinstance(self.screen, ConfirmQuit):
            self.exit()
        else:
            live.action_quit_session()

    def stop_engine(self) -> None:
        """Ask a running engine to stop (its thread records `stopped` and ends on its own)."""
        for screen in self.screen_stack:
            if isinstance(screen, LiveScreen):
                screen.stop_engine()

    def exit(self, *args, **kwargs) -> None:
        """However the app ends, a running engine is asked to stop (it records `stopped`, resumable)."""
        self.stop_engine()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        self.stop_engine()

    # -- the command palette offers every key of the current screen by name -----------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        seen = set()
        for b in getattr(screen, "BINDINGS", []):
            if isinstance(b, Binding) and b.description and b.action not in seen:
                seen.add(b.action)
                key = b.key_display or b.key.split(",")[0]
                yield SystemCommand(b.description, f"key {key}", partial(screen.run_action, b.action))
        yield from super().get_system_commands(screen)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autokernel-tui",
        description="Watch and steer the optimization of a PyTorch model's kernels; replay past sessions.")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL.py",
                   help="a KernelBench-style model file, or the name of a bundled example (default: llama)")
    p.add_argument("--agent", default="playbook", help="playbook (offline, default) or a litellm model string")
    p.add_argument("--api-base", default=None, metavar="URL",
                   help="an OpenAI-compatible server for the LLM agent (e.g. a local vLLM)")
    p.add_argument("--budget", default=None, help="wall-time budget, e.g. 2h, 90m, 1h30m")
    p.add_argument("--max-experiments", type=int, default=None, metavar="N",
                   help="stop after N experiments (with --kernelbench: per problem, default 20)")
    p.add_argument("--max-cost", type=float, default=None, metavar="USD", help="LLM spend limit")
    p.add_argument("--approval", choices=("auto", "ask"), default=None,
                   help="ask: a new best waits for you (a / r) before it is kept (default auto; with --resume, the "
                        "mode the session was last in)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None)
    p.add_argument("--size", choices=("small", "large"), default=None, help="size of the bundled example")
    p.add_argument("--db", metavar="PATH", default=None,
                   help=f"session database (default: $AUTOKERNEL_DB or {default_db_path()})")
    add_workers_flags(p)
    add_timeout_flag(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--replay", metavar="SESSION", default=None, help="replay a stored session (id, prefix or latest)")
    which.add_argument("--resume", metavar="SESSION", default=None,
                       help="resume a stopped or interrupted session (an optimize session, or a KernelBench batch)")
    which.add_argument("--sessions", action="store_true", help="list past sessions to replay or resume")
    which.add_argument("--kernelbench", nargs="+", metavar="PATH", default=None,
                       help="run KernelBench-form problems (files or folders) one after another, the problem table "
                            "above the live session (the score as `autokernel kernelbench` prints it on leaving)")
    return p


def make_app(args: argparse.Namespace, session_factory: SessionFactory | None = None) -> AutokernelApp:
    """The app the arguments ask for; user errors (bad flags, unknown session) raise before any screen."""
    use_timeout_flag(args)  # a bad --llm-timeout-s (or its environment variable) fails here, in one line
    store = Store(args.db)
    config = {"model_path": str(resolve_model_path(args.model)) if args.model else None, "device": args.device,
              "agent": args.agent, "approval": args.approval, "max_experiments": args.max_experiments,
              "budget_s": parse_duration(args.budget) if args.budget else None, "max_cost_usd": args.max_cost,
              "size": args.size, "resume": args.resume, "api_base": args.api_base}
    if args.workers != "auto" or args.ray:  # asked for: a pool (engine/pool.py); else the session's default
        check_workers(args, args.device)
        config.update(workers=args.workers, ray=args.ray)
    if args.replay:
        store.session(args.replay)  # fails now, in one line, if there is no such session
        return AutokernelApp(store, mode="replay", replay=args.replay)
    if args.sessions:
        return AutokernelApp(store, mode="sessions", config=config)
    if args.kernelbench:
        return _kernelbench_app(args, store)
    if args.resume and store.session(args.resume)["kind"] == "kernelbench":
        return _kernelbench_resume_app(args, store)
    factory = session_factory or default_session_factory(store)
    inbox = EventInbox()
    session = factory(config, inbox)  # validates the config (model file, limits) before the screen opens
    return AutokernelApp(store, mode="live", config=config, session_factory=factory, session=session, inbox=inbox)


def _kernelbench_app(args: argparse.Namespace, store: Store) -> AutokernelApp:
    from autokernel.engine.devices import resolve_device
    from autokernel.engine.kernelbench import BatchConfig, KernelBenchBatch, discover

    if args.max_experiments is not None and args.max_experiments <= 0:
        raise UserError("--max-experiments must be a positive number")
    device = resolve_device(args.device)
    problems, _ = discover(args.kernelbench)
    if not problems:
        raise UserError(f"no problem files under {' '.join(args.kernelbench)} (a problem defines Model and get_inputs())")
    config = BatchConfig(device=device, agent=args.agent, max_experiments=args.max_experiments or 20, size=args.size,
                         api_base=args.api_base, command="autokernel-tui " + " ".join(sys.argv[1:]),
                         workers=args.workers, ray=args.ray)
    inbox = EventInbox()
    batch = KernelBenchBatch(problems, config, store, listeners=[inbox.push])
    return AutokernelApp(store, mode="kernelbench", session=batch, inbox=inbox)


def _kernelbench_resume_app(args: argparse.Namespace, store: Store) -> AutokernelApp:
    """`--resume BATCH`: the batch goes on with its own problems and settings (engine/kernelbench_resume.py)."""
    from autokernel.engine.devices import resolve_device
    from autokernel.engine.kernelbench import KernelBenchBatch
    from autokernel.engine.kernelbench_resume import load_batch, refuse_changed_settings

    refuse_changed_settings([("MODEL.py", args.model), ("--max-experiments", args.max_experiments),
                             ("--size", args.size), ("--agent", args.agent != "playbook")])
    stored = load_batch(store, args.resume, api_base=args.api_base, device=args.device)
    resolve_device(stored.config.device)
    check_workers(args, stored.config.device)
    stored.config.workers, stored.config.ray = args.workers, args.ray
    inbox = EventInbox()
    batch = KernelBenchBatch.resuming(stored, store, listeners=[inbox.push])
    return AutokernelApp(store, mode="kernelbench", session=batch, inbox=inbox)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        app = make_app(args)
        error = app.run()
    except UserError as e:
        print(f"autokernel-tui: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        error = None
    session = getattr(app, "live_session", None) if "app" in locals() else None
    if session is not None and app.mode == "kernelbench":
        session.stop()
        if session.results:  # the score so far, as `autokernel kernelbench` prints it
            from autokernel.engine.commands.kernelbench import print_report

            print_report(session.report(), sys.stdout)
    elif session is not None:
        sid = getattr(session, "session_id", None)
        session.stop()
        if sid:
            print(f"session {sid} saved in {app.store.path}: autokernel-tui --replay {sid}  "
                  f"(resume: autokernel-tui --resume {sid})")
    if error:
        print(f"autokernel-tui: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
