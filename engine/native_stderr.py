"""Keep torch's Kineto chatter off the user's terminal, and nothing else.

Kineto writes lines to the process's stderr (file descriptor 2, from C++, whatever its log level) every
time a profiler starts or stops: `USDT: ... profiler_start` / `profiler_stop`, and `External init callback
must run in same thread as registerClient` when a thread other than the first profiles (the optimize loop
and the TUI profile on a worker thread). None of it is the user's business, and in the TUI it lands on the
screen. `kineto_quiet()` points fd 2 at a temporary file for the few milliseconds of a start or a stop, then
writes back everything but those lines, so anything else printed meanwhile (a real error, a warning, the
TUI's own output) still reaches stderr, in order.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Iterator

NOISE = re.compile(rb"^USDT:.*\] profiler_(start|stop)\s*$"
                   rb"|External init callback must run in same thread as registerClient")
_lock = threading.Lock()  # fd 2 is one per process: two threads must not swap it at once


def without_noise(data: bytes) -> bytes:
    """`data` less the lines Kineto writes on its own (whole lines, newline included)."""
    return b"".join(line for line in data.splitlines(keepends=True) if not NOISE.search(line))


def _flush() -> None:
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or detached stream: nothing buffered to lose
            pass


@contextlib.contextmanager
def kineto_quiet() -> Iterator[None]:
    """Around a profiler's start or stop (never around a model's forwards: they run with stderr as it is)."""
    with _lock:
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 at all: nothing to keep quiet
            yield
            return
        with tempfile.TemporaryFile() as capture:
            _flush()
            os.dup2(capture.fileno(), 2)
            try:
                yield
            finally:
                _flush()
                os.dup2(saved, 2)
                os.close(saved)
                capture.seek(0)
                kept = without_noise(capture.read())
                with contextlib.suppress(OSError):  # stderr itself gone (a closed pipe): nothing to tell
                    while kept:
                        kept = kept[os.write(2, kept):]


@contextlib.contextmanager
def quiet_profile(**kwargs) -> Iterator["torch.profiler.profile"]:
    """`with torch.profiler.profile(**kwargs) as prof:`, with its start and stop under `kineto_quiet()`."""
    from torch.profiler import profile

    prof = profile(**kwargs)
    with kineto_quiet():
        prof.__enter__()
    try:
        yield prof
    finally:
        with kineto_quiet():
            prof.__exit__(None, None, None)
