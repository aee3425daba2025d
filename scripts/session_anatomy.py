"""Where an optimize session's time went, read from its events: what a pool's experiments-per-hour hides.

    python3 scripts/session_anatomy.py RUN [RUN ...]     # RUN: a sessions.db, an events.jsonl[.gz], or a folder with one

For each session: decided experiments over the span (first candidate written to last decision), how many were in
flight on average (each experiment's written-to-decided time, summed, over the span: near the worker count, the
pool never lacked work), per target the count and median experiment, each worker's first experiment (its cold
start), the checks whose stages ran over a second (a compile or an autotuner's timing left to the stages), and the
rate counted from STEADY_AFTER_S after the first experiment (past the cold starts). A benchmark's reading aid:
nothing here is asserted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pool_bench import session_rate  # scripts/ is this script's own folder on sys.path

STEADY_AFTER_S = 30.0
SLOW_STAGES_S = 1.0


def read_events(path: Path) -> list:
    """The events of the one optimize session in a store, or of an events file written by `dump_events` (where a
    candidate's source was left out, the line keeps its type, time and candidate)."""
    from autokernel.engine import events as ev

    if path.is_dir():
        found = [p for p in (path / "sessions.db", path / "events.jsonl.gz", path / "events.jsonl") if p.exists()]
        if not found:
            raise SystemExit(f"session_anatomy: no sessions.db or events.jsonl[.gz] in {path}")
        path = found[0]
    if path.suffix == ".db":
        from autokernel.engine.store import Store

        store = Store(path)
        rows = store.sessions(kind="optimize")
        if len(rows) != 1:
            raise SystemExit(f"session_anatomy: {path} holds {len(rows)} optimize sessions, not one")
        return list(store.iter_events(rows[0]["id"]))
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            payload = row.get("payload") or {}
            if "payload_cut" in row:
                payload = {"candidate_id": row.get("candidate_id", "")}
            out.append(ev.Event.from_row(row["type"], payload, row["ts"]))
    return out


def dump_events(db: Path, path: Path) -> int:
    """Every event of the store's sessions as gzipped JSON lines, candidates' sources and diffs left out (they
    are most of a store's bytes and not what a rate is read from); the number of lines written."""
    from autokernel.engine.store import Store

    store = Store(db)
    count = 0
    with gzip.open(path, "wt") as f:
        for row in store.sessions():
            for e in store.iter_events(row["id"]):
                payload = e.payload()
                if e.type == "candidate_written":
                    payload.pop("source", None)
                    payload.pop("diff", None)
                f.write(json.dumps({"session_id": row["id"], "ts": e.ts, "type": e.type, "payload": payload},
                                   default=str) + "\n")
                count += 1
    return count


def _checks(events: list) -> list[dict]:
    """Each run of the five stages (a candidate may be checked twice: screened in one dtype, then in all):
    its candidate, worker and the seconds its stages reported."""
    from autokernel.engine import events as ev

    runs: list[dict] = []
    open_run: dict[tuple[str, str], dict] = {}
    for e in events:
        if not isinstance(e, ev.StageResult):
            continue
        key = (e.candidate_id, e.worker)
        if e.status == "running" and e.stage == "smoke":
            open_run[key] = {"candidate": e.candidate_id, "worker": e.worker, "seconds": 0.0}
            runs.append(open_run[key])
        elif e.status != "running" and key in open_run:
            open_run[key]["seconds"] += e.seconds or 0.0
    return runs


def _target(candidate_id: str) -> str:
    return candidate_id.rsplit("-", 1)[0]


def anatomy(events: list) -> dict:
    from autokernel.engine import events as ev

    written = {e.candidate_id: e.ts for e in events if isinstance(e, ev.CandidateWritten)}
    decided = {e.candidate_id: e.ts for e in events if isinstance(e, ev.Decision)}
    if not written or not decided:
        return {"experiments": 0}
    rate = session_rate(events)  # the span and rate every multi-GPU page reports
    span = rate["span_s"]
    start, end = min(written.values()), max(decided.values())
    took = {c: decided[c] - written[c] for c in decided if c in written}
    per_target: dict[str, list[float]] = defaultdict(list)
    for c, s in took.items():
        per_target[_target(c)].append(s)
    first_by_worker: dict[str, str] = {}
    for e in events:
        if isinstance(e, ev.StageResult) and e.worker and e.worker not in first_by_worker:
            first_by_worker[e.worker] = e.candidate_id
    checks = _checks(events)
    slow: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for run in checks:
        slow[_target(run["candidate"])][1] += 1
        if run["seconds"] > SLOW_STAGES_S:
            slow[_target(run["candidate"])][0] += 1
    steady_from = start + STEADY_AFTER_S
    steady = [t for t in decided.values() if t > steady_from]
    return {
        "experiments": rate["experiments"], "span_s": span, "per_hour": rate["per_hour"],
        "in_flight": sum(took.values()) / span if span > 0 else None, "experiment_seconds": sum(took.values()),
        "targets": {t: {"experiments": len(v), "median_s": statistics.median(v), "seconds": sum(v)}
                    for t, v in sorted(per_target.items())},
        "first_by_worker": {w: {"candidate": c, "seconds": took.get(c)} for w, c in sorted(first_by_worker.items())},
        "slow_checks": {t: {"slow": n, "checks": total} for t, (n, total) in sorted(slow.items())},
        "steady_per_hour": len(steady) * 3600 / (end - steady_from) if end > steady_from else None,
    }


def describe(name: str, a: dict) -> str:
    if not a.get("experiments"):
        return f"{name}: no decided experiment"
    targets = ", ".join(f"{t} {v['experiments']} (median {v['median_s']:.1f} s)" for t, v in a["targets"].items())
    firsts = ", ".join(f"{w} {v['candidate']} {v['seconds']:.1f} s" for w, v in a["first_by_worker"].items()
                       if v["seconds"] is not None)
    slow = ", ".join(f"{t} {v['slow']}/{v['checks']}" for t, v in a["slow_checks"].items())
    steady = f"{a['steady_per_hour']:.0f}/h" if a["steady_per_hour"] else "-"
    return (f"{name}: {a['experiments']} experiments in {a['span_s']:.0f} s = {a['per_hour']:.0f}/h; "
            f"{a['experiment_seconds']:.0f} s of experiments, {a['in_flight']:.2f} in flight\n"
            f"  per target: {targets}\n  first experiment per worker: {firsts}\n"
            f"  checks with over {SLOW_STAGES_S:.0f} s of stages: {slow}\n"
            f"  from {STEADY_AFTER_S:.0f} s after the first experiment: {steady}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--json", action="store_true", help="one JSON document instead of the text")
    args = p.parse_args(argv)
    found = {str(r): anatomy(read_events(r)) for r in args.runs}
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        for name, a in found.items():
            print(describe(name, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
