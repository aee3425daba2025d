"""`autokernel`: every capability of the TUI as a plain command, for scripts and tests.

Each sub-command lives in `engine/commands/<name>.py` with `HELP`, `add_arguments(parser)` and
`run(args) -> int`. Errors the user caused print one line and exit 2 (a traceback only with
--debug); Ctrl-C exits 130 after the command has saved what it had.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

COMMANDS = (
    "profile", "check", "bench", "kernels", "optimize", "sessions", "replay", "export", "kernelbench",
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UserError as e:
        if args.debug:
            raise
        print(f"autokernel {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"autokernel {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
