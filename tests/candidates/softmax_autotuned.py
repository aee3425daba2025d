"""A softmax whose launch is chosen by triton.autotune among several configs, as an agent may write it."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"ROWS": 1}, num_warps=4), triton.Config({"ROWS": 2}, num_warps=8),
                          triton.Config({"ROWS": 4}, num_warps=8)], key=["n_rows", "n_cols"])
@triton.jit
def _softmax(x_ptr, y_ptr, n_rows, n_cols, stride_x, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    x = tl.load(x_ptr + rows * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = e / tl.sum(e, axis=1)[:, None]
    tl.store(y_ptr + rows * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    n_rows = x2d.shape[0]
    if n_rows == 0 or n_cols == 0:
        return y
    grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)  # noqa: E731
    _softmax[grid](x2d, y, n_rows, n_cols, x2d.stride(0), BLOCK=triton.next_power_of_2(n_cols))
    return y
