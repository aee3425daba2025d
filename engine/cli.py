"""`autokernel`: every capability of the TUI as a plain command, for scripts and tests.

Each sub-command lives in `engine/commands/<name>.py` with `HELP`, `add_arguments(parser)` and
`run(args) -> int`. Errors the user caused print one line and exit 2 (a traceback only with
--debug); Ctrl-C exits 130 after the command has saved what it had; a reader that leaves early
(`autokernel replay latest | head`) ends the command quietly, with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import UserError

COMMANDS = (
    "profile", "check", "bench", "kernels", "optimize", "sessions", "replay", "export", "kernelbench", "extract",
    "doctor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autokernel",
        description="Profile a PyTorch model, then write, check and time faster kernels for its bottlenecks.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"{__package__}.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__package__}.commands.{name}":
                continue  # not built yet
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks")
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _hear_sigint() -> None:
    """A shell starts a background job (`cmd &`, nohup, CI runners) with SIGINT ignored, and Python then
    leaves it ignored: `kill -INT` would not stop a session cleanly. An explicit SIGINT always means stop."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    _hear_sigint()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone early (`| head`) is found here, not at exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe (a worker's): a real error
        _quiet_stdout()
        return 1  # as Python itself and rich's Console (which does the same for its tables) exit on EPIPE
    except UserError as e:
        if args.debug:
            raise
        print(f"autokernel {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"autokernel {args.command}: interrupted", file=sys.stderr)
        return 130


def _stdout_gone() -> bool:
    """Whether stdout's reader has gone away (a pipe whose other end was closed): poll says POLLERR."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no stdout: assume it was stdout
        return True


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so Python's own flush at exit finds nowhere to fail (the recipe in the
    `signal` module's docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
