"""A session store's events as gzipped JSON lines, the form the raw GPU results keep under docs/results
(each line: session_id, seq, ts, type, payload; a candidate's source is left out, its diff kept).

    python3 scripts/store_events.py RESULTS/multigpu/kb_w2/sessions.db docs/results/h100/extra/RUN/kb_w2/events.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", type=Path, help="a sessions.db")
    p.add_argument("out", type=Path, help="the .jsonl.gz to write")
    args = p.parse_args()
    if not args.db.is_file():
        print(f"store_events: no such database: {args.db}", file=sys.stderr)
        return 2
    conn = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    rows = conn.execute("SELECT session_id, seq, ts, type, payload FROM events ORDER BY session_id, seq")
    n = 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        for session_id, seq, ts, kind, payload in rows:
            body = json.loads(payload)
            body.pop("source", None)
            f.write(json.dumps({"session_id": session_id, "seq": seq, "ts": ts, "type": kind, "payload": body}) + "\n")
            n += 1
    print(f"{n} events -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
