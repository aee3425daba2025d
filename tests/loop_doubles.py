"""Test doubles for the optimize loop's logic only (search order, decisions, budgets, gate, resume).

A fake kernel is a source file whose first line says how the fake harness should judge it:
`# fake ms=0.8 fail=shape_sweep` (`fail=full:stability`: fails that stage only when checked in every
dtype, i.e. passes a screening check in the target's dtype). The end-to-end tests use the real worker, profiler and agent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from autokernel.engine.agents.base import Idea, Variant
from autokernel.engine.fair_timing import WALL
from autokernel.engine.results import STAGES, BenchRecord, CheckReport, StageOutcome


def fake_source(ms: float, fail: str = "", tag: str = "") -> str:
    return f"# fake ms={ms} fail={fail} tag={tag}\ndef kernel_fn(x):\n    return x\n"


def _parse(source: str) -> tuple[float, str]:
    m = re.match(r"# fake ms=([0-9.]+) fail=(\S*)", source)
    assert m, source[:80]
    return float(m.group(1)), m.group(2)


class FakeWorker:
    """Judges a fake kernel by its first line; counts the calls, optionally slow."""

    def __init__(self, delay_s: float = 0.0, meaningful: bool = False, slow_first: float = 1.0,
                 copy_gbs: float | None = None, launch_bound: bool = False):
        self.delay_s = delay_s
        self.launch_bound = launch_bound  # the wall clock overruled the events (engine/fair_timing.py)
        self.copy_gbs = copy_gbs  # a same-size copy's GB/s, as the timing measures it on a GPU
        self.meaningful = meaningful  # True: the bench stands for a GPU's (fraction of ceiling 0.1 / ms)
        self.slow_first = slow_first  # the worker's first timing comes out this many times slow
        self.checked: list[str] = []
        self.check_dtypes: list[list[str]] = []  # per check: the dtypes asked for ([]: all)
        self.benched: list[str] = []
        self.closed = False

    def check(self, path, kernel, backend, on_stage=None, extra_shapes=None, dtypes=None):
        ms, fail = _parse(Path(path).read_text())
        self.checked.append(Path(path).name)
        self.check_dtypes.append(list(dtypes or []))
        if fail.startswith("full:"):
            fail = "" if dtypes else fail[len("full:"):]
        stages = []
        failed = False
        for s in STAGES:
            if failed:
                stages.append(StageOutcome(s, "skipped"))
                on_stage and on_stage(s, "skipped", "", 0.0)
                continue
            on_stage and on_stage(s, "running", "", 0.0)
            time.sleep(self.delay_s / len(STAGES))
            status = "fail" if s == fail else "pass"
            detail = "max abs error 1.0 at rows=7" if status == "fail" else "ok"
            stages.append(StageOutcome(s, status, detail, 0.01))
            on_stage and on_stage(s, status, detail, 0.01)
            failed = status == "fail"
        return CheckReport(kernel=kernel, backend=backend, device="cpu", candidate=str(path), stages=stages)

    def bench(self, path, kernel, shapes, dtype, backend="triton"):
        ms, _ = _parse(Path(path).read_text())
        if not self.benched:
            ms *= self.slow_first
        self.benched.append(Path(path).name)
        record = BenchRecord(kernel=kernel, backend="triton", shape=dict(shapes[0]), dtype=dtype, device_name="fake",
                             kernel_ms=ms, eager_ms=1.0, compile_ms=None, metric="GB/s", achieved=1 / ms, ceiling=10.0,
                             fraction_of_ceiling=0.1 / ms, speedup_eager=1.0 / ms, speedup_compile=None,
                             meaningful=self.meaningful, copy_gbs=self.copy_gbs)
        if self.launch_bound:
            record.timed_by, record.timing_reason = WALL, "launch-bound"
            record.kernel_wall_ms, record.eager_wall_ms = ms, 1.0
            record.kernel_event_ms, record.eager_event_ms = ms / 3, 0.5
        return [record]

    def close(self):
        self.closed = True


@dataclass
class ScriptedAgent:
    """Each propose() returns the next list of ideas, built from the parent's time: `moves` are
    (title, [(factor, fail), ...]) and a variant's time is parent_ms * factor."""

    moves: list = field(default_factory=list)
    name: str = "scripted"
    contexts: list = field(default_factory=list)
    cost_per_call: float = 0.0
    cost_usd: float = 0.0

    def propose(self, ctx):
        self.contexts.append(ctx)
        self.cost_usd += self.cost_per_call
        if not self.moves:
            return []
        parent_ms = ctx.parent_measurement.kernel_ms if ctx.parent_measurement else 1.0
        title, variants = self.moves.pop(0)
        n = len(ctx.history) + len(self.contexts)
        return [Idea(tier=1, title=title, hypothesis=f"{title} because the parent took {parent_ms} ms",
                     variants=[Variant(source=fake_source(round(parent_ms * f, 6), fail, tag=f"{n}-{i}"),
                                       label=f"{title} v{i}", params={"i": i})
                               for i, (f, fail) in enumerate(variants)])]


class EndlessAgent:
    """Always has a new idea: two variants, one 10% faster, one slower."""

    name = "endless"

    def __init__(self):
        self.calls = 0

    def propose(self, ctx):
        self.calls += 1
        ms = ctx.parent_measurement.kernel_ms
        return [Idea(tier=1, title=f"idea {self.calls}", hypothesis="keep going",
                     variants=[Variant(source=fake_source(round(ms * 0.9, 9), tag=f"{self.calls}a"), label="faster"),
                               Variant(source=fake_source(round(ms * 1.2, 9), tag=f"{self.calls}b"), label="slower")])]


# What the search asks of a spec, answered as a kernel type's KernelSpec answers it (kernels/spec.py).
KERNEL_SEARCH_HOOKS = {"starter_required": True, "first_parent": lambda: None, "starter_params": lambda source: {},
                       "worker_args": lambda size: {}, "agent_problem": lambda: ""}


def install_fake_specs(monkeypatch, tmp_path: Path, kinds=("fakesoft", "fakenorm"), starter_ms=1.0, dtypes=None):
    """Make `autokernel.kernels` know fake kernel types whose starters are fake kernels (with `dtypes`,
    torch dtypes, the specs have several dtypes and the search screens candidates in one)."""
    import autokernel.kernels as kernels

    specs = {}
    for kind in kinds:
        folder = tmp_path / "specs" / kind
        folder.mkdir(parents=True, exist_ok=True)
        starter = folder / "starter_triton.py"
        starter.write_text(fake_source(starter_ms, tag=kind))
        specs[kind] = SimpleNamespace(name=kind, starters={"triton": starter}, backends=["triton"], tolerances={},
                                      **KERNEL_SEARCH_HOOKS)
        if dtypes:
            specs[kind].dtypes = tuple(dtypes)
    monkeypatch.setattr(kernels, "available", lambda: list(specs))
    monkeypatch.setattr(kernels, "get_spec", lambda name: specs[name])
    return specs


def fake_profiler(kinds=("fakesoft", "fakenorm")):
    rows = [{"name": "aten::mystery", "kind": "other", "share": 0.5, "target_shape": None, "target_dtype": "fp32"}]
    rows += [{"name": f"aten::{k}", "kind": k, "share": 0.2 / (i + 1), "target_shape": {"rows": 4, "cols": 8},
              "target_dtype": "fp32", "max_speedup": 1.2} for i, k in enumerate(kinds)]
    return lambda model_path, device, size: SimpleNamespace(device=device, total_ms=10.0, rows=rows)


# -- KernelBench batches with the loop's doubles -----------------------------------------------------------
PROBLEM_SRC = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n"


def batch_session_factory(delay_s: float = 0.0):
    """A `KernelBenchBatch` session factory: real `OptimizeSession`s with the loop's doubles whose
    KernelBench check answers from the problem's name (`wrong` fails it; `cumsum` has nothing to target)."""
    from pathlib import Path as _Path

    from autokernel.engine import events as ev
    from autokernel.engine.session import OptimizeSession

    class CheckedSession(OptimizeSession):
        def _integrate(self, device):
            ok = "wrong" not in _Path(self.config.model_path).stem
            self.recorder.emit(ev.IntegrationResult(
                replaced=[{"kind": "fakesoft", "calls": 3, "modules": 0, "fallbacks": 0, "mismatches": []}],
                correct=ok, detail=f"KernelBench check: {3 if ok else 1}/3 trials of fresh get_inputs() within "
                                   f"atol = rtol = 0.01; ModelNew: /x/model_new.py", model_ms=1.0, eager_ms=1.6,
                compile_ms=1.2, speedup_eager=1.6, speedup_compile=1.2, meaningful=True))

    def factory(config, store, listeners):
        kinds = () if "cumsum" in config.model_path else ("fakesoft",)
        return CheckedSession(config, store, listeners, agent=EndlessAgent(), worker=FakeWorker(delay_s=delay_s),
                              profiler=fake_profiler(kinds))

    return factory
