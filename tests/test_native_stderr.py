"""Torch's Kineto lines (`USDT: ... profiler_start`, `External init callback ...`) never reach the user's
stderr, while everything else written there during a profiler's start or stop still does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

USDT = b"USDT:2026-11-25 13:17:55 5976:5976 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
CALLBACK = b"ERROR: External init callback must run in same thread as registerClient (1148274368 != 1719729024)\n"


def test_only_kinetos_own_lines_are_held_back():
    """In a real process (fd 2 and sys.stderr the same file): Kineto's lines go, the rest stays, in order."""
    written = USDT + b"a real problem\n" + CALLBACK
    script = textwrap.dedent(f"""
        import os, sys
        from autokernel.engine.native_stderr import kineto_quiet
        print("before", file=sys.stderr)
        with kineto_quiet():
            os.write(2, {written!r})
            print("a Python warning", file=sys.stderr)
        print("after", file=sys.stderr)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "before\na real problem\na Python warning\nafter\n", p.stderr


def test_profiling_on_the_main_thread_then_another_says_nothing_but_the_models_own_lines():
    """The optimize loop and the TUI profile on a worker thread: that is when Kineto adds its
    "External init callback" line; the model's own print during the profiled forwards still shows."""
    script = textwrap.dedent("""
        import sys, threading, torch
        from autokernel.engine.model_loading import LoadedModel
        from autokernel.engine.profiling import profile_model

        class Model(torch.nn.Module):
            def forward(self, x):
                print("forward ran", file=sys.stderr)
                return torch.softmax(x, -1)

        m = LoadedModel(path=None, name="m", model=Model(), inputs=[torch.randn(4, 8)], device="cpu", module=None,
                        size="small", dtype=None)
        profile_model(m, warmup=0, iters=1)
        t = threading.Thread(target=lambda: profile_model(m, warmup=0, iters=1))
        t.start()
        t.join()
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "USDT" not in p.stderr and "External init callback" not in p.stderr and "profiler_st" not in p.stderr
    assert p.stderr.count("forward ran") >= 2, p.stderr
