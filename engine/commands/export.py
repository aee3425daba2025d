"""`autokernel export SESSION|latest -o DIR`: the kept kernels as a standalone Python package."""

from __future__ import annotations

import argparse

from .common import add_db_flag, add_json_flag, open_store, print_json

HELP = "write a session's kept kernels as a plain Python package with patch(model) and RESULTS.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="optimize session id, unique id prefix, or `latest` (the newest optimize session)")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="folder to write (its name becomes the package name)")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds an earlier export")
    add_db_flag(p)
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    from ..export import export_session

    store = open_store(args)
    result = export_session(store, args.session, args.output, force=args.force)
    if args.json:
        print_json(result)
    else:
        kinds = ", ".join(f"{k['kind']} ({k['candidate_id']})" for k in result["kernels"])
        print(f"exported session {result['session_id']} to {result['path']}: {kinds}")
        for why in result["left_out"]:
            print(f"  left out: {why}")
        print(f"  use: import {result['package']}; {result['package']}.patch(model)   (see RESULTS.md)")
    return 0
