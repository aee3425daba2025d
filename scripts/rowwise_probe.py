"""Probe: forms of the row-wise kernels (cross_entropy, rmsnorm, softmax, layernorm, rotary, reduce) against a same-size copy.

Run on a GPU (`python scripts/rowwise_probe.py [OUT.json]`). Issue 5's hot-spots target asks for 90% of copy
bandwidth; run 9 left cross_entropy (8192x32000 bf16) at 88% and rmsnorm (8192x4096) at 89%; issue 4's bench
left softmax's widest rows (1024x131072) at 62%, layernorm below rmsnorm at the same shapes, rotary
0.90-0.96x and reduce 0.95x torch.compile. For each shape
this times, with the harness's own method (`engine.timing.time_calls`: fresh data and an L2 flush before every
call, CUDA events, median), in interleaved rounds so a GPU that drifts over the run shows up as spread rather
than as a winner: the starter, template renders with chosen knobs, the hand-written forms below, and as
a reference a device copy of the same bytes. Each form's output is checked against the
reference first. It decides what the starters and the templates take; kept so the decision can be re-run
on another GPU or Triton.
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import sys
import tempfile
import traceback

import torch
import triton
import triton.language as tl

from autokernel.engine.harness import load_candidate
from autokernel.engine.roofline import ceilings, copy_gbs_at
from autokernel.engine.timing import compiled_baseline, input_sets, time_calls
from autokernel.kernels import get_spec
from autokernel.kernels.cross_entropy import starter_triton as ce_starter
from autokernel.kernels.layernorm import starter_triton as ln_starter
from autokernel.kernels.reduce import starter_triton as sum_starter
from autokernel.kernels.rmsnorm import starter_triton as rms_starter
from autokernel.kernels.rotary_embedding import starter_triton as rope_starter
from autokernel.kernels.softmax import starter_triton as sm_starter
from autokernel.playbook.templates import cross_entropy as ce_template
from autokernel.playbook.templates import layernorm as ln_template
from autokernel.playbook.templates import rmsnorm as rms_template
from autokernel.playbook.templates import softmax as sm_template

ROUNDS = 3
LOG2E = 1.4426950408889634


@triton.jit
def _ce_rows(x_ptr, t_ptr, loss_ptr, count_ptr, vocab, stride, BLOCK_V: tl.constexpr, PIPELINE: tl.constexpr):
    """One row per program; the target logit is fetched before the stream (its latency hides under it);
    with PIPELINE the next tile's load is issued before this tile is reduced (two tiles in flight)."""
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride
    cols = tl.arange(0, BLOCK_V)
    t = tl.load(t_ptr + row)
    ok = t != -100
    x_t = tl.load(base + tl.where(ok, t, 0)).to(tl.float32)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    if PIPELINE:
        nxt = tl.load(base + cols, mask=cols < vocab, other=float("-inf"), eviction_policy="evict_first")
        for start in range(BLOCK_V, vocab + BLOCK_V, BLOCK_V):
            x = nxt.to(tl.float32)
            idx = start + cols
            nxt = tl.load(base + idx, mask=idx < vocab, other=float("-inf"), eviction_policy="evict_first")
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), axis=0)
            m = m_new
    else:
        for start in range(0, vocab, BLOCK_V):
            idx = start + cols
            x = tl.load(base + idx, mask=idx < vocab, other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), axis=0)
            m = m_new
    lse = m + tl.log2(s) * 0.6931471805599453
    tl.store(loss_ptr + row, tl.where(ok, lse - x_t, 0.0))
    tl.store(count_ptr + row, ok.to(tl.float32))


def ce_form(block_v: int, warps: int, pipeline: bool, mean_block: int, mean_warps: int, mean: bool = True):
    def fn(logits, targets):
        vocab = logits.shape[-1]
        x = logits.reshape(-1, vocab)
        t = targets.reshape(-1)
        rows = x.shape[0]
        buf = torch.empty(2 * rows, dtype=torch.float32, device=x.device)
        out = torch.empty((), dtype=torch.float32, device=x.device)
        _ce_rows[(rows,)](x, t, buf, buf[rows:], vocab, x.stride(0), BLOCK_V=block_v, PIPELINE=pipeline,
                          num_warps=warps)
        if mean:
            blk = min(triton.next_power_of_2(rows), mean_block)
            ce_starter._mean_kernel[(1,)](buf, buf[rows:], out, rows, BLOCK=blk, num_warps=mean_warps)
            return out
        return buf
    return fn


@triton.jit
def _rms_rows(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
              LOAD_EV: tl.constexpr, STORE_CM: tl.constexpr, STORE_EV: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy=LOAD_EV).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
             cache_modifier=STORE_CM, eviction_policy=STORE_EV)


def rms_form(rows_per: int, warps: int, load_ev: str = "evict_first", store_cm: str = "", store_ev: str = ""):
    def fn(x, weight, eps=1e-6):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        y = torch.empty_like(x2)
        n_rows = x2.shape[0]
        _rms_rows[(triton.cdiv(n_rows, rows_per),)](x2, weight, y, n_rows, n_cols, x2.stride(0), y.stride(0), float(eps),
                                                   ROWS=rows_per, BLOCK_N=triton.next_power_of_2(n_cols),
                                                   LOAD_EV=load_ev, STORE_CM=store_cm, STORE_EV=store_ev, num_warps=warps)
        return y.reshape(x.shape)
    return fn


@triton.jit
def _softmax_row_loop(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, PROGRAMS, BLOCK_N: tl.constexpr,
                      FIRST_EV: tl.constexpr, REVERSE: tl.constexpr):
    """Rows too wide for registers: an online pass (max, rescaled sum) then a normalising pass. PROGRAMS
    programs loop over the rows, so PROGRAMS rows are between their two passes at a time: few enough
    and the second pass finds its row in L2 (FIRST_EV='evict_last' asks the L2 to keep it)."""
    cols = tl.arange(0, BLOCK_N)
    for r in range(tl.program_id(0), n_rows, PROGRAMS):
        row = tl.cast(r, tl.int64)
        x_row = x_ptr + row * stride_x
        y_row = y_ptr + row * stride_y
        m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
        s = tl.zeros((BLOCK_N,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            idx = start + cols
            x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"), eviction_policy=FIRST_EV).to(tl.float32)
            m_new = tl.maximum(m, x)
            s = s * tl.where(m_new == -float("inf"), 0.0, tl.exp2((m - m_new) * 1.4426950408889634)) + tl.where(
                x == -float("inf"), 0.0, tl.exp2((x - m_new) * 1.4426950408889634))
            m = m_new
        row_max = tl.max(m, axis=0)
        total = tl.sum(s * tl.where(m == -float("inf"), 0.0, tl.exp2((m - row_max) * 1.4426950408889634)), axis=0)
        last_tile = tl.cdiv(n_cols, BLOCK_N) - 1
        for t in range(0, last_tile + 1):
            idx = ((last_tile - t) if REVERSE else t) * BLOCK_N + cols
            ok = idx < n_cols
            x = tl.load(x_row + idx, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
            tl.store(y_row + idx, (tl.exp2((x - row_max) * 1.4426950408889634) / total).to(y_ptr.dtype.element_ty), mask=ok)


def _sms(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2


def softmax_loop_form(block_n: int, warps: int, per_sm: int, first_ev: str, reverse: bool = False):
    """per_sm programs per SM (0: one program per row)."""
    def fn(x):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        y = torch.empty_like(x2)
        n_rows = x2.shape[0]
        programs = n_rows if not per_sm else min(n_rows, per_sm * _sms(x.device))
        _softmax_row_loop[(programs,)](x2, y, n_rows, n_cols, x2.stride(0), y.stride(0), programs, BLOCK_N=block_n,
                                       FIRST_EV=first_ev, REVERSE=reverse, num_warps=warps)
        return y.reshape(x.shape)
    return fn


def softmax_whole_form(warps: int):
    def fn(x):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        y = torch.empty_like(x2)
        sm_starter._softmax_row_kernel[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), y.stride(0),
                                                       BLOCK_N=triton.next_power_of_2(n_cols), num_warps=warps)
        return y.reshape(x.shape)
    return fn


def rotary_form(seq_tile: int, heads_per_program: int, warps: int):
    """The rotary starter's kernel with another tile: seq_tile half-row elements per head, heads per program."""
    def fn(x, cos, sin):
        batch, heads, seq, d = x.shape
        half = d // 2
        out = torch.empty_like(x)
        block_h = triton.next_power_of_2(half)
        seq_block = max(1, min(seq_tile // block_h, triton.next_power_of_2(seq)))
        per_program = min(heads_per_program, heads)
        head_groups = triton.cdiv(heads, per_program)
        grid = (triton.cdiv(seq, seq_block), batch * head_groups)
        rope_starter._rope_kernel[grid](x, cos, sin, out, heads, seq, half, head_groups, cos.stride(0),
                                        x.stride(0), x.stride(1), x.stride(2), out.stride(0), out.stride(1),
                                        out.stride(2), HEADS_PER_PROGRAM=per_program, SEQ_BLOCK=seq_block,
                                        BLOCK_H=block_h, num_warps=warps)
        return out
    return fn


@triton.jit
def _sum_rows(x_ptr, out_ptr, n_rows, n_cols, stride_x, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    """The reduce starter's kernel with the load's eviction hint as a parameter."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        mask = row_ok[:, None] & (idx < n_cols)[None, :]
        acc += tl.load(x_ptr + rows[:, None] * stride_x + idx[None, :], mask=mask, other=0.0,
                       eviction_policy=EVICT).to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _sum_rows_fixed(x_ptr, out_ptr, N_COLS: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Sum over rows whose width is compiled in (as torch.compile does) and whose count is a multiple of ROWS:
    no masks on the loads or the store, fixed trip count."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
    for start in tl.static_range(0, N_COLS, BLOCK_N):
        acc += tl.load(x_ptr + rows[:, None] * N_COLS + (start + cols)[None, :],
                       eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty))


def reduce_fixed_form(max_block: int, warps: int):
    """The sum with the width as a constexpr and no masks (only for widths that are a multiple of the block)."""
    def fn(x):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols).contiguous()
        out = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        block_n = min(triton.next_power_of_2(n_cols), max_block)
        assert n_cols % block_n == 0, "this probe form needs the width to be a multiple of the block"
        _sum_rows_fixed[(x2.shape[0],)](x2, out, N_COLS=n_cols, ROWS=1, BLOCK_N=block_n, num_warps=warps)
        return out.reshape(x.shape[:-1])
    return fn


def reduce_form(row_tile: int, max_block: int, warps: int, evict: str):
    """Sum over the last dim with row_tile elements per program (rows packed when narrow), column blocks of at
    most max_block, `warps` warps and the given eviction hint on the loads."""
    def fn(x):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        out = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        block_n = min(triton.next_power_of_2(n_cols), max_block)
        rows = max(1, row_tile // block_n)
        _sum_rows[(triton.cdiv(x2.shape[0], rows),)](x2, out, x2.shape[0], n_cols, x2.stride(0), ROWS=rows,
                                                     BLOCK_N=block_n, EVICT=evict, num_warps=warps)
        return out.reshape(x.shape[:-1])
    return fn


@triton.jit
def _rope_flat(x_ptr, cos_ptr, sin_ptr, out_ptr, n, seq_d, D: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr):
    """Rotary over the flattened x (as torch.compile writes it): each element with its partner from the other
    half, cos/sin [seq, D] indexed by position within one head's [seq, D] slab."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    first = (idx % D) < HALF
    at = idx % seq_d
    x = tl.load(x_ptr + idx, mask=ok, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    s = tl.load(sin_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    partner = tl.load(x_ptr + tl.where(first, idx + HALF, idx - HALF), mask=ok, other=0.0,
                      eviction_policy="evict_last").to(tl.float32)
    rotated = tl.where(first, -partner, partner)
    tl.store(out_ptr + idx, (x * c + rotated * s).to(out_ptr.dtype.element_ty), mask=ok)


def rotary_flat_form(block: int, warps: int):
    """The flat 1-D rotary above (x and cos/sin contiguous), BLOCK elements per program."""
    def fn(x, cos, sin):
        d = x.shape[-1]
        out = torch.empty_like(x)
        n = x.numel()
        _rope_flat[(triton.cdiv(n, block),)](x, cos, sin, out, n, x.shape[-2] * d, D=d, HALF=d // 2, BLOCK=block,
                                             num_warps=warps)
        return out
    return fn


def device_copy(x, *rest):
    y = torch.empty_like(x)
    return y.copy_(x)


_TMP = pathlib.Path(tempfile.mkdtemp(prefix="rowwise_probe_"))


def template(module, params: dict, tag: str):
    path = _TMP / f"{tag}.py"
    path.write_text(module.render(params))
    return load_candidate(path, f"rowwise_probe_{tag}")


def forms(kernel: str) -> dict:
    if kernel == "cross_entropy":
        out = {"starter": ce_starter.kernel_fn, "template default": template(ce_template, {}, "ce_default")}
        out["template v16384 w16"] = template(ce_template, {"max_block_v": 16384, "num_warps": 16}, "ce_v16384_w16")
        for bv, w in ((16384, 16), (8192, 8)):
            out[f"hand v{bv} w{w}"] = ce_form(bv, w, False, 8192, 8)
        return out
    if kernel == "softmax":
        out = {"starter": sm_starter.kernel_fn, "template default": template(sm_template, {}, "sm_default")}
        out["hand whole row w32"] = softmax_whole_form(32)
        for block_n, warps, per_sm, ev, reverse in ((16384, 32, 1, "evict_last", False), (16384, 32, 1, "evict_last", True),
                                                    (16384, 32, 1, "", True), (32768, 32, 1, "evict_last", True)):
            grid = f"{per_sm}/SM" if per_sm else "row"
            name = f"hand two-pass v{block_n} w{warps} grid {grid} {ev or 'no hint'}{', backwards' if reverse else ''}"
            out[name] = softmax_loop_form(block_n, warps, per_sm, ev, reverse)
        return out
    if kernel == "rotary_embedding":
        out = {"starter": rope_starter.kernel_fn}
        for seq_tile, hpp, warps in ((2048, 8, 4), (2048, 1, 4), (2048, 2, 4), (2048, 4, 4), (4096, 1, 4),
                                     (4096, 2, 8), (1024, 1, 4), (2048, 8, 8), (8192, 1, 8)):
            out[f"hand tile {seq_tile} heads/program {hpp} w{warps}"] = rotary_form(seq_tile, hpp, warps)
        for block, warps in ((1024, 4), (2048, 4), (4096, 8), (2048, 8)):
            out[f"hand flat {block} w{warps}"] = rotary_flat_form(block, warps)
        return out
    if kernel == "reduce":
        out = {"starter": sum_starter.kernel_fn}
        for row_tile, max_block, warps, evict in ((4096, 4096, 16, "evict_first"), (2048, 2048, 16, "evict_first"),
                                                  (4096, 2048, 8, "evict_first"), (2048, 2048, 8, "evict_first"),
                                                  (8192, 8192, 16, "evict_first"), (8192, 4096, 16, "evict_first"),
                                                  (4096, 4096, 8, "")):
            out[f"hand tile {row_tile} block<={max_block} w{warps} {evict or 'no hint'}"] = reduce_form(row_tile, max_block, warps, evict)
        for max_block, warps in ((4096, 16), (2048, 16), (4096, 8), (1024, 8)):
            out[f"hand fixed width, one row, block<={max_block} w{warps}"] = reduce_fixed_form(max_block, warps)
        return out
    if kernel == "layernorm":
        out = {"starter": ln_starter.kernel_fn}
        for ev in ("evict_first", "evict_last"):
            out[f"template load_eviction {ev or 'none'}"] = template(ln_template, {"load_eviction": ev}, f"ln_{ev or 'none'}")
        return out
    out = {"starter": rms_starter.kernel_fn, "template default": template(rms_template, {}, "rms_default")}
    out["hand rows1 w8 load evict_first"] = rms_form(1, 8)
    out["hand rows1 w8 load evict_last"] = rms_form(1, 8, load_ev="evict_last")
    out["hand rows2 w8 load evict_last"] = rms_form(2, 8, load_ev="evict_last")
    return out


def close(out, ref) -> bool:
    out = out.float()
    ref = ref.float()
    return bool(torch.allclose(out, ref, atol=2e-2, rtol=2e-2))


SHAPES = {
    "cross_entropy": [{"rows": 8192, "vocab": 32000}, {"rows": 4096, "vocab": 32000}, {"rows": 1024, "vocab": 32000},
                      {"rows": 4096, "vocab": 128256}, {"rows": 8192, "vocab": 50257}],
    "rmsnorm": [{"rows": 8192, "cols": 4096}, {"rows": 4096, "cols": 4096}, {"rows": 32768, "cols": 1024}],
    "softmax": [{"rows": 4096, "cols": 32000}, {"rows": 1024, "cols": 131072}, {"rows": 8192, "cols": 8192}],
    "layernorm": [{"rows": 8192, "cols": 4096}, {"rows": 4096, "cols": 4096}],
    "rotary_embedding": [{"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128},
                         {"batch": 16, "heads": 16, "seq": 2048, "head_dim": 64},
                         {"batch": 1, "heads": 32, "seq": 8192, "head_dim": 128}],
    "reduce": [{"rows": 8192, "cols": 4096}, {"rows": 8192, "cols": 8192}, {"rows": 65536, "cols": 1024},
               {"rows": 1024, "cols": 65536}],
}


# Off a GPU (TRITON_INTERPRET=1): every form once at tiny shapes, to check the script before a GPU call.
CPU_SHAPES = {"cross_entropy": [{"rows": 3, "vocab": 1000}], "rmsnorm": [{"rows": 5, "cols": 96}],
              "softmax": [{"rows": 3, "cols": 40000}], "layernorm": [{"rows": 5, "cols": 96}],
              "rotary_embedding": [{"batch": 1, "heads": 3, "seq": 40, "head_dim": 64}],
              "reduce": [{"rows": 5, "cols": 4096}]}


def main() -> None:
    global ROUNDS
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shapes_by_kernel = SHAPES if device == "cuda" else CPU_SHAPES
    if os.environ.get("PROBE_KERNELS"):  # e.g. PROBE_KERNELS="rotary_embedding softmax"
        shapes_by_kernel = {k: v for k, v in shapes_by_kernel.items() if k in os.environ["PROBE_KERNELS"].split()}
    ROUNDS = ROUNDS if device == "cuda" else 1
    ceiling = ceilings(device).bandwidth_gbs
    report = {"gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__, "triton": triton.__version__,
              "ceiling_gbs": ceiling, "rounds": ROUNDS, "shapes": []}
    print(f"{report['gpu']}, torch {torch.__version__}, triton {triton.__version__}; copy ceiling {ceiling:.0f} GB/s")
    for kernel, shapes in shapes_by_kernel.items():
        spec = get_spec(kernel)
        variants = forms(kernel)
        for shape in shapes:
            sets = input_sets(spec, shape, dtype, device)
            nbytes = spec.bytes_moved(shape, dtype)
            ref = spec.reference(*sets[0])
            fns, errors = {}, {}
            for name, fn in variants.items():
                try:
                    if "rows only" not in name and not close(fn(*sets[0]), ref):
                        errors[name] = "wrong answer"
                        continue
                    fns[name] = fn
                except Exception as e:  # a form that does not compile at this shape is reported, not fatal
                    errors[name] = f"{type(e).__name__}: {str(e)[:200]}"
            data = sets[0][0]
            if device == "cuda":  # torch.compile of the eager baseline, in the same rounds
                compiled, why, _ = compiled_baseline(spec, shape, dtype, sets[0])
                if compiled is not None:
                    fns["torch.compile of the eager baseline"] = compiled
                else:
                    errors["torch.compile of the eager baseline"] = why
            fns["device copy of the same bytes"] = device_copy
            copy_sets = [(torch.empty(nbytes // 2 // data.element_size(), dtype=dtype, device=device).normal_(),)
                         for _ in range(len(sets))]
            times = {name: [] for name in fns}
            for _ in range(ROUNDS):
                for name, fn in fns.items():
                    use = copy_sets if "copy of the same" in name else sets
                    times[name].append(time_calls(fn, use, device)[0])
            row = {"kernel": kernel, "shape": shape, "bytes": nbytes, "copy_gbs_at": copy_gbs_at(nbytes) if device == "cuda" else None, "forms": {},
                   "errors": errors}
            for name, ts in times.items():
                med = statistics.median(ts)
                gbs = nbytes / (med * 1e-3) / 1e9
                row["forms"][name] = {"ms": med, "rounds": ts, "gbs": gbs, "of_ceiling": gbs / ceiling}
            report["shapes"].append(row)
            dims = "x".join(str(v) for v in shape.values())
            print(f"\n{kernel} {dims} {str(dtype)[6:]} ({nbytes / 1e6:.0f} MB; device copy at this size by copy_gbs_at: "
                  f"{row['copy_gbs_at'] or 0:.0f} GB/s)")
            for name, f in sorted(row["forms"].items(), key=lambda kv: kv[1]["ms"]):
                spread = (max(f["rounds"]) - min(f["rounds"])) / f["ms"]
                print(f"  {f['ms']:8.4f} ms  {f['gbs']:6.0f} GB/s  {100 * f['of_ceiling']:5.1f}%  spread {100 * spread:4.1f}%  {name}")
            for name, why in errors.items():
                print(f"  ERROR {name}: {why}")
            del sets, copy_sets
            if device == "cuda":
                torch.cuda.empty_cache()
    if len(sys.argv) > 1:
        pathlib.Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
