"""KernelBench mode: the optimize loop over a batch of KernelBench-form problems, and its score.

A problem is a file defining `Model`, `get_inputs()` and `get_init_inputs()`. Each problem is one
optimize session in the store (profile, search its bottlenecks, then integration mode `kernelbench`:
a standalone `ModelNew` with the kept kernels is written and checked and timed the KernelBench way,
`engine/model_new.py`), so `autokernel sessions` and the TUI's replay show every problem's run. The
batch itself is a `kernelbench` session whose summary is the score table.

A problem ends `correct` (a kept kernel slower than eager counts too: with none faster, ModelNew runs the least
slow one, so that it is a submission), `no-kernel` (ModelNew matched, but no target kept any kernel, so it is the
problem's Model: nothing to submit, and KernelBench's static checker refuses such a file), `incorrect`
(ModelNew failed the check; for a whole-problem target, no ModelNew the agent wrote passed the five stages,
so there is no solution to check), `untimed` (a starter ran but could not be timed: nothing to build on, the
agent was never asked), `no-fit` (out of memory on this GPU/CPU, the tool's limit, never a wrong answer),
`skipped` (nothing the agent can
target: a problem of no known kernel type is one whole target `problem` (engine/problem_spec.py), which the
LLM agent writes and the playbook agent tunes from Inductor's seed (engine/seeding.py); it is skipped when
Inductor cannot seed it, or when the file does not load: the problem's limits, not the tool's failure), `error` (the tool failed) or `stopped` (Ctrl-C; the session can be resumed). fast_p, KernelBench's score, is the
fraction of ALL problems of the batch, skipped ones included, that are correct and more than p
times faster than the baseline (eager or torch.compile); fast_0 is the fraction correct.

The batch records which session each problem got and each problem's row as it ends (`ProblemStarted`,
`ProblemDone`), so a batch killed or stopped part-way goes on with `KernelBenchBatch.resuming`
(engine/kernelbench_resume.py) and ends with the score a batch that never stopped would have.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from . import events as ev
from .errors import UserError
from .fit import NO_FIT, no_fit
from .model_new import CHECK_DONE
from .problem_spec import PROBLEM_TARGET, defines_problem
from .search import UNTIMED
from .search_state import stored_session
from .seed_prefetch import SeedPrefetch
from .session import _stored_url
from .store import Recorder, Store

THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")
# no-kernel: ModelNew passed, but it is the problem's Model (no kernel was kept), not a submission; untimed: a
# starter ran but could not be timed, so there was nothing to build on; no-fit: out of memory on this machine
# (engine/fit.py). None of them is a wrong answer, and none is correct.
STATUSES = ("correct", "no-kernel", "incorrect", "untimed", "no-fit", "skipped", "error", "stopped")


# -- finding problems ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    name: str  # relative to the folder it was found in, without .py: "level1/23_Softmax"
    path: Path


def _natural(text: str) -> list:
    """Sort key that puts `2_x` before `10_x`, as KernelBench numbers its problems."""
    return [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", text)]


def discover(paths: Iterable[str | Path]) -> tuple[list[Problem], list[Path]]:
    """The problems under `paths` (files, or folders searched recursively, level folders included)
    and the .py files of those folders that are not problems. A file named explicitly is always a
    problem (if it is not one, the run says why); UserError for a path that does not exist."""
    problems: dict[Path, Problem] = {}
    ignored: list[Path] = []
    for given in paths:
        root = Path(given).expanduser()
        if not root.exists():
            raise UserError(f"{given}: no such file or folder")
        if root.is_file():
            if root.suffix != ".py":
                raise UserError(f"{given}: not a Python file (a problem is a .py file defining Model and get_inputs())")
            problems.setdefault(root.resolve(), Problem(root.stem, root.resolve()))
            continue
        found = []
        for f in root.rglob("*.py"):
            if f.name.startswith(("_", ".")) or any(p.startswith((".", "__")) for p in f.relative_to(root).parts[:-1]):
                continue
            try:
                is_problem = defines_problem(f.read_text(errors="replace"))
            except OSError:
                is_problem = False
            (found if is_problem else ignored).append(f)
        for f in sorted(found, key=lambda f: _natural(str(f.relative_to(root)))):
            name = str(f.relative_to(root).with_suffix("")).replace("\\", "/")
            problems.setdefault(f.resolve(), Problem(name, f.resolve()))
    return list(problems.values()), ignored


# -- one problem's result --------------------------------------------------------------------------
@dataclass
class ProblemResult:
    name: str
    path: str
    status: str  # one of STATUSES
    reason: str = ""  # why skipped / incorrect / error / stopped; a note for a correct one
    session_id: str | None = None
    speedup_eager: float | None = None  # eager Model time / ModelNew time
    speedup_compile: float | None = None  # torch.compile(Model) time / ModelNew time (GPU only)
    model_ms: float | None = None  # ModelNew
    eager_ms: float | None = None
    compile_ms: float | None = None
    meaningful: bool = False  # False on the CPU (Triton's interpreter): the times show the method only
    kernels: list[str] = field(default_factory=list)  # kernel types ModelNew actually ran
    model_new: str | None = None  # the standalone ModelNew file that was checked
    experiments: int = 0
    seconds: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def speedup(self, baseline: str) -> float | None:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "correct": self.correct}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProblemResult":
        """A row as `to_json` wrote it (a resumed batch reads its finished problems back)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _key(p: float) -> str:
    return "0" if p == 0 else f"{p:.1f}"


def fast_p(results: list[ProblemResult], thresholds: Iterable[float] = THRESHOLDS) -> dict[str, dict[str, float | None]]:
    """KernelBench's fast_p per baseline: {"eager": {"0": f, "1.0": f, ...}, "compile": {...}}.

    The denominator is every problem given, skipped and failed ones included. fast_0 is the fraction
    correct. Where correct problems exist but none was timed against a baseline (torch.compile on the
    CPU), that baseline's p > 0 entries are None: not measured, rather than zero.
    """
    n = len(results)
    out: dict[str, dict[str, float | None]] = {}
    for base in BASELINES:
        correct = [r for r in results if r.correct]
        untimed = bool(correct) and all(r.speedup(base) is None for r in correct)
        row: dict[str, float | None] = {}
        for p in thresholds:
            if p > 0 and untimed:
                row[_key(p)] = None
                continue
            wins = sum(1 for r in results if r.correct and (p == 0 or (r.speedup(base) or 0.0) > p))
            row[_key(p)] = wins / n if n else 0.0
        out[base] = row
    return out


TIE_MARGIN = 0.02  # the search's noise margin: a speedup within it is a tie at the timer's noise


def ties(results: list[ProblemResult], margin: float = TIE_MARGIN) -> dict[str, int]:
    """Per baseline, how many of the problems fast_1.0 counts are faster by no more than `margin`: KernelBench's
    rule counts them (any speedup above 1), a reader should know they are ties."""
    return {base: sum(1 for r in results if r.correct and 1.0 < (r.speedup(base) or 0.0) <= 1.0 + margin)
            for base in BASELINES}


def status_counts(statuses: Iterable[str]) -> dict[str, int]:
    """How many problems ended in each status, every status of STATUSES named (zeros included), so a
    wrong answer, an untimed starter and a problem too big for the machine are never one number."""
    counts = dict.fromkeys(STATUSES, 0)
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


def _top_rows(rows: list[dict], n: int = 3) -> str:
    return ", ".join(f"{r.get('name', r.get('kind'))} {100 * float(r.get('share') or 0):.0f}%" for r in rows[:n])


def result_from_session(problem: Problem, session: Any, agent: str, seconds: float) -> ProblemResult:
    """A finished (or stopped) session of one problem, as its row in the score table."""
    state, summary = session.state, session.summary or {}
    base = ProblemResult(name=problem.name, path=str(problem.path), status="error",
                         session_id=session.session_id, experiments=int(summary.get("experiments") or 0),
                         seconds=round(seconds, 1))
    status = summary.get("status")
    if status == "stopped":
        base.status = "stopped"
        base.reason = f"resume with: autokernel optimize --headless --resume {session.session_id}"
        if getattr(session.config, "api_base", None):  # the agent's server is not resumed without it
            base.reason += " --api-base URL"
        return base
    if status == "failed":
        errors = [e for e in session.store.iter_events(session.session_id) if isinstance(e, ev.ErrorEvent)]
        base.reason = f"{errors[-1].where}: {errors[-1].message}" if errors else "the session failed"
        fit = no_fit(errors[-1].message, getattr(session.config, "device", "")) if errors else ""
        if fit:
            base.status, base.reason = "no-fit", fit
        return base
    if not state.targets:
        rows = state.profile.rows if state.profile else []
        base.status = "skipped"
        unseeded = _seed_failure(session)
        if unseeded:
            base.reason = f"{unseeded} (profile: {_top_rows(rows) or 'empty'})"
            return base
        base.reason = (f"nothing the {agent} agent can target: no operation of a kernel type autokernel "
                       f"knows (profile: {_top_rows(rows) or 'empty'})"
                       + ("; an LLM agent (--agent MODEL) writes the whole ModelNew" if agent == "playbook" else ""))
        return base
    integ = state.integration
    if integ is not None and integ.detail.startswith(NO_FIT):
        base.status, base.reason = "no-fit", integ.detail
        return base
    if not any(t.best for t in state.targets.values()):  # no target got a kernel: the search says why
        verdict = _target_verdict(session)
        if verdict:
            base.status, base.reason = verdict
            return base
    whole = state.targets.get(PROBLEM_TARGET)
    if whole is not None and whole.best is None and not any(t.best for t in state.targets.values()):
        written = sorted(whole.candidates.values(), key=lambda c: c.experiment)
        fit = no_fit(written[-1].failure, getattr(session.config, "device", "")) if written else ""
        # the last ModelNew ran out of memory: the machine's limit, not a wrong answer
        base.status = "no-fit" if fit else "incorrect"
        base.reason = f"{fit}: {_unsolved(whole, agent)}" if fit else _unsolved(whole, agent)
        return base
    if integ is None:
        base.reason = "the session ended without checking ModelNew"
        return base
    if not integ.detail.startswith(CHECK_DONE):  # the check itself did not run to the end: our failure
        base.reason = integ.detail
        return base
    base.status = "correct" if integ.correct else "incorrect"
    base.speedup_eager = integ.speedup_eager or None
    base.speedup_compile = integ.speedup_compile
    base.model_ms, base.eager_ms, base.compile_ms = integ.model_ms, integ.eager_ms, integ.compile_ms
    base.meaningful = integ.meaningful
    base.kernels = [r["kind"] for r in integ.replaced if r.get("calls")]
    m = re.search(r"ModelNew: (.+?\.py)(?:;|$)", integ.detail)  # the check names the file it ran
    base.model_new = m.group(1) if m else None
    if integ.correct and not base.kernels:
        # ModelNew runs the very code of Model: exactly 1x eager by definition (the two timings of the same
        # code differ only by noise), and not a submission: counted apart, never as correct.
        base.status = "no-kernel"
        base.reason = "no kept kernel was used: ModelNew is the original Model"
        base.model_ms, base.speedup_eager = integ.eager_ms, 1.0
        if integ.compile_ms and integ.eager_ms:
            base.speedup_compile = integ.compile_ms / integ.eager_ms
    elif not integ.correct:
        base.reason = integ.detail
    return base


def _target_verdict(session: Any) -> tuple[str, str] | None:
    """("untimed" | "no-fit", the search's line) when a target ended so, else None: the search logs
    "<target>: starter could not be timed: ..." or "<target>: does not fit on this ..."."""
    store = getattr(session, "store", None)
    if store is None or not session.session_id:
        return None
    for e in store.iter_events(session.session_id):
        if isinstance(e, ev.Log):
            line = e.message.split(": ", 1)[-1]
            if line.startswith(UNTIMED):
                return "untimed", line
            if line.startswith(NO_FIT):
                return "no-fit", line
    return None


def _seed_failure(session: Any) -> str:
    """The last "Inductor could not seed it" line the session logged ("" when there is none)."""
    from .session import SEED_FAILED

    store = getattr(session, "store", None)
    if store is None or not session.session_id:
        return ""
    logs = [e.message for e in store.iter_events(session.session_id)
            if isinstance(e, ev.Log) and e.message.startswith(SEED_FAILED)]
    return logs[-1].removeprefix("skipped: ") if logs else ""  # the status already says skipped


def _unsolved(target: Any, agent: str) -> str:
    """Why a whole-problem target has no solution: what the agent wrote, and how the last of it failed."""
    written = sorted(target.candidates.values(), key=lambda c: c.experiment)
    if not written:
        return f"the {agent} agent wrote no ModelNew (the search ended: {target.done or 'unfinished'})"
    last = written[-1]
    return (f"none of the {len(written)} ModelNew the {agent} agent wrote passed the checks; the last "
            f"({last.candidate_id}) failed {last.failure or 'unfinished'}")


# -- running one problem ---------------------------------------------------------------------------
def session_config(problem: Problem, config: BatchConfig, resume: str | None) -> Any:
    """The optimize session of `problem` in a batch of `config` (resuming session `resume`, if given)."""
    from .session import SessionConfig

    return SessionConfig(model_path=str(problem.path), device=config.device, agent=config.agent,
                         max_experiments=config.max_experiments, size=config.size, api_base=config.api_base,
                         integration="kernelbench", resume=resume, workers=config.workers, ray=config.ray)


def run_problem(problem: Problem, config: BatchConfig, make_session: Callable[[], Any],
                hold: Callable[[Any], None]) -> ProblemResult:
    """Problem's optimize session run to its end, as its row: the one code of the batch's own process and of
    a lane's child (engine/kernelbench_lanes.py). `make_session()` builds it; `hold(session)` is told of it
    before it runs and `hold(None)` after, so that a stop reaches the session under way."""
    t0 = time.monotonic()
    session, failure = None, None
    try:
        session = make_session()
        hold(session)
        session.run()
    except UserError as e:  # the problem file does not load: the problem is skipped, the batch goes on
        failure = ("skipped", f"the problem does not load: {e}")
    except Exception as e:  # the tool's own failure on this problem; the batch goes on
        fit = no_fit(e, config.device)
        failure = ("no-fit", fit) if fit else ("error", f"{type(e).__name__}: {e}")
    finally:
        hold(None)
    return problem_row(problem, config, session, failure, time.monotonic() - t0)


def problem_row(problem: Problem, config: BatchConfig, session: Any, failure: tuple[str, str] | None,
                seconds: float) -> ProblemResult:
    """The row of a problem whose session ended (`failure`: the status and reason of one that raised)."""
    if failure is None:
        result = result_from_session(problem, session, config.agent, seconds)
    else:
        result = ProblemResult(name=problem.name, path=str(problem.path), status=failure[0], reason=failure[1],
                               session_id=getattr(session, "session_id", None), seconds=round(seconds, 1))
    if result.model_ms is None:  # not timed: the device says what its times would mean
        result.meaningful = config.device == "cuda"
    return result


# -- the batch -----------------------------------------------------------------------------------
@dataclass
class BatchConfig:
    device: str  # cpu | cuda, already resolved
    agent: str = "playbook"
    max_experiments: int | None = 20  # per problem
    size: str | None = None  # small | large, for problem files that read AUTOKERNEL_MODEL_SIZE
    api_base: str | None = None
    command: str = ""  # how the batch was started, kept with its score
    workers: str | int | None = None  # --workers and --ray of each problem's session (engine/pool.py)
    ray: str | None = None
    # Problems side by side, each in a process of its own with one GPU (engine/kernelbench_lanes.py); only the
    # CLI asks for more than one, so the TUI's live batch keeps the in-process path its controls steer.
    lanes: int = 1
    verbose: bool = False  # with lanes: each child prints its problem's experiments (in-process, listeners do)
    # The next problems' Inductor seeds made while a problem runs (engine/seed_prefetch.py); None: where the
    # playbook agent tunes seeds beside a GPU.
    prefetch_seeds: bool | None = None

    def seeds_ahead(self) -> bool:
        if self.prefetch_seeds is not None:
            return self.prefetch_seeds
        return self.agent == "playbook" and self.device == "cuda"

    def seed_size(self) -> str:
        """The size each problem's session seeds at (engine/session.py)."""
        from .model_loading import default_size

        return self.size or default_size(self.device)


class KernelBenchBatch:
    """Runs the problems one after another in this process (one optimize session each); `stop()` from any
    thread stops the current problem's session cleanly and runs no further problem. It is steered like an
    `OptimizeSession` (pause, resume, skip_target, approve, ...): each control reaches the problem
    under way, so the TUI's live screen can drive a batch. `LaneBatch` (engine/kernelbench_lanes.py) runs
    several side by side instead, each in a process of its own."""

    def __init__(self, problems: list[Problem], config: BatchConfig, store: Store,
                 listeners: Iterable[Callable[[ev.Event], None]] = (),
                 on_start: Callable[[int, Problem], None] | None = None,
                 on_result: Callable[[int, ProblemResult], None] | None = None,
                 session_factory: Callable[..., Any] | None = None):
        """`listeners` get every event of every problem's session; `on_start(i, problem)` and
        `on_result(i, result)` mark each problem's beginning and end; `session_factory(config, store,
        listeners)` replaces OptimizeSession (tests)."""
        self.problems = list(problems)
        self.config = config
        self.store = store
        self.listeners = list(listeners)
        self.on_start, self.on_result = on_start, on_result
        self.session_factory = session_factory
        self.rows: dict[int, ProblemResult] = {}  # problem index -> its row, as problems end (in any order)
        self.recorded: dict[int, ProblemResult] = {}  # rows an earlier run recorded after an unfinished problem
        self.current: Any = None
        self.index: int | None = None  # the problem under way
        self.batch_id: str | None = None
        self.sessions: dict[int, str] = {}  # problem index -> its optimize session (a resumed batch: to resume)
        self._recorder: Recorder | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the session under way
        self._recording = threading.RLock()  # the batch's events and callbacks (a lane batch: several threads)
        self._ahead = SeedPrefetch(config.seed_size()) if config.seeds_ahead() else None

    @classmethod
    def resuming(cls, stored: Any, store: Store, **kw: Any) -> "KernelBenchBatch":
        """The batch `stored` (a `StoredBatch` from `load_batch`) goes on: its finished problems are kept,
        the one cut mid-way resumes from its own session, the rest run; `run()` appends to its session."""
        batch = cls(stored.problems, stored.config, store, **kw)
        batch.batch_id = stored.batch_id
        batch.rows = dict(enumerate(stored.kept))
        batch.recorded = dict(stored.finished_after)
        batch.sessions = dict(stored.sessions)
        return batch

    @property
    def results(self) -> list[ProblemResult]:
        """The rows so far, in the order the problems were given."""
        return [self.rows[i] for i in sorted(self.rows)]

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        self._forward("stop")

    # -- the controls of the problem under way (nothing happens between two problems) --------------
    def _forward(self, control: str, *args: Any) -> Any:
        with self._lock:
            session = self.current
        return getattr(session, control)(*args) if session is not None else None

    def pause(self) -> None:
        self._forward("pause")

    def resume(self) -> None:
        self._forward("resume")

    def skip_target(self) -> None:
        self._forward("skip_target")

    def set_approval(self, mode: str) -> None:
        self._forward("set_approval", mode)

    def approve(self, candidate_id: str) -> bool:
        return bool(self._forward("approve", candidate_id))

    def reject(self, candidate_id: str) -> bool:
        return bool(self._forward("reject", candidate_id))

    @property
    def pending_approval(self) -> dict | None:
        return getattr(self.current, "pending_approval", None)

    @property
    def paused(self) -> bool:
        return bool(getattr(self.current, "paused", False))

    @property
    def session_id(self) -> str | None:
        """The batch's own session (kind `kernelbench`)."""
        return self.batch_id

    @property
    def lanes(self) -> int:
        """How many problems run at once."""
        return 1

    def run(self) -> dict[str, Any]:
        """Run every problem not finished yet (until stopped); returns the report (also the batch
        session's summary)."""
        recorder = self._recorder = self._open()
        status = "completed"
        try:
            self._run_problems()
            if self.stopped:
                status = "stopped"
        except BaseException:
            status = "failed"
            raise
        finally:
            if self._ahead is not None:
                self._ahead.close()
            self.index = None
            report = self.report()
            recorder.emit(ev.SessionDone(status=status, summary=report))
            self.store.finish_session(self.batch_id, status, report)
        return report

    def _run_problems(self) -> None:
        """Each unfinished problem in turn, in this process."""
        for i, problem in enumerate(self.problems):
            if i in self.rows:
                continue
            if self.stopped:
                break
            self.index = i
            self._started(i)
            self._record(i, self._run_one(i, problem))

    def _started(self, i: int) -> None:
        if self._ahead is not None:  # the problems to start next, as many as run at once
            after = [p.path for k, p in enumerate(self.problems) if k > i and k not in self.rows]
            self._ahead.ask(after[:self.lanes])
        if self.on_start:
            with self._recording:
                self.on_start(i, self.problems[i])

    def _record(self, i: int, result: ProblemResult) -> None:
        """Problem `i` ended: its row, in the batch's events and for the caller."""
        with self._recording:
            self.rows[i] = result
            self._recorder.emit(ev.ProblemDone(index=i, result=result.to_json()))
            self._recorder.emit(ev.Log(level="info", message=f"{result.name}: {result.status}"
                                       + (f" (session {result.session_id})" if result.session_id else "")
                                       + (f": {result.reason}" if result.reason else "")))
            if self.on_result:
                self.on_result(i, result)

    def _link(self, i: int, session_id: str) -> None:
        """Record, once, which session problem `i` got (a resume finds it by this)."""
        with self._recording:
            if self.sessions.get(i) == session_id:
                return
            self.sessions[i] = session_id
            problem = self.problems[i]
            self._recorder.emit(ev.ProblemStarted(index=i, name=problem.name, path=str(problem.path),
                                                  session_id=session_id))

    def _open(self) -> Recorder:
        """Create the batch's session, or reopen the stored one this batch resumes."""
        cfg = self.config
        if self.batch_id is not None:
            self.store.reopen_session(self.batch_id)
            recorder = Recorder(self.store, self.batch_id)
            recorder.emit(ev.ControlChanged(action="resume_session", value=self.batch_id))
            cut = {self.problems[i].name: sid for i, sid in self.sessions.items()
                   if i not in self.rows and i not in self.recorded}
            finished = len(self.rows) + len(self.recorded)
            recorder.emit(ev.Log(level="info", message=(
                f"resumed batch {self.batch_id}: {finished} of {len(self.problems)} problems finished"
                + "".join(f"; {name} resumes session {sid}" for name, sid in cut.items()))))
            return recorder
        from .devices import device_name

        started = ev.SessionStarted(kind="kernelbench", model=" ".join(str(p.path) for p in self.problems),
                                    device=cfg.device, device_name=device_name(cfg.device), agent=cfg.agent,
                                    config={"problems": [str(p.path) for p in self.problems],
                                            "names": [p.name for p in self.problems], "device": cfg.device,
                                            "agent": cfg.agent, "max_experiments_per_problem": cfg.max_experiments,
                                            "size": cfg.size, "api_base": _stored_url(cfg.api_base),
                                            "command": cfg.command})
        self.batch_id = self.store.create_session(started)
        return Recorder(self.store, self.batch_id)

    def _linker(self, i: int) -> Callable[[ev.Event], None]:
        """A listener that records, as soon as problem `i`'s session exists, which session it is."""
        def link(e: ev.Event) -> None:
            sid = getattr(self.current, "session_id", None)
            if isinstance(e, ev.SessionStarted) and e.kind == "optimize" and sid:
                self._link(i, sid)
        return link

    def _make_session(self, i: int, problem: Problem) -> Any:
        from .session import OptimizeSession

        config = session_config(problem, self.config, self.sessions.get(i))
        listeners = [self._linker(i), *self.listeners]
        if self.session_factory is not None:
            return self.session_factory(config, self.store, listeners)
        return OptimizeSession(config, self.store, listeners=listeners)

    def _hold(self, session: Any) -> None:
        """The session under way (None: none), which the controls reach."""
        with self._lock:
            self.current = session
        if session is not None and self.stopped:  # stopped while it was being made: it stops at its first checkpoint
            session.stop()

    def _run_one(self, i: int, problem: Problem) -> ProblemResult:
        finished = self.finished_before(i)
        if finished is not None:
            return finished
        return run_problem(problem, self.config, lambda: self._make_session(i, problem), self._hold)

    def finished_before(self, i: int) -> ProblemResult | None:
        """Problem `i`'s row if an earlier run of this batch finished it, else None: read, never run again.
        Either that run recorded it after a problem left unfinished (side by side, problems end in any
        order), or its session completed but the batch died before recording its row."""
        if i in self.recorded:
            return self.recorded[i]
        sid = self.sessions.get(i)
        if sid is None or self.store.session(sid)["status"] != "completed":
            return None
        t0 = time.monotonic()
        return problem_row(self.problems[i], self.config, stored_session(self.store, sid), None,
                           time.monotonic() - t0)

    def report(self) -> dict[str, Any]:
        """The score: every problem's row and fast_p over the problems that finished."""
        finished = [r for r in self.results if r.status != "stopped"]
        return {
            "problems": [r.to_json() for r in self.results],
            "fast_p": fast_p(finished),
            "fast_1_ties": ties(finished),
            "statuses": status_counts(r.status for r in self.results),
            "counted": len(finished),
            "total": len(self.problems),
            "complete": len(finished) == len(self.problems),
            "meaningful": self.config.device == "cuda" and all(r.meaningful for r in finished),
            "device": self.config.device,
            "agent": self.config.agent,
            "max_experiments_per_problem": self.config.max_experiments,
            "lanes": self.lanes,  # problems run at once (engine/kernelbench_lanes.py)
            "batch_session": self.batch_id,
            "command": self.config.command,
            "api_base": _stored_url(self.config.api_base),  # a resume needs it given again
        }
