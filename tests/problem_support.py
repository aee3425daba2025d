"""Shared by the tests of a whole-problem target with two outputs (test_problem_outputs, test_problem_resume): the
problem file, a right ModelNew for it (one Triton program per row writes the running sum and the row's total),
and an answer of the scripted LLM server carrying a ModelNew; and Inductor's seeds of problems, made as a
session makes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MULTI = Path(__file__).parent / "data" / "kernelbench_multi" / "5_running_sum_and_total.py"

GOOD = '''import torch
import triton
import triton.language as tl


@triton.jit
def _running_sum_rows(x_ptr, y_ptr, total_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + offs, tl.cumsum(x, axis=0).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(total_ptr + row, tl.sum(x, axis=0).to(total_ptr.dtype.element_ty))


class ModelNew(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        total = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        n_cols = x.shape[-1]
        _running_sum_rows[(x.numel() // n_cols,)](x, y, total, n_cols, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return y, total
'''


def answer(code: str, title: str) -> str:
    return (f"TIER: 3\nTITLE: {title}\nHYPOTHESIS: a row fits one block; one program scans it and stores its "
            f"total.\nVARIANT: BLOCK=next_pow2(cols)\n```python\n{code}```\n")


# KernelBench's two ways of loading a submission, small and faithful: for the Triton backend the text is
# written to a temporary file in an empty folder and imported from there as a module that is in no
# sys.modules; for the CUDA backend it is exec'd into a bare dict (no __file__, no __name__). Model and
# get_inputs come from the problem's own source exec'd the same way; both models are built right after
# torch.manual_seed(42), on the device named last (KernelBench evaluates on a GPU). Prints one JSON line: the trials that matched and the patch's calls per kernel.
KB_LOADER = r'''
import importlib.util, json, os, sys, tempfile
import torch

backend, problem, submission, device = sys.argv[1:5]
reference = {}
exec(compile(open(problem).read(), "<string>", "exec"), reference)
code = open(submission).read()
if backend == "triton":
    folder = tempfile.mkdtemp()
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=folder, delete=False) as f:
        f.write(code)
    assert os.listdir(folder) == [os.path.basename(f.name)]
    spec = importlib.util.spec_from_file_location("temp_module", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ModelNew = module.ModelNew
else:
    scope = {}
    exec(compile(code, "<string>", "exec"), scope)
    ModelNew = scope["ModelNew"]
init = reference["get_init_inputs"]()
torch.manual_seed(42)
model = reference["Model"](*init).to(device)
torch.manual_seed(42)
new = ModelNew(*init).to(device)
matched = 0
for trial in range(2):
    torch.manual_seed(trial)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in reference["get_inputs"]()]
    with torch.no_grad():
        ref, out = model(*inputs), new(*inputs)
    ref, out = (ref, out) if isinstance(ref, (tuple, list)) else ((ref,), (out,))
    matched += len(ref) == len(out) and all(r.shape == o.shape and torch.allclose(o, r, atol=1e-2, rtol=1e-2)
                                            for r, o in zip(ref, out))
stats = getattr(new, "kernel_stats", None)
print(json.dumps({"matched": matched, "trials": 2, "calls": dict(stats.calls) if stats is not None else {}}))
'''


def load_like_kernelbench(problem: Path, submission: Path, backend: str = "triton", cwd: Path | None = None,
                          device: str = "cpu") -> dict:
    """Run KB_LOADER on `submission` in a fresh process from the empty folder `cwd` (no TRITON_INTERPRET
    set: the file must set it itself); its JSON answer, or AssertionError with the process's stderr."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["AUTOKERNEL_MODEL_SIZE"] = "small"
    with tempfile.TemporaryDirectory() as empty:
        run = subprocess.run([sys.executable, "-c", KB_LOADER, backend, str(problem), str(submission), device],
                             cwd=cwd or empty, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def inductor_seeds(problems: list[Path], out: Path, timeout_s: float = 600) -> list[dict]:
    """`python -m autokernel.engine.inductor_seed PROBLEMS -o OUT` (OUT the file for one problem, a folder for
    several): its JSON verdict per problem, each asserted ok (with the subprocess's stderr when one is not)."""
    done = subprocess.run([sys.executable, "-m", "autokernel.engine.inductor_seed", *map(str, problems), "-o", str(out)],
                          capture_output=True, text=True, timeout=timeout_s)
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(verdicts) == len(problems) and all(v["ok"] for v in verdicts), (verdicts, done.stderr[-2000:])
    return verdicts
