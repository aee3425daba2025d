"""Which kept kernel kinds to swap in for one forward (patched eager, or patched + torch.compile).

A kernel that beats eager alone can lose inside a compiled model: its custom operator is opaque to
Inductor, so the ops around it (a residual add before a LayerNorm, a scale and mask before a softmax) no
longer fuse with it. So integration times subsets of the kept kinds, not only all or none, and keeps the
fastest. This module is the search alone, without torch: a `LeaveOneOut` hands out the subsets to time
next and decides from the per-round times the caller gives back (timed in the same interleaved rounds).

The search is greedy leave-one-out: start from all kinds; each step times the current subset and the
subsets with one kind left out; drop the kind whose removal helps most, if it helps in every round by
more than `min_gain` (a gain inside the rounds' spread is noise, not a reason), and repeat from the
smaller subset. It never drops the last kind: whether to patch at all is the caller's comparison with the
unpatched forward. A subset that failed (no compile, outputs that differ) is never chosen; a current
subset that failed counts as infinitely slow, so a search that starts from a failing whole finds a part
that works.

Bound: the full greedy costs n + (n-1) + ... + 2 trials (about n²/2 compiles for n kinds). Here a kind
whose removal made the forward slower in every round is kept for good and not tried again, the trials are
capped at `max_trials` (default 2n: one full pass and about one more), and a step is cut to the time left
(estimated from the seconds per trial so far); a cut step tries the kinds whose removal gained most last
time first.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

Subset = tuple[str, ...]  # kinds, in the order the search was given them
Rounds = Sequence[float] | None  # one time per interleaved round; None: the subset failed


@dataclass(frozen=True)
class Trial:
    """One subset timed in one step, against that step's current subset."""

    step: int
    kinds: Subset
    ms: float | None  # median over its rounds; None when it failed
    left_out: str | None = None  # the kind this candidate leaves out of the current subset (None: the current)
    gain: float | None = None  # median over rounds of current / this, minus 1 (> 0: leaving it out helped)
    worst: float | None = None  # the smallest of those per-round gains
    note: str = ""


@dataclass
class LeaveOneOut:
    """Greedy leave-one-out over `kinds`, one step per `candidates()` / `record()` pair."""

    kinds: Sequence[str]
    max_trials: int | None = None  # candidate subsets timed in all (default 2n)
    min_gain: float = 0.02  # a drop must gain more than this in every round
    current: Subset = ()
    trials: list[Trial] = field(default_factory=list)
    steps: int = 0
    stopped: str = ""  # why the search ended; "" while it runs
    seconds: float = 0.0  # spent on candidates so far (builds, compiles, checks), as the caller measured
    _locked: set = field(default_factory=set)  # kinds whose removal hurt in every round
    _last_gain: dict = field(default_factory=dict)
    _pending: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kinds = tuple(dict.fromkeys(self.kinds))
        self.current = self.kinds
        if self.max_trials is None:
            self.max_trials = 2 * len(self.kinds)
        if not self.kinds:
            self.stopped = "no kinds"

    @property
    def done(self) -> bool:
        return bool(self.stopped)

    @property
    def candidates_timed(self) -> int:
        return sum(1 for t in self.trials if t.left_out is not None)

    def per_trial_s(self) -> float | None:
        """Mean seconds one candidate has cost so far (None before any)."""
        n = self.candidates_timed
        return self.seconds / n if n else None

    def candidates(self, time_left_s: float | None = None) -> list[Subset]:
        """The subsets to time in the next step besides `current` ([] once the search is done: see
        `stopped`). Ask once per step, then `record` the rounds of `current` and of each."""
        if self.done:
            return []
        if len(self.current) <= 1:
            self.stopped = "one kind left"
            return []
        kinds = [k for k in self.current if k not in self._locked]
        if not kinds:
            self.stopped = "leaving out any kind made the forward slower in every round"
            return []
        kinds.sort(key=lambda k: -self._last_gain.get(k, math.inf))  # untried first, then the best last time
        room = self.max_trials - self.candidates_timed
        if time_left_s is not None and self.per_trial_s():
            room = min(room, int(max(0.0, time_left_s) // self.per_trial_s()))
        if room <= 0:
            self.stopped = (f"trial bound ({self.max_trials} subsets)" if self.candidates_timed >= self.max_trials
                            else "time budget")
            return []
        kinds = kinds[:room]
        self._pending = [tuple(k for k in self.current if k != out) for out in kinds]
        return list(self._pending)

    def record(self, rounds: dict[Subset, Rounds], seconds: float = 0.0, notes: dict[Subset, str] | None = None) -> None:
        """Take one step's per-round times ({subset: [ms per round] or None}) for `current` and every
        candidate handed out, and the seconds its candidates cost; drop a kind if that helps beyond noise."""
        notes = notes or {}
        self.steps += 1
        self.seconds += seconds
        step = self.steps
        cur = rounds.get(self.current)
        self.trials.append(Trial(step, self.current, _median(cur), note=notes.get(self.current, "")))
        best, best_key = None, None
        for cand in self._pending:
            out = next(k for k in self.current if k not in cand)
            got = rounds.get(cand)
            if not got:
                self.trials.append(Trial(step, cand, None, out, note=notes.get(cand, "") or "failed"))
                continue
            ratios = [(c / x if x > 0 else math.inf) for c, x in zip(cur, got)] if cur else [math.inf]
            gain, worst = statistics.median(ratios) - 1, min(ratios) - 1
            self.trials.append(Trial(step, cand, _median(got), out, gain, worst, notes.get(cand, "")))
            self._last_gain[out] = gain
            if cur and max(ratios) < 1:
                self._locked.add(out)  # slower without it in every round: it stays
            if worst > self.min_gain:
                key = (gain, -_median(got))
                if best_key is None or key > best_key:
                    best, best_key = cand, key
        self._pending = []
        if best is None:
            self.stopped = "no kind's removal helped beyond the noise" if cur else "every subset tried failed"
        else:
            self.current = best

    def chosen_trial(self) -> Trial | None:
        """The last measurement of the chosen subset (None before any step)."""
        return next((t for t in reversed(self.trials) if t.kinds == self.current), None)


def _median(rounds: Rounds) -> float | None:
    return statistics.median(rounds) if rounds else None


def run(search: LeaveOneOut, measure: Callable[[list[Subset]], dict[Subset, Rounds]],
        time_left: Callable[[], float | None] = lambda: None) -> LeaveOneOut:
    """Drive `search` to its end with `measure(subsets) -> {subset: rounds}` (one step per call, current
    first): the single-forward case, and what the tests drive with a fake clock."""
    while not search.done:
        cands = search.candidates(time_left())
        if search.done:
            break
        search.record(measure([search.current] + cands))
    return search


def describe(search: LeaveOneOut, label: str) -> str:
    """'patched + torch.compile subsets: all (rmsnorm, softmax) 9.1 ms; step 1: without softmax 8.2 ms
    (+11%, every round +9% or more), ...; chosen rmsnorm (2 steps, 3 subsets, 41 s; stopped: ...)'."""
    parts = []
    for t in search.trials:
        if t.left_out is None:
            if t.step == 1:
                parts.append(f"all ({', '.join(t.kinds)}) " + (f"{t.ms:.4g} ms" if t.ms is not None else "failed"))
            continue
        text = f"step {t.step} without {t.left_out}: "
        if t.ms is None:
            text += t.note or "failed"
        else:
            text += f"{t.ms:.4g} ms ({t.gain:+.1%}, worst round {t.worst:+.1%})"
        parts.append(text)
    chosen = ", ".join(search.current) or "none"
    return (f"{label} subsets: {'; '.join(parts)}; {'chosen' if search.stopped else 'now'} {chosen} ({search.steps} steps, "
            f"{search.candidates_timed} subsets, {search.seconds:.0f} s; " +
            (f"stopped: {search.stopped})" if search.stopped else "going on)"))
