"""`autokernel doctor [--device D] [--json]`: which of the worker's protections this machine gives.

A worker started on this machine applies each layer the kernel has (`engine/sandbox.py`) and goes on without
the ones it lacks; this prints what a worker here gets, one line per layer, as a child process applying them
really finds them, then the one-line summary the session log also shows.
"""

from __future__ import annotations

import argparse
import dataclasses

from .common import add_device_flag, add_json_flag, print_json

HELP = "show which sandbox protections (network, writes, reads, processes, environment) candidates run under here"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_device_flag(p)
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    from ..devices import resolve_device
    from ..sandbox import READABLE_VAR, probe, summary

    device = resolve_device(args.device)
    found = probe(device)
    if args.json:
        print_json({"device": device, "protections": [dataclasses.asdict(p) for p in found],
                    "summary": summary(found)})
        return 0
    print(f"the worker's sandbox on this machine ({device}):")
    for p in found:
        print(p.line())
    print(summary(found))
    if any(p.rule == "reads" and p.active for p in found):
        print(f"of your home a worker reads only the caches and the folders of the files named on the command "
              f"line; {READABLE_VAR}=PATH[:PATH] adds others")
    return 0
