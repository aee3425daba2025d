"""`autokernel kernels [--json]`: the kernel types this build can optimize, with their backends."""

from __future__ import annotations

import argparse
import sys

from .common import add_json_flag, print_json

HELP = "list the kernel types (signature, starter backends, metric)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_json_flag(p)


def describe_all() -> list[dict]:
    """One `{"name", "backends", "signature", "metric"}` per kernel type, in the library's order."""
    from autokernel.kernels import all_specs

    return [spec.describe() for spec in all_specs()]


def run(args: argparse.Namespace) -> int:
    from autokernel.kernels import all_specs

    if args.json:
        print_json(describe_all())
        return 0

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    specs = all_specs()

    console = Console(width=None if sys.stdout.isatty() else 160)  # a pipe or a file gets the whole table
    table = Table(title=f"{len(specs)} kernel types", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("backends")
    table.add_column("metric")
    table.add_column("signature")
    table.add_column("computes", overflow="fold")
    for spec in specs:
        table.add_row(spec.name, ", ".join(spec.backends) or "-", spec.metric, escape(spec.signature),
                      escape(spec.summary))
    console.print(table)
    return 0
