"""A child of the engine that ends with it: a thread waits for the engine's end of a pipe to close.

A child the engine starts for one job (a worker, the integration) runs kept or candidate code that can take
minutes, or hang, and holds the device meanwhile. When the engine is killed it never reads the child's answer,
and a child that noticed only at its next write (or never, for a hang) would keep the device from the resumed
session. The engine keeps the write end of a pipe whose read end the child watches: the kernel closes it when
the engine's process ends, however it ends, and the child then ends its whole process group at once.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from typing import Callable

PIPE_ENV = "AUTOKERNEL_ENGINE_PIPE_FD"  # the read end's number, for a child started with `pass_fds`


def _wait_for_hang_up(read_fd: int, before: Callable[[], None] | None) -> None:
    watch = select.poll()
    watch.register(read_fd, 0)  # no events asked for: poll wakes only for a hang-up, an error, or a closed fd
    while True:
        for _, happened in watch.poll():
            if happened & select.POLLNVAL:  # the child closed its own end: it is leaving by itself
                return
            if happened & (select.POLLHUP | select.POLLERR):
                if before is not None:
                    before()
                os.killpg(os.getpgid(0), signal.SIGKILL)


def end_with_the_engine(read_fd: int, before: Callable[[], None] | None = None) -> None:
    """From now on, this process's group ends when the engine's end of `read_fd` closes (`before()` first).

    The process must lead a group of its own (started with `start_new_session=True`), or the engine's group
    would go with it."""
    threading.Thread(target=_wait_for_hang_up, args=(read_fd, before), name="autokernel-engine-watch",
                     daemon=True).start()


def kill_group(proc: subprocess.Popen) -> None:
    """The engine's side: such a child, started with `start_new_session=True`, and all it started, at once."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
