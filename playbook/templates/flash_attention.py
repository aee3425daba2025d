"""Flash-attention template: softmax(q k^T / sqrt(D) [+ causal mask]) v for q, k, v [B, H, S, D].

Compute-bound at long sequences. One program owns BLOCK_M queries of one (batch, head) and walks
the keys in BLOCK_N blocks with an online softmax (running max and rescaled running sum), so the
S x S scores never reach memory.
"""

from __future__ import annotations

from . import Knob, knob_header
from ._source import IMPORTS, INTERPRETER_NOTE, eviction_arg, fill, join

KERNEL = "flash_attention"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (16, 32, 64, 128),
         "BLOCK_M={new} queries per program instead of {old}: more queries reuse each loaded K/V block, fewer give more programs over seq={seq}"),
    Knob("block_n", 1, (16, 32, 64, 128),
         "BLOCK_N={new} keys per step instead of {old}: larger steps mean fewer iterations and rescales, at the cost of registers for the scores"),
    Knob("num_warps", 1, (4, 8),
         "{new} warps instead of {old} per query block: more warps hide latency, fewer leave more registers for the accumulator (head_dim={head_dim})"),
    Knob("num_stages", 1, (1, 2, 3, 4),
         "{new} pipeline stages instead of {old}: prefetch the next K/V blocks while this one is multiplied"),
    Knob("kv_eviction", 2, ("", "evict_last"),
         "eviction hint {new!r} on K and V (was {old!r}): every query block of a head re-reads them, so keeping them in L2 saves HBM traffic", ordered=False),
    Knob("exp2", 3, (True, False),
         "exp2={new} (was {old}): fold softmax_scale * log2(e) into one multiply and use the native ex2 instead of exp"),
    # No warp-specialization knob here: Triton (3.9) fails to compile this loop warp-specialized for
    # sm_90, so the move could only ever cost an experiment. Tier 5 has no move for this kernel yet.
    Knob("causal_skip", 6, (True, False),
         "causal_skip={new} (was {old}): with a causal mask, key blocks entirely above the diagonal contribute nothing; stopping the loop at the diagonal halves the work"),
    Knob("prescale_q", 6, (False, True),
         "prescale_q={new} (was {old}): scale q once when it is loaded instead of every [BLOCK_M, BLOCK_N] score block"),
)

DEFAULTS = {
    "block_m": 64,
    "block_n": 64,
    "num_warps": 4,
    "num_stages": 2,
    "kv_eviction": "",
    "exp2": True,
    "causal_skip": True,
    "prescale_q": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = dict(params)
    if "causal" in shape and not shape["causal"]:
        out["causal_skip"] = None  # nothing to skip without a causal mask
    return out


def _kernel(p: dict) -> str:
    kev = eviction_arg(p["kv_eviction"])
    if p["exp2"]:
        scale_line = "qk_scale = sm_scale * 1.4426950408889634  # exp(x) == exp2(x * log2(e))"
        exp = "tl.exp2"
    else:
        scale_line = "qk_scale = sm_scale"
        exp = "tl.exp"
    if p["prescale_q"]:
        q_line = "q = (q.to(tl.float32) * qk_scale).to(q_ptr.dtype.element_ty)"
        s_line = "s = tl.dot(q, tl.trans(k))"
    else:
        q_line = ""
        s_line = "s = tl.dot(q, tl.trans(k)) * qk_scale"
    hi = "hi = seq"
    if p["causal_skip"]:
        hi = """
            hi = seq
            if CAUSAL:
                hi = tl.minimum((start_m + 1) * BLOCK_M, seq)  # no key block above the diagonal
            """
    return fill(
        """
        @triton.jit
        def _flash_attention(
            q_ptr, k_ptr, v_ptr, o_ptr, n_heads, seq, head_dim, sm_scale,
            sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
            DOT_UPCAST: tl.constexpr,
        ):
            start_m = tl.program_id(0)
            bh = tl.program_id(1)
            b = (bh // n_heads).to(tl.int64)
            h = (bh % n_heads).to(tl.int64)
            offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_d = tl.arange(0, BLOCK_D)
            d_mask = offs_d < head_dim
            <<scale_line>>
            q = tl.load(q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :],
                        mask=(offs_m < seq)[:, None] & d_mask[None, :], other=0.0)
            <<q_line>>
            if DOT_UPCAST:  # the CPU interpreter's dot mishandles bf16; never set on a GPU
                q = q.to(tl.float32)
            m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
            <<hi>>
            for start_n in tl.range(0, hi, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                kv_mask = (offs_n < seq)[:, None] & d_mask[None, :]
                k = tl.load(k_ptr + b * skb + h * skh + offs_n[:, None] * sks + offs_d[None, :], mask=kv_mask, other=0.0<<kev>>)
                v = tl.load(v_ptr + b * svb + h * svh + offs_n[:, None] * svs + offs_d[None, :], mask=kv_mask, other=0.0<<kev>>)
                if DOT_UPCAST:
                    k = k.to(tl.float32)
                    v = v.to(tl.float32)
                <<s_line>>
                valid = (offs_n < seq)[None, :]
                if CAUSAL:
                    valid = valid & (offs_m[:, None] >= offs_n[None, :])
                s = tl.where(valid, s, -float("inf"))
                # Online softmax: raise the running max, rescale what was summed so far.
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
                p = <<exp>>(s - m_safe[:, None])
                alpha = <<exp>>(m_i - m_safe)
                l_i = l_i * alpha + tl.sum(p, axis=1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            tl.store(o_ptr + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
                     mask=(offs_m < seq)[:, None] & d_mask[None, :])
        """,
        scale_line=scale_line, q_line=q_line, s_line=s_line, hi=hi, kev=kev, exp=exp,
    )


def _launcher(p: dict) -> str:
    return fill(
        '''
        def kernel_fn(q, k, v, causal=False):
            """softmax(q k^T / sqrt(D), causal if asked) v for q, k, v [B, H, S, D]; output in q's dtype."""
            batch, heads, seq, head_dim = q.shape
            q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
            o = torch.empty((batch, heads, seq, head_dim), dtype=q.dtype, device=q.device)
            if o.numel() == 0:
                return o
            block_d = max(triton.next_power_of_2(head_dim), 16)
            grid = (triton.cdiv(seq, BLOCK_M), batch * heads)
            _flash_attention[grid](
                q, k, v, o, heads, seq, head_dim, 1.0 / head_dim ** 0.5,
                q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=block_d, CAUSAL=bool(causal),
                DOT_UPCAST=_INTERPRETED and q.dtype == torch.bfloat16,
                num_warps=NUM_WARPS, num_stages=NUM_STAGES,
            )
            return o
        '''
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Flash-attention candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE,
        _kernel(p),
        _launcher(p),
    )
