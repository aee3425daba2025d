"""Matmul template: c = a @ b, a [M, K], b [K, N], fp32 accumulation, output in a's dtype.

Compute-bound at LLM sizes: judged by the fraction of the measured matmul peak. The space covers
tile sizes, warps and stages, group-M swizzle (L2 reuse), fp32 input precision (ieee or tf32),
split-K with a deterministic second pass, autotune, Hopper tensor descriptors and warp
specialization, and mask elision when K divides the tile.
"""

from __future__ import annotations

from . import Knob, knob_header
from ._source import IMPORTS, INTERPRETER_NOTE, TMA_READY, autotune_decorator, fill, join

KERNEL = "matmul"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (32, 64, 128, 256),
         "BLOCK_M={new} instead of {old}: taller tiles reuse each loaded B tile over more rows of A (M={M}), at the cost of registers"),
    Knob("block_n", 1, (32, 64, 128, 256),
         "BLOCK_N={new} instead of {old}: wider tiles reuse each loaded A tile over more columns (N={N}), at the cost of registers"),
    Knob("block_k", 1, (32, 64, 128),
         "BLOCK_K={new} instead of {old}: deeper K steps mean fewer loop iterations over K={K} and larger loads, but more shared memory per stage"),
    Knob("num_warps", 1, (4, 8),
         "{new} warps instead of {old} split each output tile over more (or fewer) warps: more warps hide latency, fewer give each more registers"),
    Knob("num_stages", 1, (2, 3, 4, 5),
         "{new} pipeline stages instead of {old}: deeper pipelines keep more K tiles in flight while tensor cores work, if shared memory allows"),
    Knob("group_m", 2, (1, 4, 8, 16),
         "grouping {new} tile rows (was {old}) orders programs so neighbours share B tiles in L2 instead of streaming all of B per row of tiles"),
    Knob("input_precision", 3, ("ieee", "tf32"),
         "input_precision={new!r} (was {old!r}): for fp32 inputs, tf32 tensor cores are many times faster than exact fp32 FMA; the harness decides whether the error is within tolerance", ordered=False),
    Knob("split_k", 4, (1, 2, 4, 8),
         "splitting K={K} over {new} programs (was {old}) adds parallelism when the {M}x{N} output has too few tiles to fill the SMs; a second pass adds the partials in order"),
    Knob("autotune", 4, (False, True),
         "autotune={new} (was {old}): let triton.autotune choose among a few tile/warp/stage configs per (M, N, K)"),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads of A and B tiles free the threads from address math and masks and feed a deeper pipeline"),
    Knob("warp_specialize", 5, (False, True),
         "warp_specialize={new} (was {old}): on sm_90+, let Triton split producer (load) and consumer (MMA) warps in the K loop"),
    Knob("even_k", 6, (False, True),
         "even_k={new} (was {old}): when K={K} is a multiple of BLOCK_K, the K loop drops its masks"),
)

DEFAULTS = {
    "block_m": 128,
    "block_n": 128,
    "block_k": 64,
    "num_warps": 8,
    "num_stages": 3,
    "group_m": 8,
    "input_precision": "ieee",
    "split_k": 1,
    "autotune": False,
    "tma": False,
    "warp_specialize": False,
    "even_k": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = dict(params)
    if dtype and dtype != "fp32":
        out["input_precision"] = None  # only fp32 inputs have a choice
    if params["autotune"]:
        for k in ("block_m", "block_n", "block_k", "num_warps", "num_stages"):
            out[k] = None
    M, N = int(shape.get("M", 0)), int(shape.get("N", 0))
    if M and N and M <= params["block_m"] and N <= params["block_n"]:
        out["group_m"] = None  # one tile: nothing to group
    return out


def dot_loop(p: dict, a_load: str, b_load: str, acc: str = "acc", dot_extra: str = "") -> str:
    """The K loop shared with fused_mlp: loads of A and B tiles and the dot into `acc`."""
    ws = ", warp_specialize=True" if p.get("warp_specialize") else ""
    return fill(
        """
        for k in tl.range(k_lo, k_hi, BLOCK_K<<ws>>):
            offs_k = k + tl.arange(0, BLOCK_K)
            <<a_load>>
            <<b_load>>
            if DOT_UPCAST:  # the CPU interpreter's dot mishandles bf16; never set on a GPU
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            <<acc>> = tl.dot(a, b, <<acc>>, input_precision=INPUT_PRECISION)<<extra>>
        """,
        ws=ws, a_load=a_load, b_load=b_load, acc=acc, extra=dot_extra,
    )


def group_order(index: str) -> str:
    """Lines that place tile number `index` in group-M order (pid_m, pid_n), from num_pid_m and num_pid_n:
    GROUP_M tile rows at a time, so the programs that run together share B tiles in L2."""
    return fill(
        """
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = <<index>> // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((<<index>> % num_pid_in_group) % group_size_m)
        pid_n = (<<index>> % num_pid_in_group) // group_size_m
        """,
        index=index,
    )


GROUP_M_SWIZZLE = fill(
    """
    # Group-M swizzle: programs that run together share B tiles in L2.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    <<order>>
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    """,
    order=group_order("pid"),
)


def _kernel(p: dict) -> str:
    if p["even_k"]:
        a_ptr_load = """
            if EVEN_K:
                a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak, mask=(offs_m < M)[:, None], other=0.0)
            else:
                a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak, mask=(offs_m < M)[:, None] & (offs_k < k_hi)[None, :], other=0.0)
            """
        b_ptr_load = """
            if EVEN_K:
                b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=(offs_n < N)[None, :], other=0.0)
            else:
                b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=(offs_k < k_hi)[:, None] & (offs_n < N)[None, :], other=0.0)
            """
    else:
        a_ptr_load = "a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak, mask=(offs_m < M)[:, None] & (offs_k < k_hi)[None, :], other=0.0)"
        b_ptr_load = "b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=(offs_k < k_hi)[:, None] & (offs_n < N)[None, :], other=0.0)"
    if p["tma"]:
        a_load = fill(
            """
            if USE_TMA:
                a = a_desc.load([pid_m * BLOCK_M, k])
            else:
                <<ptr>>
            """,
            ptr=a_ptr_load,
        )
        b_load = fill(
            """
            if USE_TMA:
                b = b_desc.load([k, pid_n * BLOCK_N])
            else:
                <<ptr>>
            """,
            ptr=b_ptr_load,
        )
        tma_setup = """
            if USE_TMA:
                # Out-of-range parts of a tile read as zeros, so the K tail needs no mask.
                a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
                b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
            """
    else:
        a_load, b_load, tma_setup = a_ptr_load, b_ptr_load, ""
    kernel = fill(
        """
        @triton.jit
        def _matmul(
            a_ptr, b_ptr, c_ptr, M, N, K,
            stride_am, stride_ak, stride_bk, stride_bn, stride_cs, stride_cm, stride_cn, k_per_split,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            INPUT_PRECISION: tl.constexpr, EVEN_K: tl.constexpr, USE_TMA: tl.constexpr, DOT_UPCAST: tl.constexpr,
        ):
            <<swizzle>>
            # Program (tile, split) covers K in [k_lo, k_hi); with one split that is all of K.
            split = tl.program_id(1)
            k_lo = split * k_per_split
            k_hi = tl.minimum(k_lo + k_per_split, K)
            <<tma_setup>>
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            <<loop>>
            c_ptrs = c_ptr + split * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        """,
        swizzle=GROUP_M_SWIZZLE,
        tma_setup=tma_setup,
        loop=dot_loop(p, a_load, b_load),
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({'BLOCK_M': BLOCK_M, 'BLOCK_N': BLOCK_N, 'BLOCK_K': BLOCK_K}, num_warps=NUM_WARPS, num_stages=NUM_STAGES)]\n"
            "_CONFIGS += [triton.Config({'BLOCK_M': bm, 'BLOCK_N': bn, 'BLOCK_K': bk}, num_warps=w, num_stages=s)\n"
            "             for bm, bn, bk, w, s in ((128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (128, 128, 32, 4, 4))]",
            '["M", "N", "K"]',
        ) + "\n" + kernel
    if p["split_k"] > 1:
        kernel += "\n\n\n" + fill(
            """
            @triton.jit
            def _add_splits(partial_ptr, c_ptr, MN, n_splits, BLOCK: tl.constexpr):
                # The K-split partials of each output, added in a fixed order (repeatable bit for bit).
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                acc = tl.zeros([BLOCK], dtype=tl.float32)
                for s in range(0, n_splits):
                    acc += tl.load(partial_ptr + s * MN + offs, mask=offs < MN, other=0.0)
                tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=offs < MN)
            """
        )
    return kernel


def _launcher(p: dict) -> str:
    if p["autotune"]:
        meta = ""
        grid = "lambda meta: (triton.cdiv(M, meta['BLOCK_M']) * triton.cdiv(N, meta['BLOCK_N']), n_splits)"
        k_split = "triton.cdiv(triton.cdiv(K, SPLIT_K), 128) * 128"  # on the edges of every config's BLOCK_K
    else:
        meta = ", BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES"
        grid = "(triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), n_splits)"
        k_split = "triton.cdiv(triton.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K"
    use_tma = "TMA" if p["tma"] else "False"
    even_k = "K % BLOCK_K == 0 and k_per_split % BLOCK_K == 0" if p["even_k"] and not p["autotune"] else "False"
    if p["split_k"] > 1:
        out = """
            partial = torch.empty((n_splits, M, N), dtype=torch.float32, device=a.device)
            _matmul[grid](
                a, b, partial, M, N, K,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), partial.stride(0), partial.stride(1), partial.stride(2),
                k_per_split, GROUP_M=GROUP_M, INPUT_PRECISION=INPUT_PRECISION, EVEN_K=even_k, USE_TMA=use_tma,
                DOT_UPCAST=_INTERPRETED and a.dtype == torch.bfloat16<<meta>>,
            )
            _add_splits[(triton.cdiv(M * N, 1024),)](partial, c, M * N, n_splits, BLOCK=1024, num_warps=4)
            """
    else:
        out = """
            _matmul[grid](
                a, b, c, M, N, K,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), 0, c.stride(0), c.stride(1),
                k_per_split, GROUP_M=GROUP_M, INPUT_PRECISION=INPUT_PRECISION, EVEN_K=even_k, USE_TMA=use_tma,
                DOT_UPCAST=_INTERPRETED and a.dtype == torch.bfloat16<<meta>>,
            )
            """
    return fill(
        '''
        def kernel_fn(a, b):
            """a @ b for a [M, K] and b [K, N], accumulated in fp32, returned in a's dtype."""
            M, K = a.shape
            K2, N = b.shape
            if K != K2:
                raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
            c = torch.empty((M, N), dtype=a.dtype, device=a.device)
            if M == 0 or N == 0:
                return c
            use_tma = <<use_tma>>
            if use_tma:
                a, b = a.contiguous(), b.contiguous()
                use_tma = _tma_ready(a, b)
            k_per_split = max(<<k_split>>, 1)  # splits of K start on tile edges
            n_splits = triton.cdiv(K, k_per_split) if K else 1
            even_k = <<even_k>>
            grid = <<grid>>
            <<out>>
            return c
        ''',
        use_tma=use_tma,
        k_split=k_split,
        even_k=even_k,
        grid=grid,
        out=fill(out, meta=meta),
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Matmul candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE,
        TMA_READY if p["tma"] else None,
        _kernel(p),
        _launcher(p),
    )


__all__ = ["KERNEL", "METRIC", "SPACE", "DEFAULTS", "render", "effective", "dot_loop", "group_order", "GROUP_M_SWIZZLE"]
