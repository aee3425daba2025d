"""One optimize session: profile, search each bottleneck in Amdahl order, integrate, finish.

With several workers the next bottleneck's search starts whenever the open ones leave a worker free
(engine/target_scheduler.py); with one they run one after the other.

`OptimizeSession.run()` blocks (the TUI runs it on a thread) and is steered from any thread through
`pause/resume/stop/skip_target/set_approval/approve/reject`. Every state change is an event written
to the store before anyone sees it; `SessionConfig(resume=ID)` folds a stopped or crashed session's
events back into the loop's state and goes on appending to the same session.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from . import events as ev
from .control import APPROVAL_MODES, LoopControl
from .devices import device_name as describe_device
from .devices import resolve_device
from .errors import UserError
from .integrate import INTEGRATION_MODES
from .model_file import check_model_file
from .problem_spec import PROBLEM_TARGET, problem_brief
from .routing import mark_routes, routable, routed_calls
from .sandbox import allow_read
from .search import SearchContext, SearchLimits, StopLoop, TargetSearch, search_failed
from .search_state import SearchState, slower_than_eager
from .seeding import seed_variants
from .store import Recorder, Store, StoreWriteError
from .target_scheduler import TargetScheduler
from .whole_problem import FALLBACK, choose_route, fallback_not_needed, fallback_reserve, with_whole_target

SEED_FAILED = "skipped: no kernel type, and Inductor could not seed it: "  # a Log's prefix; the rest is why
SEED_CACHED = "Inductor's seed of this problem came from the seed cache (the same file, size and versions)"

DTYPE_ALIASES = {
    "float32": "fp32", "torch.float32": "fp32", "float": "fp32", "fp32": "fp32",
    "float16": "fp16", "torch.float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "torch.bfloat16": "bf16", "bf16": "bf16",
}


def _sandbox_line(device: str) -> str:
    from .sandbox import probe, summary

    return summary(probe(device))


def cache_dir() -> Path:
    return Path(os.environ.get("AUTOKERNEL_CACHE_DIR") or Path.home() / ".cache" / "autokernel").expanduser()


def session_dir(session_id: str) -> Path:
    """A session's files: its candidates, and under `integration/` what the integration wrote."""
    return cache_dir() / "sessions" / session_id


@dataclass
class SessionConfig:
    """How a session runs. Limits left at None are unbounded (the TUI's Ctrl-C or `stop` ends it)."""

    model_path: str | None = None  # None: the bundled Llama example
    device: str | None = None  # cpu | cuda | None (cuda when torch sees one)
    agent: str = "playbook"  # playbook, or a litellm model string
    approval: str | None = None  # auto | ask; None: auto, or on resume the mode the session was last in
    max_experiments: int | None = None
    budget_s: float | None = None
    max_cost_usd: float | None = None
    size: str | None = None  # small | large: the example's size
    resume: str | None = None  # a session id (or prefix, or `latest`) to continue
    backend: str = "triton"
    plateau: int = 30  # the playbook walks six tiers, two ideas of up to three variants each, before it repeats
    stop_at_ceiling: float | None = 0.95  # a target whose best reaches this fraction of the ceiling is done
    seeds: int = 2
    max_ideas: int = 3
    max_variants: int = 3
    integrate: bool = True
    integrate_timeout_s: float = 900.0
    integration: str = "model"  # model | kernelbench: how the kept kernels are checked and timed (integrate.py)
    hint: str = ""
    # An OpenAI-compatible server for the LLM agent. Stored only without user:password and query (where keys
    # ride), to name it when a resume forgets it: the agent would otherwise ask the provider's default server.
    api_base: str | None = None
    workers: str | int | None = None  # N | auto (None): one worker per visible GPU, 1 on the CPU (engine/pool.py)
    ray: str | None = None  # a Ray address (auto, local, ray://...): the workers are Ray actors there

    def limits(self) -> SearchLimits:
        return SearchLimits(max_experiments=self.max_experiments, budget_s=self.budget_s,
                            max_cost_usd=self.max_cost_usd, plateau=self.plateau, seeds=self.seeds,
                            stop_at_ceiling=self.stop_at_ceiling,
                            max_ideas=self.max_ideas, max_variants=self.max_variants)

    def validate(self) -> None:
        if self.approval is not None and self.approval not in APPROVAL_MODES:
            raise UserError(f"--approval must be auto or ask, not {self.approval!r}")
        for name in ("max_experiments", "budget_s", "max_cost_usd"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise UserError(f"{name.replace('_', '-')} must be positive, not {v}")
        if self.integration not in INTEGRATION_MODES:
            raise UserError(f"integration must be one of {', '.join(INTEGRATION_MODES)}, not {self.integration!r}")
        if self.model_path is not None:
            check_model_file(self.model_path)


def _stored_url(url: str | None) -> str | None:
    """`url` as the store may keep it: no user:password, no query."""
    if not url:
        return None
    from .agents.llm import redact_url

    return redact_url(url)


def resumed_approval(store: Store, ref: str) -> str:
    """The approval mode a resume without --approval runs in: the one the session was last in (a headless
    resume must know before it starts whether someone will be asked)."""
    sid = store.session(ref, kind="optimize")["id"]
    return SearchState.from_events(sid, store.iter_events(sid)).approval


def make_agent(name: str, api_base: str | None = None) -> Any:
    """The offline playbook agent, or the LLM agent for any other string (imported lazily)."""
    if name == "playbook":
        from .agents.playbook import PlaybookAgent

        return PlaybookAgent()
    try:
        from .agents.llm import LLMAgent
    except ImportError as e:
        raise UserError(f"the LLM agent is not available ({e}); use --agent playbook") from e
    return LLMAgent(model=name, api_base=api_base)


def row_dict(row: Any) -> dict[str, Any]:
    """A profile row as the JSON dict the events carry."""
    if isinstance(row, dict):
        return dict(row)
    if hasattr(row, "to_json"):
        return dict(row.to_json())
    if is_dataclass(row):
        return asdict(row)
    return dict(vars(row))


def dtype_name(value: Any) -> str:
    return DTYPE_ALIASES.get(str(value), str(value)) if value is not None else "fp32"


def plan_targets(rows: list[dict], backend: str, log: Callable[[str], None], device: str = "cuda",
                 others: list[int] | None = None) -> list[dict]:
    """Profile rows (already in Amdahl order) that become targets: one per kernel type with a spec
    and a starter that can run here (CUDA C++ starters need a GPU). Rows of no kernel type are listed
    in `others` (their indices) when it is given, for subgraph targets; else they are logged as skipped."""
    from autokernel.kernels import available, get_spec

    known = set(available())
    plan, seen, unknown = [], set(), {}
    for i, row in enumerate(rows):
        kind = row.get("kind")
        if kind in seen:
            continue
        if kind not in known:
            if others is not None:
                others.append(i)
            else:
                unknown.setdefault(kind, []).append(str(row.get("name", kind)))
            continue
        if not row.get("target_shape"):
            log(f"skipping {row.get('name', kind)!s}: the profiler found no target shape")
            continue
        spec = get_spec(kind)
        runnable = [b for b in spec.backends if device == "cuda" or b != "cuda"]
        use = backend if backend in runnable else (runnable[0] if runnable else None)
        if use is None:
            log(f"skipping {kind}: no starter kernel that runs on {device}")
            continue
        seen.add(kind)
        plan.append({"kind": kind, "row": i, "shape": dict(row["target_shape"]),
                     "dtype": dtype_name(row.get("target_dtype")), "backend": use})
    for kind, names in unknown.items():
        log(f"skipping {len(names)} row(s) of kind {kind!r} (no kernel spec): {', '.join(names[:6])}"
            + (" ..." if len(names) > 6 else ""))
    return plan


def problem_target(rows: list[dict], backend: str, device: str) -> dict:
    """The plan entry of a whole-problem target: the problem's own inputs (no shape), the top row's dtype."""
    return {"kind": PROBLEM_TARGET, "row": 0, "shape": {},
            "dtype": dtype_name(rows[0].get("target_dtype")) if rows and rows[0].get("target_dtype") else "fp32",
            "backend": backend if backend == "triton" or device == "cuda" else "triton"}


class OptimizeSession:
    """See the module docstring. Construct, then `run()`; controls are safe from any thread."""

    def __init__(self, config: SessionConfig, store: Store, listeners: Iterable[Callable[[ev.Event], None]] = (),
                 *, agent: Any = None, worker: Any = None, profiler: Callable[[str, str, str | None], Any] | None = None):
        """`agent`, `worker` and `profiler` replace the real ones (tests, embedding): `profiler(model_path,
        device, size)` returns an object with `device`, `total_ms` and `rows` like `profile_model`."""
        config.validate()
        self._agent, self._worker, self._profiler = agent, worker, profiler
        self.config = config
        self.store = store
        self.listeners = list(listeners)
        self.control = LoopControl(config.approval or "auto")
        self.session_id: str | None = None
        self.state: SearchState | None = None
        self.recorder: Recorder | None = None
        self.summary: dict[str, Any] = {}
        self.agent: Any = None
        self._seed_path: Path | None = None  # Inductor's seed of a whole problem, when the agent tunes seeds
        self._subgraphs: dict[str, dict] = {}  # subgraph targets' plan entries (problem, seed), by name

    # -- controls (any thread) -------------------------------------------------------------------
    def _control_event(self, action: str, value: str = "") -> None:
        self.control.note(action, value)  # emitted by the loop thread at its next checkpoint

    def pause(self) -> None:
        self.control.pause()
        self._control_event("pause")

    def resume(self) -> None:
        self.control.resume()
        self._control_event("resume")

    def stop(self) -> None:
        self.control.stop()
        cancel = getattr(self.agent, "cancel", None)  # an LLM agent waiting out a retry gives up at once
        if callable(cancel):
            cancel()
        self._control_event("stop")

    def skip_target(self) -> None:
        self.control.skip_target()
        self._control_event("skip_target")

    def set_approval(self, mode: str) -> None:
        self.control.set_approval(mode)
        self._control_event("approval", mode)

    def approve(self, candidate_id: str) -> bool:
        ok = self.control.decide(candidate_id, "approved")
        if ok:
            self._control_event("approve", candidate_id)
        return ok

    def reject(self, candidate_id: str) -> bool:
        ok = self.control.decide(candidate_id, "rejected")
        if ok:
            self._control_event("reject", candidate_id)
        return ok

    @property
    def pending_approval(self) -> dict | None:
        p = self.control.pending
        if p is None or p.verdict is not None:
            return None
        return {"candidate_id": p.candidate_id, "target": p.target, "speedup": p.speedup}

    @property
    def paused(self) -> bool:
        return self.control.paused

    # -- running ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run to the end (or until stopped); returns the summary also stored with the session."""
        t0 = time.monotonic()
        cfg = self.config
        if cfg.resume and not cfg.device:  # resume on the device the session ran on
            cfg.device = (self.store.session(cfg.resume, kind="optimize").get("config") or {}).get("device")
        device = resolve_device(cfg.device)
        self._open(device)
        assert self.recorder is not None and self.state is not None
        # the model the workers will be handed, though neither a resume's (stored) nor one given by code is
        # on this command line
        if self.config.model_path:
            allow_read(self.config.model_path)
        emit = self.recorder.emit
        emit(ev.Log(level="info", message=_sandbox_line(device)))  # which protections candidates run under here
        self.control.on_change = lambda action, value: emit(ev.ControlChanged(action=action, value=value))
        status = "completed"
        worker = None
        try:
            if self.state.profile is None:
                self._profile(device)
            plan = self._plan(emit, device)
            if not plan and self._whole_problem_allowed() and self._seeded_if_needed(emit, device):
                plan = [problem_target(self.state.profile.rows, cfg.backend, device)]
                if self.state.targets.get(PROBLEM_TARGET) is None:
                    how = ("the agent tunes Inductor's seed of" if self._seed_path
                           else "the agent writes")
                    emit(ev.Log(level="info", message=f"no operation of a known kernel type: {how} "
                                                      f"the whole ModelNew (target {PROBLEM_TARGET!r})"))
            elif plan and self._whole_problem_allowed():  # beside the kernel types: first, or as the fallback
                plan, placed = with_whole_target(plan, self.state.profile.rows,
                                                 problem_target(self.state.profile.rows, cfg.backend, device))
                emit(ev.Log(level="info", message=placed))
            if not plan:
                emit(ev.Log(level="warning", message="no profiled operation has a kernel spec: nothing to optimize"))
            todo = [p for p in plan if self.state.targets.get(p["kind"]) is None
                    or self.state.targets[p["kind"]].done is None]
            if todo:
                agent = self._agent if self._agent is not None else make_agent(self.agent_name, cfg.api_base)
                self.agent = agent
                if hasattr(agent, "on_note"):  # retries and re-asks of an LLM agent go to the log
                    agent.on_note = lambda line: emit(ev.Log(level="info", message=f"agent: {line}"))
                if self.control.stop_requested:
                    raise StopLoop()
                from .pool import WorkerPool, make_workers

                worker = WorkerPool(self._worker if self._worker is not None
                                    else make_workers(device, cfg.workers, cfg.ray),
                                    log=lambda m: emit(ev.Log(level="warning", message=m)))
                ctx = SearchContext(state=self.state, emit=emit, agent=agent, agent_name=self.agent_name,
                                    worker=worker, control=self.control, limits=cfg.limits(), device=device,
                                    device_name=self.device_name, workdir=session_dir(self.session_id),
                                    hint=cfg.hint, size=cfg.size)
                if any(p.get(FALLBACK) for p in todo):
                    ctx.reserve = lambda name: fallback_reserve(self.state.targets, self.state.experiments,
                                                                cfg.max_experiments, name)
                TargetScheduler(self._searches(self._walk(todo, ctx, emit, device), ctx, emit),
                                self.control).run(worker)
                worker.close()
                worker = None
            if self.control.stop_requested:
                raise StopLoop()
            if cfg.integrate and self.state.integration is None:
                self._integrate(device)
        except (StopLoop, KeyboardInterrupt):
            status = "stopped"
        except StoreWriteError as e:  # nothing more can be written: the session stays resumable as it is
            raise self._unwritable(e) from e
        except UserError:
            status = "failed"
            self._finish(status, t0)
            raise
        except Exception as e:
            status = "failed"
            emit(ev.ErrorEvent(where="session", message=f"{type(e).__name__}: {e}"))
        finally:
            if worker is not None:
                try:
                    worker.close()
                except Exception:
                    pass
        self._finish(status, t0)
        return self.summary

    def _plan(self, emit: Callable[[ev.Event], Any], device: str) -> list[dict]:
        """The targets in Amdahl order: a kernel type's top row the patch can route, and (in an ordinary
        session, for an agent that tunes seeds) a placeholder where the first row of no kernel type is,
        which `_walk` turns into subgraph targets (engine/subgraph_targets.py)."""
        cfg, rows = self.config, self.state.profile.rows
        log = lambda m: emit(ev.Log(level="info", message=m))  # noqa: E731
        others: list[int] | None = [] if cfg.integration == "model" and self._tunes_seeds() else None
        plan = routable(plan_targets(rows, cfg.backend, log, device, others), rows, log)
        if others:
            plan = sorted(plan + [{"kind": "", "row": others[0], "others": others}], key=lambda p: p["row"])
        return plan

    def _walk(self, todo: list[dict], ctx: SearchContext, emit: Callable[[ev.Event], Any], device: str):
        """`todo` in order, the placeholder of rows of no kind replaced by their subgraph targets when the walk
        reaches it with budget left (capturing the model and seeding take seconds to minutes on a CPU, so
        a session whose budget ends earlier pays nothing for them); each is seeded as it is reached. With the
        budget spent nothing new is opened, but the walk goes on: a target after it may hold an experiment a
        stop or a crash cut, which its search finishes before it ends."""
        from . import subgraph_targets

        queue = list(todo)
        folder = session_dir(self.session_id) / "subgraphs"
        log = lambda m: emit(ev.Log(level="info", message=m))  # noqa: E731
        planned = {q.get("kind") for q in todo}
        while queue:
            p = queue.pop(0)
            if "others" in p:
                # subgraph targets an earlier run started are only known from the placeholder's plan
                started = any(t.done is None and name not in planned for name, t in self.state.targets.items())
                if ctx.budget_reason() and not started:
                    continue
                try:
                    subs = subgraph_targets.plan_subgraphs(self.config.model_path, device, self.config.size,
                                                           self.state.profile.rows, p["others"], folder, log,
                                                           dtype_name)
                except Exception as e:  # these targets are lost, never the session's kernel-type targets
                    emit(ev.ErrorEvent(where="subgraph targets", message=f"{type(e).__name__}: {e}"))
                    subs = []
                self._subgraphs = {s["kind"]: s for s in subs}
                fresh = [s for s in subs if self.state.targets.get(s["kind"]) is None
                         or self.state.targets[s["kind"]].done is None]
                queue = sorted(queue + fresh, key=lambda e: e["row"])
                continue
            if p["kind"] == PROBLEM_TARGET and self.state.targets.get(PROBLEM_TARGET) is None:
                if ctx.budget_reason():
                    continue
                why = fallback_not_needed(self.state.targets) if p.get(FALLBACK) else ""
                if why:
                    log(f"whole-problem target left out: {why}")
                    continue
                if not self._seeded_if_needed(emit, device, beside_kernels=True):
                    continue
            sub = self._subgraphs.get(p["kind"])
            if sub is not None and self.state.targets.get(p["kind"]) is None:
                if ctx.budget_reason():
                    continue
                if not subgraph_targets.seed(sub, folder, self.config.size, device, log):
                    continue
            yield p

    def _searches(self, walk: Iterator[dict], ctx: SearchContext, emit: Callable[[ev.Event], Any]) -> Iterator[TargetSearch]:
        """The walk's targets as searches, each started (TargetStarted) as the scheduler reaches it; none is
        started once the budget is spent (the targets already started still are searched: the walk's doc).
        A search that cannot be made ends its target as failed."""
        for p in walk:
            target = self.state.targets.get(p["kind"])
            if target is None:
                if ctx.budget_reason():
                    continue
                rows = self.state.profile.rows
                emit(ev.TargetStarted(target=p["kind"], row=p["row"], shape=p["shape"], dtype=p["dtype"],
                                      backend=p["backend"], baseline={"profile_row": rows[p["row"]] if rows else None}))
                target = self.state.targets[p["kind"]]
            try:
                search = self._search(ctx, target)
            except (StopLoop, StoreWriteError):
                raise
            except Exception as e:  # one target's failure is logged; the others still run
                search_failed(ctx, target, e)
                continue
            yield search

    def _search(self, ctx: SearchContext, target: Any) -> TargetSearch:
        sub = self._subgraphs.get(target.name)
        if sub is None:
            return TargetSearch(ctx, target, self._spec_of(target.name))
        from .subgraph_targets import SubgraphSearch

        brief = replace(problem_brief(sub["problem"]), name=target.name, starters={"triton": sub["seed"]},
                        seed_variants=seed_variants(sub["seed"]),
                        summary=f"nodes {sub['nodes']} of the model as a problem, starting from Inductor's seed")
        return SubgraphSearch(ctx, target, brief, sub["problem"])

    def _whole_problem_allowed(self) -> bool:
        """A KernelBench problem with nothing of a known kernel type is one target for an agent that
        writes whole ModelNew files (the LLM agent) or one that tunes an Inductor seed's knobs (the
        playbook agent); any other agent leaves it skipped."""
        if self.config.integration != "kernelbench":
            return False
        return self._writes_whole() or self._tunes_seeds()

    def _writes_whole(self) -> bool:
        if self._agent is not None:
            return bool(getattr(self._agent, "whole_problems", False))
        return self.agent_name != "playbook"

    def _tunes_seeds(self) -> bool:
        if self._agent is not None:
            return bool(getattr(self._agent, "tunes_seeds", False))
        return True  # both agents `make_agent` builds (playbook and LLM) work from Inductor's seed

    @property
    def _seed_file(self) -> Path:
        """Where the whole problem's Inductor seed is written (its variants beside it)."""
        return session_dir(self.session_id) / "inductor_seed.py"

    def _seeded_if_needed(self, emit: Callable[[ev.Event], Any], device: str, beside_kernels: bool = False) -> bool:
        """Whether the whole-problem target can go ahead: an agent that writes ModelNew needs nothing; one
        that tunes seeds needs Inductor's seed (made in a subprocess), unless a resumed target already has
        its starter. A failed seed is logged (`SEED_FAILED`, read back as the skip's reason). The seed is made
        at the size the worker builds the problem at (its shapes are baked into the kernels)."""
        if self._writes_whole() or self._seed_path is not None:
            return True
        target = self.state.targets.get(PROBLEM_TARGET)
        if target is not None and target.starter is not None:
            return True
        from .model_loading import default_size
        from .seeding import seed_problem

        emit(ev.Log(level="info", message=("asking" if beside_kernels else "no operation of a known kernel type: asking")
                                          + " Inductor for a seed of the whole problem"))
        path, why = seed_problem(self.config.model_path, self._seed_file, self.config.size or default_size(device),
                                 on_cached=lambda: emit(ev.Log(level="info", message=SEED_CACHED)))
        if path is None:  # beside kernel-type targets it is only this target that is lost, not the problem
            emit(ev.Log(level="warning", message=(f"whole-problem target left out: Inductor could not seed it: {why}"
                                                  if beside_kernels else f"{SEED_FAILED}{why}")))
            return False
        self._seed_path = path
        return True

    def _spec_of(self, name: str) -> Any:
        if name == PROBLEM_TARGET:
            brief = problem_brief(self.config.model_path)
            if self._seed_path is not None:  # the seed is the starter the search checks and times first
                brief = replace(brief, starters={"triton": str(self._seed_path)},
                                summary=f"{brief.summary}, starting from Inductor's seed")
            return replace(brief, seed_variants=seed_variants(self._seed_file))  # a resumed session's too
        from autokernel.kernels import get_spec

        return get_spec(name)

    @property
    def agent_name(self) -> str:
        started = self.state.started if self.state else None
        return (started.agent if started and started.agent else None) or self.config.agent

    @property
    def device_name(self) -> str:
        started = self.state.started if self.state else None
        return started.device_name if started else ""

    def _open(self, device: str) -> None:
        """Create the session row, or reopen the one being resumed and fold its events."""
        cfg = self.config
        listeners_first = []
        if cfg.resume:
            row = self.store.session(cfg.resume, kind="optimize")  # `latest`: the newest optimize session
            if row["kind"] != "optimize":
                hint = f" (continue it with: autokernel kernelbench --resume {row['id']})" if row["kind"] == "kernelbench" else ""
                raise UserError(f"session {row['id']} is a {row['kind']} session, not an optimize session{hint}")
            if row["status"] == "running":
                raise UserError(f"session {row['id']} is still running (pid {row.get('pid')})")
            sid = row["id"]
            past = list(self.store.iter_events(sid))
            self.state = SearchState.from_events(sid, past)
            stored = dict(row["config"] or {})
            for key in ("model_path", "size", "backend", "agent", "integration"):
                if stored.get(key) is not None:
                    setattr(cfg, key, stored[key])
            for key in ("max_experiments", "budget_s", "max_cost_usd"):  # limits not given again: the stored ones
                if getattr(cfg, key) is None and stored.get(key) is not None:
                    setattr(cfg, key, stored[key])
            if stored.get("device") and stored["device"] != device:
                raise UserError(f"session {sid} ran on {stored['device']}; resume it with --device {stored['device']}")
            if stored.get("api_base") and not cfg.api_base:
                raise UserError(f"session {sid}'s agent asked the server at {stored['api_base']}; resume it with "
                                f"--api-base {stored['api_base']}")
            self.store.reopen_session(sid)
            self.session_id = sid
            self.recorder = Recorder(self.store, sid, [self.state.apply, *self.listeners])
            was = self.state.approval  # the mode it was last in (a key press lives only as an event)
            cfg.approval = cfg.approval or was
            self.control.approval = cfg.approval
            for listener in self.listeners:  # catch-up: listeners see the whole session, then what follows
                for e in past:
                    listener(e)
            self.recorder.emit(ev.ControlChanged(action="resume_session", value=sid))
            if cfg.approval != was:  # asked for another mode this time: the screens follow the engine
                self.recorder.emit(ev.ControlChanged(action="approval", value=cfg.approval))
            if self.state.skip_pending:  # a skip the stop got to first is taken now
                self.control.skip_target()
            for t in list(self.state.targets.values()):  # cut short by a budget: more budget, more search
                if t.done == "budget":
                    self.recorder.emit(ev.ControlChanged(action="reopen_target", value=t.name))
            self.recorder.emit(ev.Log(level="info", message=(
                f"resumed session {sid}: {self.state.experiments} experiments, "
                f"{sum(1 for t in self.state.targets.values() if t.done)} targets done")))
            return
        model_path = cfg.model_path or self._example_path()
        cfg.model_path = str(model_path)
        cfg.approval = cfg.approval or "auto"
        from .agents.llm import llm_timeout_s  # litellm itself is imported only when an agent is built

        started = ev.SessionStarted(
            kind="optimize", model=str(model_path), device=device, device_name=describe_device(device),
            agent=cfg.agent, approval=cfg.approval,
            config={"model_path": str(model_path), "device": device, "agent": cfg.agent, "approval": cfg.approval,
                    "max_experiments": cfg.max_experiments, "budget_s": cfg.budget_s,
                    "max_cost_usd": cfg.max_cost_usd, "size": cfg.size, "backend": cfg.backend,
                    "plateau": cfg.plateau, "stop_at_ceiling": cfg.stop_at_ceiling, "integration": cfg.integration, "api_base": _stored_url(cfg.api_base),
                    "llm_timeout_s": None if cfg.agent == "playbook" else llm_timeout_s()},
        )
        sid = self.store.create_session(started)
        self.session_id = sid
        self.state = SearchState(session_id=sid)
        self.state.apply(started)
        self.recorder = Recorder(self.store, sid, [self.state.apply, *listeners_first, *self.listeners])
        for listener in self.listeners:  # the first event was written with the row; show it too
            listener(started)

    @staticmethod
    def _example_path() -> Path:
        from .examples import example_path

        return Path(example_path("llama"))

    def _profile(self, device: str) -> None:
        routes = None
        if self._profiler is not None:
            result = self._profiler(self.config.model_path, device, self.config.size)
        else:
            from .model_loading import load_model
            from .profiling import profile_model

            loaded = load_model(self.config.model_path, device, size=self.config.size)
            result = profile_model(loaded)
            if self.config.integration == "kernelbench":  # plan only what the patch can route (engine/routing.py)
                routes = routed_calls(loaded.model, loaded.inputs)
            del loaded
            if device == "cuda":  # the model is gone: give its memory back to the worker and the integration
                import gc

                import torch

                gc.collect()
                torch.cuda.empty_cache()
        rows = mark_routes([row_dict(r) for r in result.rows], routes)
        self.recorder.emit(ev.ProfileReady(device=result.device, total_ms=float(result.total_ms), rows=rows))

    def _integrate(self, device: str) -> None:
        from .integrate import integrate_session_kernels

        kernelbench = self.config.integration == "kernelbench"
        # A ModelNew with no kernel of ours is the problem's Model: no submission at all. With none faster than
        # eager, the least slow best still makes one, correct (fast_0) though in no fast_p above it.
        use, left_out = self.state.to_integrate(at_least_one=kernelbench)
        if kernelbench:  # a whole ModelNew replaces the forward: it and the kernel types' kernels never mix
            use, why = choose_route(use, self.state.profile.rows if self.state.profile else [])
            if why:
                self.recorder.emit(ev.Log(level="info", message=why))
        for t, best in use:
            if slower_than_eager(best):
                x = (best.bench or {}).get("speedup_eager") or 0.0
                self.recorder.emit(ev.Log(level="info", message=f"no kept kernel is faster than eager: ModelNew runs "
                                                                f"{t.name}'s best ({best.candidate_id}, {x:.2f}x eager) "
                                                                f"so that it is a submission"))
        for why in left_out:
            self.recorder.emit(ev.Log(level="info", message=f"not swapping into the model: {why}"))
        kernels = [{"kind": t.name, "candidate_id": best.candidate_id, "source": best.source,
                    "dtype": t.dtype, "shape": t.shape, "backend": t.backend} for t, best in use]
        whole = self.state.targets.get(PROBLEM_TARGET)
        if kernelbench and whole is not None and whole.best is None and not kernels:
            # No ModelNew the agent wrote passed: the problem is unsolved (kernelbench.result_from_session);
            # the problem's own Model, checked against itself, would read as a solution.
            self.recorder.emit(ev.Log(level="info", message="no ModelNew passed its checks: nothing to check "
                                                            "the KernelBench way"))
            return
        if not kernels and not (kernelbench and self.state.targets):
            self.recorder.emit(ev.Log(level="info", message="no kept kernel to swap into the model"))
            return
        if not kernels:  # a KernelBench problem still gets its ModelNew (the Model as it is) checked and timed
            self.recorder.emit(ev.Log(level="info", message="no kept kernel: ModelNew is the problem's Model unchanged"))
        result = integrate_session_kernels(self.config.model_path, device, kernels,
                                           session_dir(self.session_id) / "integration", size=self.config.size,
                                           mode=self.config.integration, timeout_s=self.config.integrate_timeout_s,
                                           should_stop=lambda: self.control.stop_requested)
        if result is None:  # stopped: integration runs again on resume
            raise StopLoop()
        self.recorder.emit(result)

    def _finish(self, status: str, t0: float) -> None:
        if self.recorder is None or self.state is None:
            return
        self.control.drain()
        summary = self.state.summary()
        started = self.state.started
        summary.update({"status": status, "elapsed_s": round(time.monotonic() - t0, 2),
                        "session_span_s": round(time.time() - started.ts, 2) if started else None,
                        "device": started.device if started else "", "model": started.model if started else ""})
        self.summary = summary
        try:
            try:
                self.recorder.emit(ev.SessionDone(status=status, summary=summary))
            finally:
                self.store.finish_session(self.session_id, status, summary)
        except StoreWriteError as e:
            raise self._unwritable(e) from e

    def _unwritable(self, e: StoreWriteError) -> StoreWriteError:
        """The store's one line, and how the session goes on once the database can be written again: every
        event before the refused one is kept, and the session reads as interrupted (its process is gone)."""
        if not self.session_id:
            return e
        return StoreWriteError(f"{e}; the session is kept up to its last event: resume it with --resume "
                               f"{self.session_id} once the database can be written")
