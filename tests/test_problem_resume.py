"""Nothing lost for a whole-problem target either: `autokernel kernelbench PROBLEM --agent MODEL` is SIGKILLed
during its first experiment, and `autokernel optimize --headless --resume SESSION` goes on from the store (as
tests/test_resume.py does for kernel targets, here through the real CLI, worker, LLM agent and scripted server)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from autokernel.engine import events as ev
from autokernel.engine.search_state import SearchState
from autokernel.engine.standalone import Part, combine
from autokernel.engine.store import Store
from llm_support import llm_server  # noqa: F401  (a fixture)
from problem_support import GOOD, MULTI, answer

# Round 0 on the problem's Model (answered before the kill); round 1, after the resume, on problem-0001.
ONE_WARP = GOOD.replace("BLOCK=triton.next_power_of_2(n_cols))", "BLOCK=triton.next_power_of_2(n_cols), num_warps=1)")


def _events(store, sid, cls):
    return [e for _, e in store.events(sid) if isinstance(e, cls)]


def test_a_whole_problem_session_killed_mid_experiment_resumes_with_nothing_lost(llm_server, tmp_path):  # noqa: F811
    """Two experiments in all: the kill comes after the first one's smoke stage passed. Resumed, the session
    finishes that experiment once (its number and the events written before the kill kept as they were), asks
    for round 1 on it with its result in the prompt, runs that, and checks the best ModelNew the KernelBench way."""
    llm_server.play(answer(GOOD, "One program per row"), answer(ONE_WARP, "One warp"))
    db = tmp_path / "kb.db"
    env = dict(os.environ, OPENAI_API_KEY="sk-test", AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    cli = [sys.executable, "-m", "autokernel.engine.cli"]
    proc = subprocess.Popen(cli + ["kernelbench", str(MULTI), "--agent", "openai/test-model", "--api-base",
                                   llm_server.api_base, "--device", "cpu", "--max-experiments-per-problem", "2",
                                   "--db", str(db)],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sid = None
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            rows = Store(db).sessions(kind="optimize") if db.exists() else []
            if rows:
                store = Store(db)
                sid = rows[0]["id"]
                written = _events(store, sid, ev.CandidateWritten)
                decided = {d.candidate_id for d in _events(store, sid, ev.Decision)}
                staged = {s.candidate_id for s in _events(store, sid, ev.StageResult) if s.status == "pass"}
                # kill while experiment 1 is under way: written, a stage passed, not yet decided
                if written and written[-1].candidate_id in staged - decided:
                    break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        err = proc.communicate(timeout=10)[1].decode()
    store = Store(db)
    assert sid is not None and store.session(sid)["status"] == "interrupted", err[-3000:]
    before = store.events(sid)
    folded = SearchState.from_events(sid, (e for _, e in before))
    cut = "problem-0001"
    assert list(folded.targets["problem"].candidates) == [cut] and folded.experiments == 1, err[-3000:]
    (unfinished,) = folded.targets["problem"].unfinished()
    assert unfinished.stages["smoke"][0] == "pass" and len(llm_server.requests) == 1

    out = subprocess.run(cli + ["optimize", "--headless", "--resume", sid, "--api-base", llm_server.api_base,
                                "--json", "--db", str(db)],
                         capture_output=True, text=True, timeout=400, env=env, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["session_id"] == sid and summary["status"] == "completed" and summary["experiments"] == 2

    after = store.events(sid)  # what was written before the kill is still there, as it was
    assert [(s, e.type, e.payload()) for s, e in after[: len(before)]] == [(s, e.type, e.payload()) for s, e in before]
    written = _events(store, sid, ev.CandidateWritten)
    assert [c.candidate_id for c in written] == [cut, "problem-0002"]  # continued, its number kept, no duplicate
    decisions = [(d.candidate_id, d.decision) for d in _events(store, sid, ev.Decision)]
    assert decisions[0] == (cut, "kept") and [c for c, _ in decisions] == [cut, "problem-0002"]  # each once
    assert [t.target for t in _events(store, sid, ev.TargetStarted)] == ["problem"]
    assert len(_events(store, sid, ev.ProfileReady)) == 1 and len(_events(store, sid, ev.SessionStarted)) == 1
    assert any(c.action == "resume_session" for c in _events(store, sid, ev.ControlChanged))

    # the search went on from the stored experiment: round 1 on it, with the idea and its result in the prompt
    state = SearchState.from_events(sid, (e for _, e in after))
    target = state.targets["problem"]
    assert written[1].parent_id == cut and [i.round for i in _events(store, sid, ev.IdeaProposed)] == [0, 1]
    assert len(llm_server.requests) == 2  # round 0 was not asked again
    prompt = llm_server.user_messages(1)[0]
    assert f"# The parent kernel ({cut})" in prompt and "The starting point: the problem's Model" not in prompt
    assert "] One program per row (on Model)" in prompt and f"\n    {cut} " in prompt

    # the final result is the best of the two, checked the KernelBench way
    (integration,) = _events(store, sid, ev.IntegrationResult)
    assert integration.correct and integration.detail.startswith("KernelBench check: 3/3 trials"), integration.detail
    assert integration.replaced[0]["candidate_id"] == target.best_id
    model_new = Path(re.search(r"ModelNew: (.+?\.py)", integration.detail).group(1))
    assert combine([Part("best", target.best.source)])[1][0] in model_new.read_text()  # its code, docstrings out
