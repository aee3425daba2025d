"""Flash-attention template: softmax(q k^T / sqrt(D) [+ causal mask]) v for q, k, v [B, H, S, D].

Compute-bound at long sequences. One program owns BLOCK_M queries of one (batch, head) and walks
the keys in BLOCK_N blocks with an online softmax (running max and rescaled running sum), so the
S x S scores never reach memory. A candidate is the Triton starter
(kernels/flash_attention/starter_triton.py) with other values for its knob constants; at DEFAULTS it
is the starter, byte for byte.
"""

from __future__ import annotations

from . import Knob
from ._source import render_starter

KERNEL = "flash_attention"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (None, 16, 32, 64, 128),
         "BLOCK_M={new} queries per program instead of {old}: more queries reuse each loaded K/V block, fewer give more programs over seq={seq} (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("block_n", 1, (None, 16, 32, 64, 128),
         "BLOCK_N={new} keys per step instead of {old}: larger steps mean fewer iterations and rescales, at the cost of registers for the scores (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_warps", 1, (None, 4, 8),
         "{new} warps instead of {old} per query block: more warps hide latency, fewer leave more registers for the accumulator (head_dim={head_dim}) (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_stages", 1, (None, 1, 2, 3, 4),
         "{new} pipeline stages instead of {old}: prefetch the next K/V blocks while this one is multiplied (None: the starter's tiles, autotuned where the starter autotunes)"),
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
    "block_m": None,  # None: the starter's tiles (SMALL_TILE, FP32_TILE, or TUNED_TILES when autotuned)
    "block_n": None,
    "num_warps": None,
    "num_stages": None,
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


def render(params: dict) -> str:
    """The flash_attention starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})


__all__ = ["KERNEL", "METRIC", "SPACE", "DEFAULTS", "render", "effective"]
