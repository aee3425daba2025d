"""Shared by the tests of a whole-problem target with two outputs (test_problem_outputs, test_problem_resume): the
problem file, a right ModelNew for it (one Triton program per row writes the running sum and the row's total),
and an answer of the scripted LLM server carrying a ModelNew."""

from __future__ import annotations

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
