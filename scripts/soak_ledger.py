"""What the soak reads back from a session database after the run: every experiment started accounted
for, no gap in any session's events, and SQLite's own integrity check. Read-only: it never writes the
store it judges.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

PRINTED = re.compile(r"^#\s*(\d+) ")  # the headless printer's line per decided experiment


def connect_ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)


def integrity(db: Path) -> str:
    """`PRAGMA integrity_check`'s answer: "ok", or the first problems it lists."""
    with connect_ro(db) as conn:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    return "ok" if rows == ["ok"] else "; ".join(rows[:5])


def progress(db: Path) -> tuple[int, int]:
    """(experiments written, experiments decided) over every session, for the sampler."""
    try:
        with connect_ro(db) as conn:
            counts = dict(conn.execute("SELECT type, COUNT(*) FROM events WHERE type IN "
                                       "('candidate_written', 'decision') GROUP BY type").fetchall())
    except sqlite3.Error:
        return (-1, -1)
    return counts.get("candidate_written", 0), counts.get("decision", 0)


def mid_experiment(db: Path) -> bool:
    """Whether the newest experiment is written, has a stage running, and is not yet decided."""
    try:
        with connect_ro(db) as conn:
            row = conn.execute("SELECT session_id, seq, payload FROM events WHERE type='candidate_written' "
                               "ORDER BY ts DESC LIMIT 1").fetchone()
            if row is None:
                return False
            sid, seq, payload = row
            cid = json.loads(payload)["candidate_id"]
            later = conn.execute("SELECT type, payload FROM events WHERE session_id=? AND seq>? AND type IN "
                                 "('stage_result', 'decision')", [sid, seq]).fetchall()
    except sqlite3.Error:
        return False
    mine = [(t, json.loads(p)) for t, p in later if json.loads(p).get("candidate_id") == cid]
    return any(t == "stage_result" and p.get("status") == "running" for t, p in mine) and \
        not any(t == "decision" for t, _ in mine)


def decision_times(db: Path) -> list[tuple[float, float]]:
    """(written ts, decided ts) of every decided experiment, over all sessions."""
    with connect_ro(db) as conn:
        rows = conn.execute("SELECT session_id, ts, type, payload FROM events WHERE type IN "
                            "('candidate_written', 'decision') ORDER BY session_id, seq").fetchall()
    written: dict[tuple[str, str], float] = {}
    out = []
    for sid, ts, kind, payload in rows:
        cid = json.loads(payload)["candidate_id"]
        if kind == "candidate_written":
            written[(sid, cid)] = ts
        elif (sid, cid) in written:
            out.append((written[(sid, cid)], ts))
    return out


def stage_start_times(db: Path) -> list[float]:
    """When each stage began, over all sessions: after a fault, the first one is when work went on."""
    with connect_ro(db) as conn:
        return [ts for (ts,) in conn.execute("SELECT ts FROM events WHERE type = 'stage_result' AND "
                                             "json_extract(payload, '$.status') = 'running' ORDER BY ts")]


def account(db: Path, cache_dir: Path, printed: set[tuple[str, int]]) -> dict:
    """Everything started is accounted for. `printed`: (session id, experiment number) of every line the
    engine printed for a decided experiment (printed after the store has it). Returns counts and the
    offending ids; `lost` sums what should be zero."""
    with connect_ro(db) as conn:
        sessions = [r[0] for r in conn.execute("SELECT id FROM sessions WHERE kind='optimize' ORDER BY created")]
        per: dict[str, dict] = {}
        for sid in sessions:
            seqs = [r[0] for r in conn.execute("SELECT seq FROM events WHERE session_id=? ORDER BY seq", [sid])]
            rows = conn.execute("SELECT type, payload FROM events WHERE session_id=? AND type IN "
                                "('candidate_written', 'decision') ORDER BY seq", [sid]).fetchall()
            per[sid] = {"seqs": seqs, "rows": [(t, json.loads(p)) for t, p in rows]}
    report = {"sessions": sessions, "written": 0, "decided": 0, "undecided": [], "decided_twice": [],
              "numbering_gaps": [], "seq_gaps": [], "files_without_events": [], "printed_not_stored": []}
    for sid, data in per.items():
        seqs = data["seqs"]
        if seqs != list(range(1, len(seqs) + 1)):
            report["seq_gaps"].append(sid)
        written = {p["candidate_id"]: p["experiment"] for t, p in data["rows"] if t == "candidate_written"}
        decisions = [p["candidate_id"] for t, p in data["rows"] if t == "decision"]
        report["written"] += len(written)
        report["decided"] += len(set(decisions))
        report["undecided"] += [f"{sid}/{c}" for c in written if c not in decisions]
        report["decided_twice"] += [f"{sid}/{c}" for c in set(decisions) if decisions.count(c) > 1]
        numbers = sorted(written.values())
        if numbers != list(range(1, len(numbers) + 1)):
            report["numbering_gaps"].append(sid)
        folder = cache_dir / "sessions" / sid
        files = {p.stem for p in folder.glob("*.py")} if folder.is_dir() else set()
        report["files_without_events"] += [f"{sid}/{c}" for c in sorted(files) if c not in written
                                           and c != "inductor_seed"]
        by_number = {n: c for c, n in written.items()}
        report["printed_not_stored"] += [f"{sid}/#{n}" for s, n in sorted(printed) if s == sid
                                         and by_number.get(n) not in decisions]
    report["lost"] = sum(len(report[k]) for k in ("undecided", "numbering_gaps", "seq_gaps",
                                                   "files_without_events", "printed_not_stored"))
    return report
