"""The branching search over one target: baseline, then rounds of ideas and variants, keep the best.

Round after round the best few kernels of the pool are the seeds; the agent proposes ideas for each
seed, every variant of an idea is one experiment (written, checked in five stages, timed if it
passed, then kept or discarded). An experiment is a generator that yields each call it needs of a
worker (`pool.Call`), so a pool of workers runs a round's variants side by side, and the next round's
beside the last of this one, while this thread alone emits their events. A candidate is better only if it
beats the best by more than the noise margin; in `ask` mode it waits for the person first. The target ends on a plateau, when the
agent has nothing new, when a budget runs out, or when the person skips it. Every step is an event
and the loop reads its state back from the fold of those events (`search_state`), so a resumed
session goes on from the last event written.
"""

from __future__ import annotations

import difflib
import hashlib
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

from . import events as ev
from .agents.base import AgentContext, Idea, Variant
from .control import LoopControl
from .fair_timing import timing_line
from .fit import no_fit
from .pool import Call, Experiment, WorkerPool, device_of, label_of
from .results import STAGES
from .search_state import CandidateRecord, SearchState, TargetState
from .store import StoreWriteError


@dataclass
class SearchLimits:
    """How far the search may go. None means no limit."""

    max_experiments: int | None = None  # whole session, starters included
    budget_s: float | None = None  # wall time of this run
    max_cost_usd: float | None = None  # LLM spend, whole session
    plateau: int = 30  # experiments without a new best before moving on
    # A target whose best reaches this fraction of the device's measured ceiling (copy bandwidth or
    # matmul rate) is done: no variant can gain more than the rest, and the budget is better spent on
    # the next target. Only a GPU measurement counts; None never stops there.
    stop_at_ceiling: float | None = 0.95
    noise_margin: float = 0.02  # a candidate must be this much faster than the best to count
    seeds: int = 2  # how many of the pool seed each round
    pool_size: int = 6
    max_ideas: int = 3
    max_variants: int = 3


UNTIMED = "starter could not be timed"  # a target's verdict when its starter's timing failed
AGENT_FAILURES_ALLOWED = 3  # rounds in a row in which every propose() raised, before the target is given up


class StopLoop(Exception):
    """Raised inside the loop when the person stopped it (the session ends as `stopped`)."""


def search_failed(ctx: "SearchContext", target: TargetState, error: BaseException) -> None:
    """One target's search broke (a bug, a spec that cannot load): logged, and the target ends as failed
    while the session's other targets go on."""
    ctx.emit(ev.ErrorEvent(where=f"search {target.name}", message=f"{type(error).__name__}: {error}"))
    if target.done is None:
        ctx.emit(ev.TargetDone(target=target.name, reason="failed"))


@dataclass
class SearchContext:
    """What one target's search needs from the session around it."""

    state: SearchState
    emit: Callable[[ev.Event], ev.Event]
    agent: Any
    agent_name: str
    worker: Any  # a WorkerPool, or one Worker-like object (made a pool of one)
    control: LoopControl
    limits: SearchLimits
    device: str
    device_name: str
    workdir: Path
    started_at: float = field(default_factory=time.monotonic)
    hint: str = ""
    size: str | None = None  # the size the problem was profiled at (the worker builds it the same)
    # why a target must leave what is left of the budget to the targets after it (None: it need not)
    reserve: Callable[[str], str | None] | None = None
    _seen_usage: tuple[int, int, float] = (0, 0, 0.0)

    def __post_init__(self) -> None:
        if not isinstance(self.worker, WorkerPool):
            self.worker = WorkerPool(self.worker)

    def budget_reason(self) -> str | None:
        """Why the session's budget is spent, or None while it is not."""
        lim = self.limits
        if lim.max_experiments is not None and self.state.experiments >= lim.max_experiments:
            return f"max experiments ({lim.max_experiments}) reached"
        if lim.budget_s is not None and time.monotonic() - self.started_at >= lim.budget_s:
            return f"wall-time budget ({lim.budget_s:.0f} s) spent"
        if lim.max_cost_usd is not None and self.state.cost_usd >= lim.max_cost_usd:
            return f"LLM cost budget (${lim.max_cost_usd:.2f}) spent"
        return None


def _usage_of(agent: Any) -> tuple[int, int, float]:
    """The agent's cumulative (prompt tokens, completion tokens, USD) if it counts them."""
    usage = getattr(agent, "usage", None)
    if callable(usage):
        usage = usage()
    if isinstance(usage, dict):
        return (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                float(usage.get("cost_usd") or usage.get("cost") or 0.0))
    if usage is not None and hasattr(usage, "cost_usd"):
        return (int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0),
                float(usage.cost_usd or 0.0))
    return (0, 0, float(getattr(agent, "cost_usd", 0.0) or 0.0))


def _digest(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def candidate_path(workdir: Path, c: CandidateRecord, starter_path: Path | None) -> Path:
    """Where a candidate's file lives: starters run from their own folder (a CUDA starter finds its
    `.cu` beside it); every other candidate is written under the session's work dir (rewritten from
    the stored source if the directory was lost)."""
    if c.is_starter and starter_path is not None and starter_path.exists() \
            and starter_path.read_text() == c.source:
        return starter_path
    path = workdir / f"{c.candidate_id}.py"
    if not path.exists() or path.read_text() != c.source:
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(c.source)
        tmp.replace(path)
    return path


def _read_seed_variants(spec: Any) -> dict[str, str]:
    """The spec's other seeds, {name: source} (one that went missing is left out)."""
    out = {}
    for name, path in getattr(spec, "seed_variants", {}).items():
        try:
            out[name] = Path(path).read_text()
        except OSError:
            continue
    return out


class TargetSearch:
    """Searches one target until plateau, exhaustion, budget, skip or stop; `work` is what a pool pulls
    (`target_scheduler` merges the open targets' work into one stream)."""

    def __init__(self, ctx: SearchContext, target: TargetState, spec: Any):
        self.ctx = ctx
        self.t = target
        self.spec = spec
        self.starter_path: Path | None = Path(spec.starters[target.backend]) if target.backend in spec.starters else None
        self.seed_variants = _read_seed_variants(spec)  # read once: the files do not change during a search
        self._agent_failed = False  # every propose() of the last round raised
        self._agent_failures = 0  # such rounds in a row
        self.running = 0  # this target's experiments started and not ended
        self.waiting = False  # `work` yielded None: nothing to start until one of its experiments ends
        self.takes_skip: Callable[[], bool] = lambda: True  # a skip is this target's (the scheduler's oldest)
        self._failure: Exception | None = None  # what broke this target's search

    # -- the loop -------------------------------------------------------------------------------
    def work(self) -> Iterator[Experiment | None]:
        """This target's experiments, for a pool it may share with other targets: None while it has nothing
        to start until one of its own experiments ends; exhausted once its TargetDone is emitted, which
        waits for its own experiments to be decided. A failure of its search or of one of its experiments
        ends this target alone (an ErrorEvent, TargetDone failed) once the others under way have ended."""
        steps = self._steps()
        try:
            for item in steps:
                self.waiting = item is None
                yield None if item is None else self._counted(item)
                if self._failure is not None:
                    break
        except (StopLoop, StoreWriteError):
            raise
        except Exception as e:
            self._failure = self._failure or e
        finally:
            steps.close()
        if self._failure is not None:
            yield from self._settle()
            search_failed(self.ctx, self.t, self._failure)

    def _counted(self, experiment: Experiment) -> Experiment:
        """`experiment` counted in `running` while it lives; its own failure ends this target, not the pool."""
        self.running += 1
        try:
            yield from experiment
        except (StopLoop, StoreWriteError):
            raise
        except Exception as e:
            self._failure = self._failure or e
        finally:
            self.running -= 1
            self.waiting = False

    def _settle(self) -> Iterator[None]:
        """Wait (None) until this target's experiments under way have ended."""
        while self.running:
            self.waiting = True
            yield None

    def _end(self, reason: str, message: str) -> Iterator[None]:
        """TargetDone once the experiments under way have been decided."""
        yield from self._settle()
        self._done(reason, message)

    def _steps(self) -> Iterator[Experiment | None]:
        """Unfinished experiments, then the starter alone, then rounds, each phase after the last one's results."""
        t, ctx = self.t, self.ctx
        for c in t.unfinished():  # written before a crash or a stop: finish them first
            why = self._halt()
            if why:
                yield from self._end(*why)
                return
            yield self._evaluate(c)
        yield from self._settle()
        while self._starter_to_run():
            again = t.starter is not None
            if again:
                ctx.emit(ev.Log(level="info", message=f"{t.name}: the starter's worker was killed "
                                                      f"({t.starter.failure}); running the starter again"))
            why = self._halt(budget=True)
            if why:
                self._done(*why)
                return
            yield self._run_starter(again=again)
            yield from self._settle()
        starter = t.starter
        if starter is not None and not starter.passed:
            fit = no_fit(starter.failure, ctx.device)
            if fit:
                self._done("no-fit", f"{fit} (the starter ran out of memory: {starter.failure})")
                return
            self._done("failed", f"the starter failed its checks ({starter.failure}); skipping {t.name}")
            return
        if starter is not None and starter.bench is None and starter.decision == "failed":
            # it passed but its timing failed: no measurement to beat, so no round can be judged
            fit = no_fit(starter.reason, ctx.device)
            self._done("no-fit" if fit else "untimed", fit or f"{UNTIMED}: {starter.reason.removeprefix('timing failed: ')}")
            return
        ended: list[tuple[str, str]] = []
        yield from self._rounds(ended)
        yield from self._end(*ended[0])

    def _rounds(self, ended: list[tuple[str, str]]) -> Iterator[Experiment | None]:
        """Round after round of experiments, pulled whenever a worker is free; why the target ends goes to `ended`.

        A round's next variant is started, or, when the round's are all started, the next round is proposed at
        once, even while experiments of the last one still run, so a free worker never waits for a round to
        finish. The agent then sees the results decided so far; what is running is already in `seen`. None
        waits for a running experiment to end: a proposal with nothing new, or a plateau or ceiling, decides
        nothing while a result that may change it is still to come, and nothing starts while the experiments
        under way could reach the plateau by themselves (so it counts the same experiments on any number of
        workers; only this target's own, whatever other targets share the pool). A budget, a skip or a stop
        ends the target at once (the experiments under way are still decided); an agent that failed too
        often, too."""
        t = self.t
        queue: deque[tuple[dict, Variant, CandidateRecord]] = deque()
        while True:
            why = self._halt(budget=True)
            if why:
                ended.append(why)
                return
            why = self._settled()
            if why or t.since_improvement + self.running >= self.ctx.limits.plateau:
                if self.running:
                    yield None
                    continue
                ended.append(why)  # nothing runs: only a plateau or the ceiling gets here
                return
            if queue:
                yield self._experiment(*queue.popleft())
                continue
            queue.extend(self._propose_round())
            if queue or (self._agent_failed and self._agent_failures < AGENT_FAILURES_ALLOWED):
                continue  # the agent failed (network, parse): ask again, a few times, before giving up
            if self.running and not self._agent_failed:
                yield None
                continue
            ended.append(("exhausted", "the agent failed repeatedly" if self._agent_failed
                          else "the agent has no new ideas for this target"))
            return

    def _settled(self) -> tuple[str, str] | None:
        """A plateau, or the best at the ceiling: the target is done unless an experiment under way changes it."""
        t = self.t
        if t.since_improvement >= self.ctx.limits.plateau:
            return "plateau", f"no new best in {t.since_improvement} experiments"
        at = self._at_ceiling()
        if at:
            return "ceiling", f"the best is at {at:.0%} of the measured ceiling"
        return None

    def _where(self) -> dict[str, str]:
        """The worker running the experiment being advanced, for the events it emits."""
        w = self.ctx.worker.current
        return {"worker": label_of(w), "worker_device": device_of(w)}

    def _at_ceiling(self) -> float:
        """The best's fraction of the ceiling when it has reached `stop_at_ceiling` on a GPU, else 0."""
        limit, best = self.ctx.limits.stop_at_ceiling, self.t.best
        bench = (best.bench or {}) if best else {}
        fraction = float(bench.get("fraction_of_ceiling") or 0.0)
        return fraction if limit and bench.get("meaningful") and fraction >= limit else 0.0

    def _halt(self, budget: bool = False) -> tuple[str, str] | None:
        """Why the target ends now (TargetDone's reason and message, not emitted yet), after any pause."""
        ctl = self.ctx.control
        ctl.wait_while_paused()
        if ctl.stop_requested:
            raise StopLoop()
        if self.takes_skip() and ctl.take_skip():
            return "skipped", "skipped by the person"
        if budget:
            why = self.ctx.budget_reason() or (self.ctx.reserve and self.ctx.reserve(self.t.name))
            if why:
                return "budget", why
        return None

    def _done(self, reason: str, message: str) -> str:
        best = self.t.best
        speed = (best.bench or {}).get("speedup_eager", 0.0) if best else 0.0
        self.ctx.emit(ev.Log(level="info", message=f"{self.t.name}: {message}"))
        self.ctx.emit(ev.TargetDone(target=self.t.name, best_candidate_id=best.candidate_id if best else None,
                                    best_speedup=float(speed or 0.0), reason=reason))
        return reason

    # -- proposing ------------------------------------------------------------------------------
    def _context(self, seed: CandidateRecord) -> AgentContext:
        t, lim = self.t, self.ctx.limits
        best = t.best
        return AgentContext(
            kernel=t.name, backend=t.backend, device=self.ctx.device, device_name=self.ctx.device_name,
            shape=dict(t.shape), dtype=t.dtype, parent_id=seed.candidate_id, parent_source=seed.source,
            parent_params=dict(seed.params), parent_measurement=seed.measurement(),
            best=best.measurement() if best else None,
            pool=[(c.candidate_id, c.measurement()) for c in t.pool(lim.pool_size)],
            history=t.history(), round=t.rounds, max_ideas=lim.max_ideas, max_variants=lim.max_variants,
            hint=self.ctx.hint, problem=self.spec.agent_problem(), seed_variants=self.seed_variants,
        )

    def _first_parent(self) -> CandidateRecord | None:
        """The parent of the first ideas when the target has no candidate (a whole problem's Model)."""
        first = self.spec.first_parent()
        if first is None:
            return None
        cid, label, source = first
        return CandidateRecord(cid, cid, 0, self.t.name, self.t.backend, label, None, source, {})

    def _worker_args(self) -> dict:
        return self.spec.worker_args(self.ctx.size)

    def _propose_round(self) -> list[tuple[dict, Variant, CandidateRecord]]:
        """Ask the agent once per seed; the untried variants of its ideas, in order."""
        t, ctx = self.t, self.ctx
        pool = t.pool(ctx.limits.pool_size)
        seeds: list[CandidateRecord] = []
        for c in ([t.best] if t.best else []) + pool:
            if all(c.candidate_id != s.candidate_id for s in seeds) and len(seeds) < ctx.limits.seeds:
                seeds.append(c)
        first = None if seeds else self._first_parent()
        if first is not None:
            seeds.append(first)
        seen = {_digest(s) for s in t.sources()}
        queue: list[tuple[dict, Variant, CandidateRecord]] = []
        round_no = t.rounds
        failures = 0
        for seed in seeds:
            try:
                ideas: list[Idea] = list(ctx.agent.propose(self._context(seed)) or [])
            except Exception as e:  # an agent's failure costs a round, never the session
                failures += 1
                message = f"{type(e).__name__}: {e}"
                redact = getattr(ctx.agent, "redact", None)  # an LLM agent knows its secrets
                ctx.emit(ev.ErrorEvent(where=f"agent {ctx.agent_name}", message=redact(message) if redact else message))
                ideas = []
            self._record_usage()
            for idea in ideas[: ctx.limits.max_ideas]:
                slot = {"idea": idea, "id": None, "round": round_no, "parent": seed}
                for variant in (idea.variants or [])[: ctx.limits.max_variants]:
                    d = _digest(variant.source)
                    if d in seen or not variant.source.strip():
                        continue
                    seen.add(d)
                    queue.append((slot, variant, seed))
        self._agent_failed = bool(seeds) and failures == len(seeds)  # no seed: the agent was not asked
        self._agent_failures = self._agent_failures + 1 if self._agent_failed else 0
        return queue

    def _record_usage(self) -> None:
        ctx = self.ctx
        now = _usage_of(ctx.agent)
        last = ctx._seen_usage
        if now == last:
            return
        ctx._seen_usage = now
        delta_cost = max(now[2] - last[2], 0.0)
        ctx.emit(ev.LLMUsage(model=ctx.agent_name, prompt_tokens=max(now[0] - last[0], 0),
                             completion_tokens=max(now[1] - last[1], 0), cost_usd=delta_cost,
                             total_cost_usd=ctx.state.cost_usd + delta_cost))

    # -- experiments ----------------------------------------------------------------------------
    def _next_id(self) -> tuple[int, str]:
        n = self.ctx.state.experiments + 1
        return n, f"{self.t.name}-{n:04d}"

    def _starter_to_run(self) -> bool:
        """Whether the starter runs (next): first of all where the target has one, and once more where its worker
        was killed from outside, since the starter is the tool's own code and that death is not the code's fault."""
        runs = self.t.starters
        if not runs:
            return self.starter_path is not None or self.spec.starter_required
        return len(runs) == 1 and not runs[0].passed and runs[0].killed_from_outside

    def _run_starter(self, again: bool = False) -> Experiment:
        if self.starter_path is None:
            raise RuntimeError(f"kernel {self.t.name} has no {self.t.backend} starter")
        source = self.starter_path.read_text()
        n, cid = self._next_id()
        params = self.spec.starter_params(source)
        label = ("starter" if not params else "Inductor seed") + (", again" if again else "")
        self.ctx.emit(ev.CandidateWritten(candidate_id=cid, idea_id="", experiment=n, target=self.t.name,
                                          backend=self.t.backend, label=label,
                                          parent_id=None, source=source, diff="", params=params))
        yield from self._evaluate(self.t.candidates[cid])

    def _experiment(self, slot: dict, variant: Variant, parent: CandidateRecord) -> Experiment:
        ctx, t = self.ctx, self.t
        idea: Idea = slot["idea"]
        if slot["id"] is None:  # an idea is recorded when its first variant runs
            slot["id"] = f"idea-{ctx.state.n_ideas + 1:04d}"
            ctx.emit(ev.IdeaProposed(idea_id=slot["id"], target=t.name, agent=ctx.agent_name, tier=idea.tier,
                                     tier_name=idea.tier_name, title=idea.title, hypothesis=idea.hypothesis,
                                     parent_id=parent.candidate_id, round=slot["round"]))
        n, cid = self._next_id()
        diff = "".join(difflib.unified_diff(
            parent.source.splitlines(keepends=True), variant.source.splitlines(keepends=True),
            fromfile=f"{parent.candidate_id}.py", tofile=f"{cid}.py"))
        ctx.emit(ev.CandidateWritten(candidate_id=cid, idea_id=slot["id"], experiment=n, target=t.name,
                                     backend=t.backend, label=variant.label or idea.title,
                                     parent_id=parent.candidate_id, source=variant.source, diff=diff,
                                     params=dict(variant.params or {})))
        yield from self._evaluate(t.candidates[cid])

    def _evaluate(self, c: CandidateRecord) -> Experiment:
        """Check in five stages, time if it passed, then decide; resumes a half-done experiment."""
        ctx, t = self.ctx, self.t
        path = candidate_path(ctx.workdir, c, self.starter_path)
        if c.bench is None:
            failed_stage = any(st not in ("pass", "running", "pending") for st, _ in c.stages.values())
            if not c.passed and not failed_stage:
                yield from self._check(c, path, dtypes=self._screen_dtypes(c))
            if not c.passed:
                ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="failed",
                                     reason=c.failure or "did not pass every stage"))
                return
            yield from self._bench(c, path)
            if c.bench is None:
                return
        yield from self._decide(c)

    def _screen_dtypes(self, c: CandidateRecord) -> list[str]:
        """The dtypes a new candidate is first checked in: only the target's, once a best exists.

        Each dtype costs a Triton compile per shape, so screening in one cuts most of an experiment's
        check time; a candidate that would be kept is checked in every dtype first (`_full_check`), so
        a kept kernel is always checked as fully as the starter was. [] (every dtype): the starter,
        the first passing kernel, a whole problem (one dtype), a spec that has only the target's."""
        dtypes = getattr(self.spec, "dtypes", None)
        if self.t.best is None or c.is_starter or not dtypes or len(dtypes) < 2:
            return []
        from autokernel.kernels.spec import DTYPE_NAMES

        names = [DTYPE_NAMES.get(d) for d in dtypes]
        return [self.t.dtype] if self.t.dtype in names else []

    def _full_check(self, c: CandidateRecord) -> Generator[Call, Any, bool]:
        """Check a screened candidate in every dtype before it is kept; False (decided: failed) if it fails."""
        if c.fully_checked:
            return True
        yield from self._check(c, candidate_path(self.ctx.workdir, c, self.starter_path), dtypes=[])
        if c.passed:
            return True
        self.ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=self.t.name, decision="failed",
                                  reason=f"faster, and right in {self.t.dtype}, but the check in every dtype failed: "
                                         f"{c.failure or 'did not pass every stage'}"))
        return False

    def _check(self, c: CandidateRecord, path: Path, dtypes: list[str] | None = None) -> Experiment:
        ctx, t = self.ctx, self.t
        reported: set[str] = set()
        screened = list(dtypes or [])

        def stage_result(stage: str, status: str, detail: str = "", seconds: float = 0.0) -> None:
            ctx.emit(ev.StageResult(candidate_id=c.candidate_id, stage=stage, status=status,
                                    detail=str(detail or ""), seconds=float(seconds or 0.0), dtypes=screened,
                                    **self._where()))

        def on_stage(stage: str, status: str, detail: str = "", seconds: float = 0.0) -> None:
            ctx.control.drain()
            if status in ("pass", "fail", "crash", "timeout", "skipped"):
                reported.add(stage)
            stage_result(stage, status, detail, seconds)

        try:
            report = yield Call("check", (str(path),), dict(
                kernel=t.name, backend=t.backend, on_stage=on_stage, extra_shapes=[dict(t.shape)] if t.shape else None,
                dtypes=screened or None, **self._worker_args()))
        except Exception as e:  # the worker's own failure is this candidate's failure, never the loop's
            for s in STAGES:
                if s not in reported:
                    stage_result(s, "crash" if s == STAGES[0] else "skipped",
                                 f"worker error: {type(e).__name__}: {e}" if s == STAGES[0] else "")
                    break
            return
        outcomes = {s.name: s for s in report.stages}
        for i, s in enumerate(STAGES):
            if s in reported:
                continue
            o = outcomes.get(s)
            if o is not None:
                stage_result(s, o.status, o.detail, o.seconds)
            elif report.error and not reported:
                stage_result(s, "fail", report.error)
                break
        if not report.passed and c.passed:  # the report disagrees with the stages: trust the report
            stage_result(STAGES[-1], "fail", report.error or "the harness did not pass this candidate")

    def _bench(self, c: CandidateRecord, path: Path) -> Experiment:
        ctx, t = self.ctx, self.t
        try:
            records = yield Call("bench", (str(path),), dict(kernel=t.name, shapes=[dict(t.shape)], dtype=t.dtype,
                                                              backend=t.backend, **self._worker_args()))
        except Exception as e:
            ctx.emit(ev.ErrorEvent(where="bench", message=f"{c.candidate_id}: {type(e).__name__}: {e}"))
            ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="failed",
                                 reason=f"timing failed: {type(e).__name__}: {e}"))
            return
        if not records:
            ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="failed",
                                 reason="timing returned no record"))
            return
        self._emit_bench(c, records[0])

    def _emit_bench(self, c: CandidateRecord, r: Any) -> None:
        self.ctx.emit(ev.BenchResult(
            candidate_id=c.candidate_id, target=self.t.name, shape=dict(r.shape), dtype=r.dtype,
            device_name=r.device_name, kernel_ms=r.kernel_ms, eager_ms=r.eager_ms, compile_ms=r.compile_ms,
            metric=r.metric, achieved=r.achieved, ceiling=r.ceiling, fraction_of_ceiling=r.fraction_of_ceiling,
            speedup_eager=r.speedup_eager, speedup_compile=r.speedup_compile, meaningful=r.meaningful,
            copy_gbs=r.copy_gbs, timing=timing_line(r), **self._where()))

    def _time_best_again(self, best: CandidateRecord) -> Experiment:
        """Time the best again, now, when a candidate seems to beat it (GPU timings only).

        The best was timed experiments ago; if that look was slow (seen on the H100: a starter timed at
        0.24 ms once and 0.05 ms everywhere else), every candidate would beat it by a speedup that is not
        real. A lower time replaces the best's record (a new BenchResult); a higher one changes nothing,
        since a slowdown now is no more the best's fault than the candidate's gain."""
        ctx, t = self.ctx, self.t
        was = best.kernel_ms
        try:
            records = yield Call("bench", (str(candidate_path(ctx.workdir, best, self.starter_path)),), dict(
                kernel=t.name, shapes=[dict(t.shape)], dtype=t.dtype, backend=t.backend, **self._worker_args()))
        except Exception as e:  # the candidate is then judged against the recorded time, as before
            ctx.emit(ev.ErrorEvent(where="bench", message=f"timing the best ({best.candidate_id}) again: "
                                                          f"{type(e).__name__}: {e}"))
            return
        if not records:
            return
        now = records[0].kernel_ms
        if now < was:
            self._emit_bench(best, records[0])
        ctx.emit(ev.Log(level="info", message=f"the best ({best.candidate_id}) timed again: {now:.4g} ms "
                                              f"(recorded {was:.4g} ms{'; the new time stands' if now < was else ''})"))

    def _decide(self, c: CandidateRecord) -> Experiment:
        ctx, t = self.ctx, self.t
        best = t.best
        ms = c.kernel_ms
        label = "" if (c.bench or {}).get("meaningful", True) else " (CPU interpreter: not meaningful)"
        if c.is_starter or best is None:
            ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="kept",
                                 reason=f"baseline: the starter, {ms:.4g} ms{label}" if c.is_starter
                                 else f"first passing kernel, {ms:.4g} ms{label}"))
            return
        limit = best.kernel_ms * (1.0 - ctx.limits.noise_margin)
        recorded = best.kernel_ms
        if ms < limit and (c.bench or {}).get("meaningful"):
            yield from self._time_best_again(best)
            limit = best.kernel_ms * (1.0 - ctx.limits.noise_margin)
        if ms >= limit:
            again = f", timed again now; recorded {recorded:.4g} ms" if best.kernel_ms != recorded else ""
            ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="discarded",
                                 reason=f"{ms:.4g} ms is not faster than the best ({best.kernel_ms:.4g} ms{again}) "
                                        f"by more than {ctx.limits.noise_margin:.0%}{label}"))
            return
        if not (yield from self._full_check(c)):
            return
        gain = best.kernel_ms / ms
        why = f"{ms:.4g} ms vs best {best.kernel_ms:.4g} ms ({gain:.2f}x){label}"
        if ctx.control.approval == "ask":
            ctx.control.open_gate(c.candidate_id, t.name, gain)
            ctx.emit(ev.AwaitingApproval(candidate_id=c.candidate_id, target=t.name, speedup=gain))
            result = ctx.control.wait_for_approval()
            if result is None:
                raise StopLoop()  # stopped while waiting: undecided, asked again on resume
            if result.verdict == "rejected":
                # the reason is what was turned down: the decision and `by` already say who did it
                ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="rejected",
                                     reason=why, by=result.by))
                return
            ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="kept",
                                 reason="new best: " + why, by=result.by))
            return
        ctx.emit(ev.Decision(candidate_id=c.candidate_id, target=t.name, decision="kept", reason="new best: " + why))
