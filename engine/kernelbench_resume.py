"""Reading a KernelBench batch back from the store, so that a batch killed or stopped part-way goes on.

The batch's session holds its problems and settings (its config), the session each problem got
(`ProblemStarted`, written as soon as that session exists) and each finished problem's row
(`ProblemDone`). `load_batch` turns them into what `KernelBenchBatch.resuming` needs: the rows to keep
(never run again, also those of problems that ended after one left unfinished, as problems run side by side
do) and the sessions to resume (through `OptimizeSession`'s own resume, so no experiment
is lost or repeated). It refuses, in one line, what cannot be resumed as it was started.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events as ev
from .errors import UserError
from .kernelbench import BatchConfig, Problem, ProblemResult
from .store import Store


@dataclass
class StoredBatch:
    batch_id: str
    problems: list[Problem]
    config: BatchConfig
    kept: list[ProblemResult] = field(default_factory=list)  # the finished problems, in order from the first
    sessions: dict[int, str] = field(default_factory=dict)  # problem index -> its session (those not finished: to resume)
    # finished after the first unfinished one (problems side by side end in any order): read back, never run again
    finished_after: dict[int, ProblemResult] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return len(self.kept) + len(self.finished_after)

    @property
    def to_resume(self) -> dict[int, str]:
        return {i: sid for i, sid in sorted(self.sessions.items())
                if i >= len(self.kept) and i not in self.finished_after}


def refuse_changed_settings(flags: list[tuple[str, Any]]) -> None:
    """UserError naming the flags (name, value) that were given beside --resume: a batch goes on with the
    problems and settings it was started with (the CLI and the TUI name their own flags)."""
    given = [name for name, value in flags if value]
    if given:
        raise UserError(f"--resume continues a batch with the problems and settings it was started with; "
                        f"leave out {', '.join(given)}")


def load_batch(store: Store, ref: str, api_base: str | None = None, device: str | None = None) -> StoredBatch:
    """The batch `ref` (an id, a unique prefix or `latest`: the newest batch); UserError if it is
    not a batch, is still running or complete, or would run differently than it was started."""
    row = store.session(ref, kind="kernelbench")
    bid = row["id"]
    if row["kind"] != "kernelbench":
        hint = f" (resume it with: autokernel optimize --headless --resume {bid})" if row["kind"] == "optimize" else ""
        raise UserError(f"session {bid} is a {row['kind']} session, not a KernelBench batch{hint}")
    if row["status"] == "running":
        raise UserError(f"batch {bid} is still running (pid {row.get('pid')})")
    if row["status"] == "completed":
        raise UserError(f"batch {bid} is complete: nothing to resume")
    cfg = row["config"] or {}
    if "names" not in cfg:
        raise UserError(f"batch {bid} was recorded by an autokernel that could not resume batches; resume its "
                        "problems one by one with autokernel optimize --headless --resume SESSION")
    if cfg.get("api_base") and not api_base:  # the agent would otherwise ask its provider's default server
        raise UserError(f"batch {bid}'s agent asked the server at {cfg['api_base']}; resume it with "
                        f"--api-base {cfg['api_base']}")
    if device and device != cfg["device"]:
        raise UserError(f"batch {bid} ran on {cfg['device']}; resume it with --device {cfg['device']} (or no --device)")
    problems = [Problem(name, Path(path)) for name, path in zip(cfg["names"], cfg["problems"])]
    config = BatchConfig(device=cfg["device"], agent=cfg.get("agent") or "playbook",
                         max_experiments=cfg.get("max_experiments_per_problem"), size=cfg.get("size"),
                         api_base=api_base, command=cfg.get("command") or "")
    rows: dict[int, ProblemResult] = {}
    sessions: dict[int, str] = {}
    for _, e in store.events(bid, types=[ev.ProblemStarted.type, ev.ProblemDone.type]):
        if isinstance(e, ev.ProblemStarted):
            sessions[e.index] = e.session_id
        else:  # the latest row of a problem counts (a resumed one was first recorded stopped)
            rows[e.index] = ProblemResult.from_json(e.result)
            if rows[e.index].session_id:
                sessions[e.index] = rows[e.index].session_id
    kept = []
    for i in range(len(problems)):
        if i not in rows or rows[i].status == "stopped":
            break
        kept.append(rows[i])
    after = {i: row for i, row in rows.items() if i > len(kept) and row.status != "stopped"}
    stored = StoredBatch(bid, problems, config, kept, sessions, after)
    for sid in stored.to_resume.values():
        problem = store.session(sid)
        if problem["status"] == "running":
            raise UserError(f"problem session {sid} of batch {bid} is still running (pid {problem.get('pid')})")
    return stored
