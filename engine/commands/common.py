"""Flags and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..store import Store, default_db_path


def add_db_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="PATH", default=None,
                   help=f"session database (default: $AUTOKERNEL_DB or {default_db_path()})")


def add_device_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where kernels run (default: cuda if torch sees a GPU, else cpu with Triton's interpreter)")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")


def open_store(args: argparse.Namespace) -> Store:
    return Store(getattr(args, "db", None))


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
