"""The soak's LLM: the tests' scripted OpenAI-compatible server (tests/llm_support.py) fed by an endless
script of softmax kernels rendered from the playbook's template, which misbehaves once per `inject`
(garbage, a timeout, 429 with Retry-After, a dropped connection) or answers with a candidate that hangs
or eats memory. So the schedule in scripts/soak.py decides when the agent meets each fault.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from llm_support import ScriptedLLM  # noqa: E402

LLM_FAULTS = ("llm_garbage", "llm_timeout", "llm_429", "llm_drop", "cand_hang", "cand_hog")

# Appended to a correct kernel renamed `_soak_kernel`: the candidate the loop sees is `kernel_fn`.
_HANG = '''

def kernel_fn(x):
    y = _soak_kernel(x)
    while x.shape[-1] != 1024:  # the soak's hanging candidate: right at the smoke shape, then never returns
        pass
    return y
'''
_HOG = '''

_HOARD = []  # the soak's memory hog keeps all it takes, until allocation fails or the worker is killed


def kernel_fn(x):
    y = _soak_kernel(x)
    while True:
        if x.is_cuda:
            _HOARD.append(torch.empty(256 << 20, dtype=torch.uint8, device=x.device))
        else:
            _HOARD.append(b"\\x01" * (64 << 20))  # filled, so the pages are really used
    return y
'''


def kernel_source(n: int, fault: str = "") -> str:
    """A correct softmax kernel (the playbook template at random launch knobs, made unique by `n`: the
    loop skips a source it has seen), or its hanging or memory-hogging variant."""
    from autokernel.playbook.templates import get_template

    template = get_template("softmax")
    rng = random.Random(n)
    params = dict(template.DEFAULTS, num_warps=rng.choice((1, 2, 4, 8)), rows_per_program=rng.choice((1, 2, 4)),
                  max_block_n=rng.choice((1024, 4096, 16384)))
    source = f"# soak variant {n}\n" + template.render(params)
    if fault in ("cand_hang", "cand_hog"):
        source = source.replace("def kernel_fn(", "def _soak_kernel(", 1) + (_HANG if fault == "cand_hang" else _HOG)
    return source


def answer_text(n: int, fault: str = "") -> str:
    """An answer in the agent's format: one idea of one variant."""
    title = {"cand_hang": "A kernel that hangs", "cand_hog": "A kernel that eats memory"}.get(fault, f"Variant {n}")
    return (f"TIER: 1\nTITLE: {title}\nHYPOTHESIS: the launch shape matters for row-wise work.\nVARIANT: soak-{n}\n"
            f"```python\n{kernel_source(n, fault)}```\n")


class _Script:
    """What ScriptedLLM pops a step from: never empty; the next queued fault, else a fresh kernel."""

    def __init__(self, llm: "SoakLLM"):
        self.llm = llm

    def __bool__(self) -> bool:
        return True

    def pop(self, index: int = 0) -> dict:
        return self.llm.next_step()


class SoakLLM:
    """`inject(kind)` queues one fault for the next request; `served` lists (time, kind) of each fault as
    the server served it, `answers` counts the good answers."""

    def __init__(self, timeout_delay_s: float = 310.0, retry_after_s: int = 5):
        self.timeout_delay_s = timeout_delay_s
        self.retry_after_s = retry_after_s
        self.pending: deque[str] = deque()
        self.served: list[tuple[float, str]] = []
        self.answers = 0
        self.requests = 0
        self._n = itertools.count(1)
        self._lock = threading.Lock()
        self.server = ScriptedLLM()
        self.server.script = _Script(self)

    @property
    def api_base(self) -> str:
        return self.server.api_base

    def inject(self, kind: str) -> None:
        if kind not in LLM_FAULTS:
            raise ValueError(f"not an LLM fault: {kind}")
        with self._lock:
            self.pending.append(kind)

    def next_step(self) -> dict:
        with self._lock:
            self.requests += 1
            kind = self.pending.popleft() if self.pending else ""
            if kind:
                self.served.append((time.time(), kind))
            else:
                self.answers += 1
            n = next(self._n)
        self.server.requests.clear()  # an hour of prompts need not be kept
        if kind == "llm_drop":
            return {"drop": True}
        if kind == "llm_429":
            return {"status": 429, "error": "slow down", "headers": {"Retry-After": str(self.retry_after_s)}}
        if kind == "llm_garbage":
            return {"content": "I would use more warps. Good luck!"}
        step = {"content": answer_text(n, kind), "prompt_tokens": 1000, "completion_tokens": 300}
        if kind == "llm_timeout":
            step["delay"] = self.timeout_delay_s  # past the agent's timeout: it has given up by then
        return step

    def close(self) -> None:
        self.server.close()
