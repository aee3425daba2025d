"""Flags and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..store import Store, default_db_path


def add_db_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="PATH", default=None,
                   help=f"session database (default: $AUTOKERNEL_DB or {default_db_path()})")


def add_device_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernels run (default: cuda if torch sees a GPU, else cpu with Triton's interpreter)")


def add_workers_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", default="auto", metavar="N|auto",
                   help="experiments run side by side, each worker on its own GPU (auto: one per visible GPU; "
                        "on the CPU, 1 unless N asks for more interpreter workers)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the workers as Ray actors (auto, local, or a cluster's address; one per GPU): "
                        "pip install 'autokernel-tui[ray]'")


def check_workers(args: argparse.Namespace, device: str | None) -> None:
    """A bad --workers fails in one line before anything runs (the pool is made later, when a target starts)."""
    from ..devices import resolve_device
    from ..pool import worker_count

    if getattr(args, "ray", None) is not None or (device is None and getattr(args, "resume", None)):
        worker_count(args.workers, "cpu")  # the number alone: Ray's GPUs, or a resume's stored device, come later
    else:
        worker_count(args.workers, resolve_device(device))


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")


def open_store(args: argparse.Namespace) -> Store:
    return Store(getattr(args, "db", None))


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


STOP_GRACE_ENV = "AUTOKERNEL_STOP_GRACE_S"


def stop_grace_s() -> float:
    """How long a stop (Ctrl-C, SIGTERM) waits for the work under way to end cleanly before leaving anyway: an
    experiment takes seconds, but one that hangs would hold the stop until its stage timeout, past what a
    service manager waits after SIGTERM before it kills."""
    try:
        return max(0.0, float(os.environ.get(STOP_GRACE_ENV, 60)))
    except ValueError:
        return 60.0


class BackgroundRun:
    """`work()` on a daemon thread while the main thread waits, so that Ctrl-C reaches the main thread
    (which then asks the work to stop cleanly) and SIGTERM reads as Ctrl-C."""

    def __init__(self, work: Callable[[], Any], name: str):
        self._box: dict[str, Any] = {}
        # Our own "done" flag: a Thread.join() cut by Ctrl-C can leave is_alive() wrongly False (Python < 3.13).
        self.finished = threading.Event()

        def target() -> None:
            try:
                self._box["result"] = work()
            except BaseException as e:  # carried to the main thread, which raises it from result()
                self._box["error"] = e
            finally:
                self.finished.set()

        def terminate(signum, frame):  # `kill` stops as cleanly as Ctrl-C does
            raise KeyboardInterrupt()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, terminate)
        threading.Thread(target=target, name=name, daemon=True).start()

    def wait(self) -> None:
        """Until the work ends; KeyboardInterrupt goes to the caller."""
        self.wait_for(float("inf"))

    def wait_for(self, seconds: float) -> bool:
        """Until the work ends or `seconds` pass (in short waits, so Ctrl-C is seen at once); whether it ended."""
        deadline = time.monotonic() + seconds
        while not self.finished.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return False
        return True

    def wait_stopping(self, stop: Callable[[], None], message: str | Callable[[], str],
                      watch: Callable[[], None] | None = None) -> str:
        """Wait for the work (running `watch()` first, if given, e.g. a prompt loop); on Ctrl-C print
        `message` (a callable is asked then, so it can name what exists by that time, e.g. the session id),
        call `stop()` and wait again, at most `stop_grace_s()`. Returns "done", "stopped" (Ctrl-C, then the work
        ended cleanly) or "left" (a second Ctrl-C, or the work still under way after the grace: the caller
        leaves at once, and what was under way is left to the resume, as after a crash)."""
        try:
            if watch is not None:
                watch()
            self.wait()
            return "done"
        except (KeyboardInterrupt, EOFError):
            print(message() if callable(message) else message, file=sys.stderr)
            stop()
            grace = stop_grace_s()
            try:
                if not self.wait_for(grace):
                    print(f"still under way {grace:g} s after the stop (a hung experiment waits for its stage "
                          f"timeout): leaving it to the resume", file=sys.stderr)
                    return "left"
            except KeyboardInterrupt:
                return "left"
            return "stopped"

    def result(self) -> Any:
        """What the work returned; what it raised is raised here."""
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("result")


def resolve_model_path(ref: str | None) -> Path:
    """A file path, or the name of a bundled example (`llama`, `convnet`, `llama_hotspots`); the Llama example if None.

    Every command that takes a model (profile, optimize, the TUI) resolves it here, so an example's name
    works wherever a file does."""
    from ..examples import example_path, names

    if ref is None:
        return example_path("llama")
    path = Path(ref).expanduser()
    if path.exists() or ref.endswith(".py") or "/" in ref:
        return path
    if ref in names():
        return example_path(ref)
    return path  # the loader reports it missing
