"""`autokernel sessions`: the sessions in the store, newest first."""

from __future__ import annotations

import argparse
import sys
import time

from ..session_holds import KINDS, holds
from .common import add_db_flag, add_json_flag, open_store, print_json

HELP = "list recorded sessions (profile, optimize, ...), newest first"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_flag(p)
    add_json_flag(p)
    p.add_argument("--kind", default=None, help="only sessions of this kind (profile, optimize, bench, ...)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N sessions")


def _entry(row: dict) -> dict:
    return {
        "id": row["id"], "kind": row["kind"], "model": row["model"], "status": row["status"],
        "created": row["created"], "updated": row["updated"], "device": row["device"],
        "device_name": row["device_name"], "agent": row["agent"], "events": row["n_events"],
        "holds": holds(row), "summary": row["summary"],
    }


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        rows = [_entry(r) for r in store.sessions(kind=args.kind, limit=args.limit)]
    finally:
        store.close()
    if args.json:
        print_json(rows)
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)  # a pipe or a file gets the whole table
    if not rows:
        console.print(f"no sessions in {store.path}")
        return 0
    table = Table(title=f"sessions in {store.path}", title_justify="left")
    for col in ("id", "kind", "model", "status", "created", "holds"):
        table.add_column(col, no_wrap=col in ("id", "created"))
    for r in rows:
        model = r["model"].rsplit("/", 1)[-1] if r["model"] else ""
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"]))
        table.add_row(r["id"], r["kind"], model, r["status"], created, r["holds"])
    console.print(table)
    # every command that measures records a session: say what each kind is, so profile rows read as intended
    for kind in sorted({r["kind"] for r in rows} & set(KINDS)):
        console.print(f"{kind}: {KINDS[kind]}")
    if not args.kind and len({r["kind"] for r in rows}) > 1:
        console.print("--kind optimize (or profile, bench, kernelbench) lists one kind")
    return 0
