"""A synthetic session, written event by event in the engine's order, for UI benchmarks and tests.

Its numbers are made up (seeded, with fixed timestamps) and it says so: the model is named
`synthetic` and the device `synthetic (no GPU)`. It exists so the UI can be measured on 5,000
experiments and snapshot-tested on a session whose every pixel is reproducible; it never stands in
for a real run anywhere a user looks.
"""

from __future__ import annotations

import difflib
import json
import random
from typing import Iterator

from autokernel.engine import events as ev
from autokernel.engine.results import STAGES
from autokernel.engine.store import Store

T0 = 1_790_000_000.0  # a fixed start, so every timestamp (and elapsed time) is reproducible

KERNEL_TEMPLATE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + offs, (x * rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, eps=1e-6):
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _rmsnorm_kernel[(x.numel() // n_cols,)](x, weight, y, n_cols, eps, BLOCK={block}, num_warps={warps})
    return y
'''

PROFILE_ROWS = [
    {"name": "aten::mm", "kind": "matmul", "calls": 14, "share": 0.52, "self_ms": 5.2, "floor_ms": 3.1,
     "kernel_speedup": 1.68, "target_shape": {"M": 512, "N": 2048, "K": 512}, "target_dtype": "fp32"},
    {"name": "rmsnorm (aten::pow+mean+rsqrt+mul)", "kind": "rmsnorm", "calls": 5, "share": 0.22, "self_ms": 2.2,
     "floor_ms": 0.2, "kernel_speedup": 11.0, "target_shape": {"rows": 512, "cols": 512}, "target_dtype": "fp32"},
    {"name": "aten::_softmax", "kind": "softmax", "calls": 2, "share": 0.12, "self_ms": 1.2, "floor_ms": 0.3,
     "kernel_speedup": 4.0, "target_shape": {"rows": 4096, "cols": 128}, "target_dtype": "fp32"},
    {"name": "aten::silu", "kind": "elementwise", "calls": 2, "share": 0.05, "self_ms": 0.5, "floor_ms": 0.25,
     "kernel_speedup": 2.0, "target_shape": None, "target_dtype": "fp32"},
]
# A Llama-like profile (the kinds with the longest names), for the layouts that must show whole kind names.
LLAMA_ROWS = [
    {"name": "aten::linear", "kind": "matmul", "calls": 22, "share": 0.44, "self_ms": 4.4, "floor_ms": 2.9,
     "kernel_speedup": 1.52, "target_shape": {"M": 512, "N": 2048, "K": 512}, "target_dtype": "bf16"},
    {"name": "scaled_dot_product_attention", "kind": "flash_attention", "calls": 4, "share": 0.14, "self_ms": 1.4,
     "floor_ms": 0.4, "kernel_speedup": 3.5, "target_shape": {"batch": 2, "heads": 8, "seq": 256, "head_dim": 64},
     "target_dtype": "bf16"},
    {"name": "RMSNorm", "kind": "rmsnorm", "calls": 9, "share": 0.12, "self_ms": 1.2, "floor_ms": 0.1,
     "kernel_speedup": 12.0, "target_shape": {"rows": 512, "cols": 512}, "target_dtype": "bf16"},
    {"name": "apply_rotary_pos_emb()", "kind": "rotary_embedding", "calls": 4, "share": 0.09, "self_ms": 0.9,
     "floor_ms": 0.15, "kernel_speedup": 6.0, "target_shape": {"batch": 2, "heads": 8, "seq": 256, "head_dim": 64},
     "target_dtype": "bf16"},
    {"name": "aten::cross_entropy_loss", "kind": "cross_entropy", "calls": 1, "share": 0.07, "self_ms": 0.7,
     "floor_ms": 0.2, "kernel_speedup": 3.5, "target_shape": {"rows": 512, "vocab": 32000}, "target_dtype": "fp32"},
    {"name": "aten::silu", "kind": "elementwise", "calls": 4, "share": 0.05, "self_ms": 0.5, "floor_ms": 0.25,
     "kernel_speedup": 2.0, "target_shape": None, "target_dtype": "bf16"},
]
STAGE_FAILURES = {
    "smoke": "max abs error 3.1e-02 > atol 1e-05 at [0, 17]",
    "shape_sweep": "rows=3, cols=1000: out of bounds read (mask missing on the tail)",
    "stability": "mode large: inf in output where reference is finite",
    "determinism": "two runs differ (max diff 2.4e-07)",
    "edge_cases": "cols=1: wrong result (expected 0.707, got nan)",
}


def _ranked_rows(profile: list[dict]) -> list[dict]:
    rows = []
    for r in profile:
        r = dict(r)
        p, s = r["share"], r["kernel_speedup"]
        r["max_speedup"] = 1.0 / ((1.0 - p) + p / s)
        rows.append(r)
    rows.sort(key=lambda r: -r["max_speedup"])
    return rows


def session_events(experiments: int = 12, seed: int = 7, approval: str = "auto",
                   step_s: float = 2.0, finish: bool = True, profile: list[dict] | None = None) -> Iterator[ev.Event]:
    """The events of a synthetic optimize session over the rmsnorm target, in the engine's order
    (`profile`: the profile's rows, PROFILE_ROWS by default; one must be an rmsnorm)."""
    rng = random.Random(seed)
    ts = T0

    def at() -> float:
        nonlocal ts
        ts += step_s * (0.5 + rng.random())
        return ts

    rows = _ranked_rows(profile or PROFILE_ROWS)
    target_row = next(i for i, r in enumerate(rows) if r["kind"] == "rmsnorm")
    yield ev.SessionStarted(kind="optimize", model="synthetic", device="cpu", device_name="synthetic (no GPU)",
                            agent="playbook", approval=approval,
                            config={"model_path": "synthetic", "device": "cpu", "agent": "playbook",
                                    "approval": approval, "max_experiments": experiments, "budget_s": 7200.0},
                            ts=T0)
    yield ev.ProfileReady(device="cpu", total_ms=10.0, rows=rows, ts=at())
    yield ev.TargetStarted(target="rmsnorm", row=target_row, shape={"rows": 512, "cols": 512}, dtype="fp32",
                           backend="triton", ts=at())
    eager_ms = 0.110
    best_ms: float | None = None
    best_src = ""
    best_id = ""
    idea_n = 0
    blocks = [128, 256, 512, 1024, 2048]
    for n in range(1, experiments + 1):
        cid = f"rmsnorm-{n:04d}"
        block, warps = blocks[(n - 1) % len(blocks)], 2 ** ((n - 1) % 4)
        source = KERNEL_TEMPLATE.format(block=block, warps=warps)
        if n == 1:
            yield ev.CandidateWritten(candidate_id=cid, idea_id="", experiment=n, target="rmsnorm",
                                      label="starter", source=source, ts=at())
        else:
            if (n - 2) % 3 == 0:
                idea_n += 1
                tier = 1 + (idea_n - 1) % 3
                yield ev.IdeaProposed(idea_id=f"idea-{idea_n:04d}", target="rmsnorm", agent="playbook", tier=tier,
                                      tier_name={1: "block sizes, warps and stages", 2: "memory access",
                                                 3: "compute"}[tier],
                                      title=f"sweep BLOCK and num_warps around {best_id}",
                                      hypothesis=(f"the best reaches {40 + idea_n % 50}% of bandwidth with one row per "
                                                  "program; other block sizes and warp counts should keep more "
                                                  "loads in flight. A row of 512 fits one block, so fewer warps "
                                                  "also shorten the reduction."),
                                      parent_id=best_id, round=idea_n - 1, ts=at())
            diff = "".join(difflib.unified_diff(best_src.splitlines(keepends=True), source.splitlines(keepends=True),
                                                fromfile=f"{best_id}.py", tofile=f"{cid}.py"))
            yield ev.CandidateWritten(candidate_id=cid, idea_id=f"idea-{idea_n:04d}", experiment=n,
                                      target="rmsnorm", label=f"BLOCK={block}, num_warps={warps}",
                                      parent_id=best_id, source=source, diff=diff,
                                      params={"BLOCK": block, "num_warps": warps}, ts=at())
        fail_stage = None if n == 1 or n % 4 else STAGES[(n // 4) % len(STAGES)]
        failed = False
        for stage in STAGES:
            yield ev.StageResult(candidate_id=cid, stage=stage, status="running", ts=at())
            if stage == fail_stage:
                yield ev.StageResult(candidate_id=cid, stage=stage, status="fail", detail=STAGE_FAILURES[stage],
                                     seconds=0.4, ts=at())
                failed = True
                break
            yield ev.StageResult(candidate_id=cid, stage=stage, status="pass", detail="ok", seconds=0.3, ts=at())
        if failed:
            yield ev.Decision(candidate_id=cid, target="rmsnorm", decision="failed",
                              reason=f"{fail_stage}: fail: {STAGE_FAILURES[fail_stage]}", ts=at())
            continue
        kernel_ms = eager_ms / (0.8 + 0.9 * rng.random() + 0.6 * (n / experiments))
        yield ev.BenchResult(candidate_id=cid, target="rmsnorm", shape={"rows": 512, "cols": 512}, dtype="fp32",
                             device_name="synthetic (no GPU)", kernel_ms=kernel_ms, eager_ms=eager_ms,
                             compile_ms=eager_ms / 1.3, metric="GB/s", achieved=2.1e6 / kernel_ms / 1e6,
                             ceiling=3350.0, fraction_of_ceiling=min(0.99, 0.2 * eager_ms / kernel_ms),
                             speedup_eager=eager_ms / kernel_ms, speedup_compile=eager_ms / 1.3 / kernel_ms,
                             meaningful=True, ts=at())
        if best_ms is None or kernel_ms < best_ms * 0.98:
            if approval == "ask" and best_ms is not None:
                yield ev.AwaitingApproval(candidate_id=cid, target="rmsnorm", speedup=best_ms / kernel_ms, ts=at())
                yield ev.ControlChanged(action="approve", value=cid, ts=at())
                yield ev.Decision(candidate_id=cid, target="rmsnorm", decision="kept", by="user",
                                  reason=f"new best: {kernel_ms:.4g} ms vs best {best_ms:.4g} ms", ts=at())
            else:
                yield ev.Decision(candidate_id=cid, target="rmsnorm", decision="kept",
                                  reason=f"new best: {kernel_ms:.4g} ms", ts=at())
            best_ms, best_src, best_id = kernel_ms, source, cid
        else:
            yield ev.Decision(candidate_id=cid, target="rmsnorm", decision="discarded",
                              reason=f"{kernel_ms:.4g} ms is not faster than the best ({best_ms:.4g} ms)", ts=at())
    if not finish:
        return
    yield ev.Log(level="info", message=f"rmsnorm: max experiments ({experiments}) reached", ts=at())
    yield ev.TargetDone(target="rmsnorm", best_candidate_id=best_id, best_speedup=eager_ms / (best_ms or eager_ms),
                        reason="budget", ts=at())
    yield ev.SessionDone(status="completed", summary={"experiments": experiments}, ts=at())


def write_session(store: Store, experiments: int = 12, seed: int = 7, approval: str = "auto",
                  finish: bool = True, session_id: str | None = None) -> str:
    """Write a synthetic session to `store` in one transaction (fast even for 40,000 events)."""
    events = list(session_events(experiments, seed, approval, finish=finish))
    sid = store.create_session(events[0], session_id=session_id or f"synthetic-{experiments}-{seed}")
    with store.db.conn:
        store.db["events"].insert_all(
            ({"session_id": sid, "seq": i + 2, "ts": e.ts, "type": e.type, "payload": json.dumps(e.payload())}
             for i, e in enumerate(events[1:])), batch_size=2000)
        store.db.execute("UPDATE sessions SET created=?, updated=? WHERE id=?", [events[0].ts, events[-1].ts, sid])
    store._next_seq.pop(sid, None)
    if finish:
        store.finish_session(sid, "completed", {"experiments": experiments})
        with store.db.conn:
            store.db.execute("UPDATE sessions SET updated=? WHERE id=?", [events[-1].ts, sid])
    return sid


class SyntheticSession:
    """An engine-like session that plays `session_events` through a real `Recorder` and `LoopControl`.

    It has `OptimizeSession`'s controls (pause, resume, stop, skip_target, set_approval, approve,
    reject) and honours them the way the search loop does: between experiments, and at the approval
    gate, where a new best waits for the person in `ask` mode. Used by the UI benchmark and tests;
    it never writes a kernel or times anything.
    """

    def __init__(self, store: Store, listeners=(), experiments: int = 12, approval: str = "auto",
                 seed: int = 7, delay_s: float = 0.0, busy_s: float = 0.0, profile: list[dict] | None = None):
        from autokernel.engine.control import LoopControl

        self.store = store
        self.listeners = list(listeners)
        self.experiments = experiments
        self.seed = seed
        self.delay_s = delay_s  # sleep between events (an engine waiting on its worker)
        self.busy_s = busy_s  # CPU spin between events (an engine holding the GIL)
        self.control = LoopControl(approval)
        self.profile = profile
        self.session_id: str | None = None
        self.recorder = None

    # -- controls (any thread), as OptimizeSession ---------------------------------------------
    def pause(self) -> None:
        self.control.pause()
        self.control.note("pause")

    def resume(self) -> None:
        self.control.resume()
        self.control.note("resume")

    def stop(self) -> None:
        self.control.stop()
        self.control.note("stop")

    def skip_target(self) -> None:
        self.control.skip_target()
        self.control.note("skip_target")

    def set_approval(self, mode: str) -> None:
        self.control.set_approval(mode)
        self.control.note("approval", mode)

    def approve(self, candidate_id: str) -> bool:
        ok = self.control.decide(candidate_id, "approved")
        if ok:
            self.control.note("approve", candidate_id)
        return ok

    def reject(self, candidate_id: str) -> bool:
        ok = self.control.decide(candidate_id, "rejected")
        if ok:
            self.control.note("reject", candidate_id)
        return ok

    @property
    def paused(self) -> bool:
        return self.control.paused

    # -- the loop ------------------------------------------------------------------------------
    def _pace(self) -> None:
        import time

        if self.busy_s:
            end = time.perf_counter() + self.busy_s
            while time.perf_counter() < end:
                pass
        if self.delay_s:
            time.sleep(self.delay_s)

    def run(self) -> dict:
        from autokernel.engine.store import Recorder

        events = session_events(self.experiments, self.seed, approval="auto", profile=self.profile)
        started = next(events)
        started.approval = self.control.approval
        started.config["approval"] = self.control.approval
        self.session_id = self.store.create_session(started)
        self.recorder = Recorder(self.store, self.session_id, self.listeners)
        for listener in self.listeners:
            listener(started)
        emit = self.recorder.emit
        self.control.on_change = lambda action, value: emit(ev.ControlChanged(action=action, value=value))
        status = "completed"
        best_seen = False
        timed: dict[str, float] = {}
        best_ms = 0.0
        try:
            for e in events:
                if isinstance(e, ev.SessionDone):
                    break
                if isinstance(e, ev.CandidateWritten):
                    self.control.wait_while_paused()
                    if self.control.stop_requested:
                        status = "stopped"
                        break
                if isinstance(e, ev.BenchResult):
                    timed[e.candidate_id] = e.kernel_ms
                if isinstance(e, ev.Decision) and e.decision == "kept":
                    gain = best_ms / timed[e.candidate_id] if best_seen else 1.0
                    if best_seen and self.control.approval == "ask":
                        self.control.open_gate(e.candidate_id, e.target, gain)
                        emit(ev.AwaitingApproval(candidate_id=e.candidate_id, target=e.target, speedup=gain, ts=e.ts))
                        verdict = self.control.wait_for_approval()
                        if verdict is None:
                            status = "stopped"
                            break
                        if verdict.verdict == "rejected":
                            e = ev.Decision(candidate_id=e.candidate_id, target=e.target, decision="rejected",
                                            reason=e.reason.removeprefix("new best: "), by=verdict.by, ts=e.ts)
                        else:
                            e = ev.Decision(candidate_id=e.candidate_id, target=e.target, decision="kept",
                                            reason=e.reason, by=verdict.by, ts=e.ts)
                    if e.decision == "kept":
                        best_ms = timed[e.candidate_id]
                    best_seen = True
                self.control.drain()
                emit(e)
                self._pace()
        finally:
            self.control.drain()
            emit(ev.SessionDone(status=status, summary={"experiments": self.experiments}))
            self.store.finish_session(self.session_id, status, {"experiments": self.experiments})
        return {"status": status}
