"""Several targets searched at once on one pool of workers, so a worker the current target cannot use is not idle.

Targets are independent (different kernels, different files), but each has moments when it can start nothing:
its starter runs alone, a proposal has nothing new while its experiments run, its end waits for the last of
them to be decided. The pool pulls one stream of experiments (`WorkerPool.run`'s `starts`); this scheduler
makes it from the open targets' `TargetSearch.work` generators in Amdahl order: the oldest open target
first, the next one only when the older ones have nothing to start now, and a new target from the walk
only when every open one waits. With one worker nothing runs when the stream is pulled, so no target ever
waits and the targets run one after the other, event for event as a search of each in turn.
"""

from __future__ import annotations

from typing import Any, Iterator

from .control import LoopControl
from .pool import Experiment, WorkerPool
from .search import StopLoop, search_failed
from .store import StoreWriteError


class TargetScheduler:
    """Merges the open targets' work into the pool's one stream of experiments (module doc)."""

    def __init__(self, searches: Iterator[Any], control: LoopControl):
        """`searches`: the walk's targets as `TargetSearch`es, each opened (its TargetStarted emitted) when
        pulled, so a target starts only when a worker would otherwise wait for it."""
        self._walk = searches
        self._walked = False
        self._control = control
        self._open: list[tuple[Any, Iterator[Experiment | None]]] = []  # oldest first

    def run(self, pool: WorkerPool) -> None:
        """Every target of the walk to its TargetDone; a pause keeps new experiments from starting, a stop
        (StopLoop) ends all once the experiments under way have ended. A pool that breaks (every worker lost)
        fails its open targets, and each target after them as the walk reaches it, never the session."""
        while True:
            try:
                pool.run(self.starts(), hold=lambda: self._control.paused or self._control.stop_requested)
                return
            except (StopLoop, StoreWriteError):
                raise
            except Exception as e:
                for search, work in self._open:
                    work.close()
                    search_failed(search.ctx, search.t, e)
                self._open.clear()
                if not self._open_next():
                    return

    def starts(self) -> Iterator[Experiment | None]:
        """The next experiment of the oldest open target that has one, opening targets as needed; None when
        every open target waits for one of its own experiments (the pool asks again when one ends)."""
        while True:
            experiment = self._from_open()
            if experiment is not None:
                yield experiment
            elif not self._open_next():
                if not self._open:
                    return
                yield None

    def _open_next(self) -> bool:
        """Open the walk's next target; False once the walk has none left."""
        search = None if self._walked else next(self._walk, None)
        if search is None:
            self._walked = True
            return False
        self._open.append((search, search.work()))
        search.takes_skip = lambda: self._is_oldest(search)
        return True

    def _from_open(self) -> Experiment | None:
        """The first experiment an open target starts now; a target whose work ends (TargetDone) is closed."""
        for entry in list(self._open):
            search, work = entry
            if search.waiting and not (self._control.skip_requested and self._is_oldest(search)):
                continue  # nothing to start before one of its experiments ends (a skip is taken at once)
            try:
                experiment = next(work)
            except StopIteration:
                self._open.remove(entry)
                continue
            if experiment is not None:
                return experiment
        return None

    def _is_oldest(self, search: Any) -> bool:
        """The person's skip is the oldest open target's: the one the screens show."""
        return bool(self._open) and self._open[0][0] is search
