"""What the seed gave and what the search added, per problem of a KernelBench batch: for each target of each
problem's session, the first measured candidate (Inductor's seed for `problem`, the kernel type's starter
otherwise) and the best the search kept, in ms and against eager and torch.compile, read from the stored events.

    python3 scripts/kb_seed_gain.py RUN/kb_events.jsonl.gz      # or a sessions.db; prints a Markdown table
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def events(path: Path):
    """(session_id, type, payload) in the order they were written."""
    if path.suffix == ".db":
        with sqlite3.connect(path) as db:
            for sid, typ, payload in db.execute("select session_id, type, payload from events order by session_id, seq"):
                yield sid, typ, json.loads(payload)
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for line in f:
            e = json.loads(line)
            yield e["session_id"], e["type"], e["payload"]


def table(path: Path) -> list[str]:
    names: dict[str, str] = {}
    benches: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)  # (session, target) -> id -> bench
    kept: dict[tuple[str, str], list[str]] = defaultdict(list)
    order: list[tuple[str, str]] = []
    for sid, typ, p in events(path):
        if typ == "problem_started":
            names[p["session_id"]] = p["name"]
        elif typ == "bench_result" and p.get("kernel_ms"):
            benches[(sid, p["target"])][p["candidate_id"]] = p
        elif typ == "decision":
            key = (sid, p["target"])
            if key not in order:
                order.append(key)
            if p["decision"] == "kept":
                kept[key].append(p["candidate_id"])
    rows = ["| problem | target | first (seed or starter) | best after the search | search added |", "|---|---|---|---|---|"]

    def natural(key: tuple[str, str]) -> tuple:
        name = names.get(key[0], key[0])
        head = name.split("_", 1)[0]
        return (int(head) if head.isdigit() else 0, name, key[1])

    for key in sorted(order, key=natural):
        sid, target = key
        name = names.get(sid, sid)
        if not kept[key]:
            rows.append(f"| {name} | {target} | failed its checks | — | — |")
            continue
        first, best = benches[key].get(kept[key][0]), benches[key].get(kept[key][-1])
        if not first or not best:
            continue
        cell = lambda b: f"{b['kernel_ms']:.3g} ms ({b['speedup_eager']:.2f}x eager, {b['speedup_compile']:.2f}x compile)"
        rows.append(f"| {name} | {target} | {cell(first)} | {cell(best)} | {first['kernel_ms'] / best['kernel_ms']:.2f}x |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("events", help="a run's kb_events.jsonl(.gz) or sessions.db")
    args = p.parse_args(argv)
    path = Path(args.events)
    if not path.is_file():
        print(f"kb_seed_gain: no such file: {path}", file=sys.stderr)
        return 2
    print("\n".join(table(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
