"""scripts/session_anatomy.py: where a session's time went, read from a real store and from the events file the
multi-GPU benchmark leaves beside it (sources left out). The events carry fixed timestamps: the seconds asserted
are arithmetic on those inputs, nothing here is timed."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from session_anatomy import anatomy, dump_events, main, read_events  # noqa: E402

from autokernel.engine import events as ev  # noqa: E402
from autokernel.engine.store import Store  # noqa: E402


def _stages(cid: str, worker: str, at: float, seconds: float) -> list:
    """A passing check: each stage's start and end, `seconds` spread over the five."""
    out = []
    for k, stage in enumerate(("smoke", "shape_sweep", "stability", "determinism", "edge_cases")):
        out.append(ev.StageResult(candidate_id=cid, stage=stage, status="running", worker=worker, ts=at + k))
        out.append(ev.StageResult(candidate_id=cid, stage=stage, status="pass", seconds=seconds / 5, worker=worker,
                                  ts=at + k + 0.5))
    return out


def _session() -> list:
    """Two workers: gpu0 starts cold (a 40 s first experiment) then runs a quick one; gpu1 runs one 20 s
    experiment whose stages took 3 s (a compile left to them)."""
    t0 = 1000.0
    return [
        ev.CandidateWritten(candidate_id="rmsnorm-0001", target="rmsnorm", source="x" * 50, ts=t0),
        ev.CandidateWritten(candidate_id="softmax-0002", target="softmax", source="y", ts=t0),
        *_stages("rmsnorm-0001", "gpu0", t0 + 30, 0.2),
        *_stages("softmax-0002", "gpu1", t0 + 5, 3.0),
        ev.Decision(candidate_id="softmax-0002", target="softmax", decision="kept", ts=t0 + 20),
        ev.Decision(candidate_id="rmsnorm-0001", target="rmsnorm", decision="kept", ts=t0 + 40),
        ev.CandidateWritten(candidate_id="rmsnorm-0003", target="rmsnorm", ts=t0 + 40),
        *_stages("rmsnorm-0003", "gpu0", t0 + 41, 0.1),
        ev.Decision(candidate_id="rmsnorm-0003", target="rmsnorm", decision="discarded", ts=t0 + 50),
    ]


def test_the_anatomy_of_a_two_worker_session():
    a = anatomy(_session())
    assert a["experiments"] == 3 and a["span_s"] == 50 and a["per_hour"] == 3 * 3600 / 50
    assert a["experiment_seconds"] == 40 + 20 + 10 and a["in_flight"] == pytest.approx(70 / 50)
    assert a["targets"]["rmsnorm"] == {"experiments": 2, "median_s": 25.0, "seconds": 50.0}
    assert a["first_by_worker"] == {"gpu0": {"candidate": "rmsnorm-0001", "seconds": 40.0},
                                    "gpu1": {"candidate": "softmax-0002", "seconds": 20.0}}
    assert a["slow_checks"] == {"rmsnorm": {"slow": 0, "checks": 2}, "softmax": {"slow": 1, "checks": 1}}
    assert a["steady_per_hour"] == pytest.approx(2 * 3600 / 20)  # the decisions at 40 and 50 s, over 30..50 s


def test_a_store_and_its_dumped_events_read_the_same_without_the_sources(tmp_path, capsys):
    db = tmp_path / "sessions.db"
    store = Store(db)
    sid = store.create_session(ev.SessionStarted(kind="optimize", device="cuda"))
    for e in _session():
        store.append(sid, e)
    store.close()
    dumped = tmp_path / "run" / "events.jsonl.gz"
    dumped.parent.mkdir()
    assert dump_events(db, dumped) == len(_session()) + 1
    lines = [json.loads(line) for line in gzip.open(dumped, "rt")]
    assert all("source" not in line["payload"] for line in lines)
    assert anatomy(read_events(db)) == anatomy(read_events(dumped.parent)) == anatomy(_session())
    assert main([str(db)]) == 0 and "3 experiments in 50 s" in capsys.readouterr().out


def test_a_line_whose_source_was_cut_still_counts_its_candidate(tmp_path):
    path = tmp_path / "events.jsonl"
    rows = [{"type": "candidate_written", "ts": 1.0, "seq": 1, "payload_cut": "the source", "candidate_id": "a-0001"},
            {"type": "decision", "ts": 5.0, "payload": {"candidate_id": "a-0001", "decision": "kept"}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = anatomy(read_events(path))
    assert a["experiments"] == 1 and a["span_s"] == 4.0


def test_a_folder_without_events_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no sessions.db"):
        read_events(tmp_path)
