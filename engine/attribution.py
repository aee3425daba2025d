"""What kernel type a piece of a model is, what shape it has in a kernel spec's terms, and what it
must at least move and compute.

Two ways to see a kernel type, because model code hides them both ways:
- by module: a hand-written RMSNorm is pow/mean/add/rsqrt/mul at the operator level, but one
  module; a module is classified by its class name (validated against what it runs) or, whatever
  its name, by the pattern of operators its whole subtree runs;
- by operator: what the user called (the outermost op, e.g. aten::linear, not the addmm inside it)
  names the type for work outside any classified module.

Everything here works on `OpCall`s, plain records of the profiler's operator events (name, input
shapes, dtypes and the scalar arguments torch.profiler records), so it is testable without a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
from torch import nn

KINDS = (
    "matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp",
    "cross_entropy", "rotary_embedding", "reduce", "other",
)


@dataclass
class OpCall:
    """One operator call as the profiler recorded it."""

    name: str  # "aten::mean"
    shapes: list = field(default_factory=list)  # per argument: a shape (list of ints), [] for non-tensors, or a list of shapes
    dtypes: list = field(default_factory=list)  # per argument: "float", "c10::BFloat16", "Scalar", ...
    concrete: list = field(default_factory=list)  # per argument: the scalar value recorded, or None

    @property
    def short(self) -> str:
        """`mean` for `aten::mean`, `add` for `aten::add_` (in-place and out-of-place look alike)."""
        base = self.name.split("::", 1)[-1]
        if base.endswith("_") and not base.startswith("_"):
            base = base[:-1]
        return base

    def arg(self, i: int) -> Any:
        return self.concrete[i] if i < len(self.concrete) else None

    def tensor_args(self) -> list[tuple[list[int], str]]:
        """(shape, dtype string) of each tensor argument, tensor lists flattened."""
        out = []
        for i, shape in enumerate(self.shapes):
            dt = self.dtypes[i] if i < len(self.dtypes) else ""
            if dt in _DTYPE_BYTES:
                if shape and isinstance(shape[0], (list, tuple)):
                    out.extend((list(s), dt) for s in shape)
                elif isinstance(shape, (list, tuple)):
                    out.append((list(shape), dt))
            elif shape and isinstance(shape[0], (list, tuple)):  # TensorList: dtype recorded as the list's
                out.extend((list(s), "float") for s in shape if isinstance(s, (list, tuple)))
        return out


# -- dtypes as the profiler spells them -------------------------------------------------------------
_DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
_DTYPE_NAMES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64",
                "long int": "int64", "int": "int32", "bool": "bool"}
# c10::ScalarType codes, as recorded in concrete inputs of `to`/`_to_copy`
_SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_label(profiler_dtype: str) -> str:
    return _DTYPE_NAMES.get(profiler_dtype, profiler_dtype)


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def _broadcast(shapes: Iterable[Sequence[int]]) -> list[int]:
    shapes = [list(s) for s in shapes]
    if not shapes:
        return []
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for i, d in enumerate([1] * (n - len(s)) + s):
            if d != 1:
                out[i] = d
    return out


# -- operator names ---------------------------------------------------------------------------------
VIEW_OPS = frozenset({
    "view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "t", "permute", "expand", "expand_as",
    "unsqueeze", "squeeze", "slice", "select", "as_strided", "alias", "detach", "narrow", "chunk", "split",
    "split_with_sizes", "unbind", "flatten", "unflatten", "view_as", "lift_fresh", "numpy_T", "movedim",
    "empty", "empty_like", "empty_strided", "resolve_conj", "resolve_neg", "size", "stride", "dim",
})
CAST_OPS = frozenset({"to", "_to_copy", "type_as", "copy", "contiguous", "clone", "float", "half", "bfloat16"})
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "einsum", "addmv", "mv", "dot", "_addmm_activation"})
SDPA_PREFIXES = ("scaled_dot_product_attention", "_scaled_dot_product_", "_flash_attention", "_efficient_attention")
REDUCE_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "logsumexp"})
CONV_OPS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose2d", "cudnn_convolution", "mkldnn_convolution"})


def kind_of_op(name: str) -> str:
    """The kernel type of an operator the user called, by its name."""
    base = OpCall(name).short
    if base in MATMUL_OPS:
        return "matmul"
    if base.startswith(SDPA_PREFIXES):
        return "flash_attention"
    if base in ("softmax", "_softmax", "_safe_softmax"):
        return "softmax"
    if base in ("layer_norm", "native_layer_norm"):
        return "layernorm"
    if base in ("rms_norm", "_fused_rms_norm"):
        return "rmsnorm"
    if base in ("cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward"):
        return "cross_entropy"
    if base in REDUCE_OPS:
        return "reduce"
    return "other"


# -- modules ----------------------------------------------------------------------------------------
_NAME_HINTS = (  # (substring of the lower-cased class name, kind)
    ("rmsnorm", "rmsnorm"), ("layernorm", "layernorm"), ("softmax", "softmax"), ("crossentropy", "cross_entropy"),
    ("rotary", "rotary_embedding"), ("rope", "rotary_embedding"), ("swiglu", "fused_mlp"), ("feedforward", "fused_mlp"),
    ("mlp", "fused_mlp"), ("ffn", "fused_mlp"),
)


def _pattern_ops(op_names: Iterable[str]) -> list[str]:
    """The operators that say what a module computes: views, casts and allocations left out."""
    out = []
    for n in op_names:
        base = OpCall(n).short
        if base in VIEW_OPS or base in CAST_OPS:
            continue
        out.append(base)
    return out


def kind_by_pattern(op_names: Iterable[str]) -> str | None:
    """The kernel type whose operator pattern a module's whole subtree matches, else None."""
    ops = _pattern_ops(op_names)
    s = set(ops)
    if not s:
        return None
    if s <= {"layer_norm", "native_layer_norm"}:
        return "layernorm"
    if s <= {"rms_norm", "_fused_rms_norm"}:
        return "rmsnorm"
    if s <= {"softmax", "_softmax"}:
        return "softmax"
    ce_ops = {"cross_entropy_loss", "log_softmax", "_log_softmax", "nll_loss", "nll_loss_nd", "mean", "sum"}
    if s <= ce_ops and ("cross_entropy_loss" in s or ("log_softmax" in s and s & {"nll_loss", "nll_loss_nd"})):
        return "cross_entropy"
    norm_ops = {"pow", "mul", "mean", "add", "rsqrt", "sqrt", "div", "reciprocal", "square", "clamp", "clamp_min"}
    has_root = bool(s & {"rsqrt", "sqrt", "reciprocal", "div"})
    has_square = bool(s & {"pow", "square", "mul"})
    if s <= norm_ops and "mean" in s and has_root and has_square:
        return "rmsnorm"
    if s <= norm_ops | {"sub", "var", "var_mean", "std"} and "sub" in s and (s & {"mean", "var_mean"}) and has_root:
        return "layernorm"
    if s <= {"exp", "sum", "div", "amax", "max", "sub", "mul"} and {"exp", "sum", "div"} <= s:
        return "softmax"
    matmuls = sum(1 for o in ops if o in MATMUL_OPS)
    if matmuls == 3 and "silu" in s and "mul" in s and s <= MATMUL_OPS | {"silu", "mul"}:
        return "fused_mlp"
    if s <= {"mul", "add", "sub", "cat", "neg", "stack", "index", "getitem"} and {"mul", "add", "cat", "neg"} <= s:
        return "rotary_embedding"
    return None


def _hinted_kind(name: str) -> str | None:
    low = name.lower().replace("_", "")
    for hint, kind in _NAME_HINTS:
        if hint in low:
            return kind
    return None


def _classify(by_name: str | None, subtree_op_names: Sequence[str]) -> str | None:
    """A name's hint, as long as the operators agree; else the operators' pattern."""
    ops = _pattern_ops(subtree_op_names)
    if not ops:
        return None
    by_pattern = kind_by_pattern(subtree_op_names)
    if by_name == "fused_mlp":
        return "fused_mlp" if by_pattern == "fused_mlp" else None  # a plain GELU MLP is just matmuls
    if by_name is not None:
        heavy = any(o in MATMUL_OPS or o.startswith(SDPA_PREFIXES) or o in CONV_OPS for o in ops)
        return None if heavy else by_name  # a "norm" that runs matmuls is something else
    return by_pattern


def classify_module(module: nn.Module, subtree_op_names: Sequence[str]) -> str | None:
    """A module's kernel type: by class (nn.LayerNorm, nn.RMSNorm, ..., or a telling class name,
    as long as the ops agree) or by the pattern of operators its subtree runs; None if neither."""
    if isinstance(module, nn.LayerNorm):
        by_class = "layernorm"
    elif hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm):
        by_class = "rmsnorm"
    elif isinstance(module, nn.Softmax):
        by_class = "softmax"
    elif isinstance(module, nn.CrossEntropyLoss):
        by_class = "cross_entropy"
    else:
        by_class = _hinted_kind(type(module).__name__)
    return _classify(by_class, subtree_op_names)


def classify_function(func_name: str, subtree_op_names: Sequence[str]) -> str | None:
    """The kernel type of one call of a plain Python function in the model's code (say
    `apply_rotary_pos_emb`), by its name if the ops agree, else by the ops' pattern."""
    return _classify(_hinted_kind(func_name), subtree_op_names)


# -- bytes and FLOPs of an operator -----------------------------------------------------------------
def _reduced_dims(op: OpCall, ndim: int) -> list[int]:
    dim = op.arg(1)
    if isinstance(dim, bool) or dim is None:
        return list(range(ndim))
    if isinstance(dim, int):
        dims = [dim]
    elif isinstance(dim, (list, tuple)) and all(isinstance(d, int) for d in dim):
        dims = list(dim) or list(range(ndim))
    else:
        return list(range(ndim))
    return sorted({d % ndim for d in dims}) if ndim else []


def _matmul_mnk(op: OpCall) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a matmul-like call, from its recorded shapes."""
    t = [s for s, _ in op.tensor_args()]
    base = op.short
    try:
        if base == "linear":
            x, w = t[0], t[1]
            return 1, _numel(x[:-1]), w[0], w[1]
        if base in ("addmm", "_addmm_activation"):
            a, b = t[1], t[2]
            return 1, a[0], b[1], a[1]
        if base == "mm":
            a, b = t[0], t[1]
            return 1, a[0], b[1], a[1]
        if base == "bmm":
            a, b = t[0], t[1]
            return a[0], a[1], b[2], a[2]
        if base == "baddbmm":
            a, b = t[1], t[2]
            return a[0], a[1], b[2], a[2]
        if base == "matmul":
            a, b = t[0], t[1]
            if len(b) == 1:
                return 1, _numel(a[:-1]), 1, a[-1]
            if len(b) == 2:
                return 1, _numel(a[:-1]), b[1], a[-1]
            batch = _numel(_broadcast([a[:-2], b[:-2]]))
            m = a[-2] if len(a) >= 2 else 1
            return batch, m, b[-1], b[-2]
        if base in ("mv", "addmv"):
            a = t[0] if base == "mv" else t[1]
            return 1, a[0], 1, a[1]
        if base == "dot":
            return 1, 1, 1, t[0][0]
    except (IndexError, TypeError):
        return None
    return None


def _conv_flops_out(op: OpCall) -> tuple[int, int] | None:
    """(FLOPs, output elements) of a convolution from its shapes and recorded stride/padding."""
    t = [s for s, _ in op.tensor_args()]
    if len(t) < 2 or len(t[0]) < 3:
        return None
    x, w = t[0], t[1]
    spatial = len(x) - 2
    base = op.short
    if base in ("conv1d", "conv2d", "conv3d"):
        stride, padding, dilation, groups = op.arg(3), op.arg(4), op.arg(5), op.arg(6)
    else:
        stride, padding, dilation, groups = op.arg(3), op.arg(4), op.arg(5), op.arg(8)

    def per_dim(v, default):
        if isinstance(v, (list, tuple)) and len(v) == spatial and all(isinstance(i, int) for i in v):
            return list(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return [v] * spatial
        return [default] * spatial

    stride, dilation = per_dim(stride, 1), per_dim(dilation, 1)
    if isinstance(padding, str):  # "same" / "valid"
        out_sp = [math.ceil(x[2 + i] / stride[i]) if padding == "same" else x[2 + i] - dilation[i] * (w[2 + i] - 1) for i in range(spatial)]
    else:
        padding = per_dim(padding, 0)
        out_sp = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
    groups = groups if isinstance(groups, int) and groups > 0 else 1
    out_elems = x[0] * w[0] * _numel(out_sp)
    flops = 2 * out_elems * (x[1] // groups) * _numel(w[2:])
    return flops, out_elems


def op_cost(op: OpCall) -> tuple[int, int]:
    """(bytes, FLOPs) an operator must at least move and do: each input read once, the output
    written once (its size inferred from the op), 2*M*N*K for matmuls, views free."""
    base = op.short
    if base in VIEW_OPS:
        return 0, 0
    args = op.tensor_args()
    if not args:
        return 0, 0
    esize = _DTYPE_BYTES.get(args[0][1], 4)
    in_bytes = sum(_numel(s) * _DTYPE_BYTES.get(d, 4) for s, d in args)
    mnk = _matmul_mnk(op) if base in MATMUL_OPS else None
    if mnk:
        b, m, n, k = mnk
        return in_bytes + b * m * n * esize, 2 * b * m * n * k
    if base.startswith(SDPA_PREFIXES) and len(args) >= 3:
        q, k = args[0][0], args[1][0]
        if len(q) >= 2 and len(k) >= 2:
            flops = 4 * _numel(q[:-1]) * k[-2] * q[-1]
            causal = any(v is True for v in op.concrete[3:7])
            return in_bytes + _numel(q) * esize, flops // 2 if causal else flops
    if base in CONV_OPS:
        fo = _conv_flops_out(op)
        if fo:
            return in_bytes + fo[1] * esize, fo[0]
    first = args[0][0]
    n = _numel(first)
    if base in REDUCE_OPS:
        dims = _reduced_dims(op, len(first))
        out = n // max(1, _numel([first[d] for d in dims])) if first else 1
        return _numel(first) * esize + out * esize, n
    if base in ("cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward"):
        return in_bytes + 4, 4 * n
    if base == "embedding" and len(args) >= 2:
        w, idx = args[0][0], args[1][0]
        out = _numel(idx) * (w[-1] if w else 1) * esize
        return _numel(idx) * _DTYPE_BYTES.get(args[1][1], 8) + 2 * out, 0
    if base in ("to", "_to_copy"):
        code = op.arg(1)
        out_size = _SCALAR_TYPE_BYTES.get(code, esize) if isinstance(code, int) and not isinstance(code, bool) else esize
        return n * esize + n * out_size, 0
    if base == "cat":
        return 2 * in_bytes, 0
    if base in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "batch_norm",
                "native_batch_norm", "_native_batch_norm_legit_no_training", "softmax", "_softmax", "log_softmax", "_log_softmax"):
        return in_bytes + n * esize, 5 * n
    out = _numel(_broadcast(s for s, _ in args))
    return in_bytes + out * esize, out


def cost_known(op: OpCall) -> bool:
    """Whether `op_cost` can say what the op moves: not for ops on tensor lists (cat, stack), whose
    shapes the profiler does not record."""
    if op.short in VIEW_OPS:
        return True
    return not any(d == "TensorList" for d in op.dtypes) or bool(op.tensor_args())


# -- a call in a kernel spec's terms ----------------------------------------------------------------
def _rows_cols(ops: Sequence[OpCall], names: set[str]) -> dict[str, int] | None:
    """rows/cols of a row-wise kernel from its reduction op (the biggest one), any reduced dims."""
    best = None
    for op in ops:
        base = op.short
        if base not in names:
            continue
        args = op.tensor_args()
        if not args:
            continue
        shape = args[0][0]
        if base in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm"):
            norm = op.arg(1)
            k = len(norm) if isinstance(norm, (list, tuple)) and norm else 1
            cols = _numel(shape[-k:]) if shape else 1
        else:
            dims = _reduced_dims(op, len(shape))
            cols = _numel([shape[d] for d in dims]) if shape else 1
        n = _numel(shape)
        if best is None or n > best[0]:
            best = (n, {"rows": max(1, n // max(cols, 1)), "cols": cols})
    return best[1] if best else None


def kernel_shape(kind: str, ops: Sequence[OpCall]) -> dict[str, Any] | None:
    """The spec shape (keys as in docs/ARCHITECTURE.md) of one call of a kernel type, derived from
    the operators it ran; None when the ops do not say (or for `other`)."""
    if kind == "rmsnorm":
        return _rows_cols(ops, {"mean", "rms_norm", "_fused_rms_norm", "norm", "linalg_vector_norm", "sum"})
    if kind == "layernorm":
        return _rows_cols(ops, {"layer_norm", "native_layer_norm", "mean", "var", "var_mean"})
    if kind == "softmax":
        return _rows_cols(ops, {"softmax", "_softmax", "_safe_softmax", "sum", "amax"})
    if kind == "reduce":
        return _rows_cols(ops, REDUCE_OPS)
    if kind == "cross_entropy":
        for op in ops:
            if op.short in ("cross_entropy_loss", "log_softmax", "_log_softmax", "nll_loss", "nll_loss_nd", "nll_loss_forward"):
                args = op.tensor_args()
                if args and len(args[0][0]) >= 2:
                    shape = args[0][0]
                    return {"rows": _numel(shape) // shape[1], "vocab": shape[1]}
        return None
    if kind == "flash_attention":
        for op in ops:
            if op.short.startswith(SDPA_PREFIXES):
                args = op.tensor_args()
                if args and len(args[0][0]) == 4:
                    b, h, s, d = args[0][0]
                    causal = any(v is True for v in op.concrete[3:7])
                    return {"batch": b, "heads": h, "seq": s, "head_dim": d, "causal": causal}
        return None
    if kind == "rotary_embedding":
        best = None
        for op in ops:
            if op.short == "mul":
                for shape, _ in op.tensor_args():
                    if len(shape) in (3, 4) and (best is None or _numel(shape) > _numel(best)):
                        best = shape
        if best is None:
            return None
        b, h, s, d = best if len(best) == 4 else (best[0], 1, best[1], best[2])
        return {"batch": b, "heads": h, "seq": s, "head_dim": d}
    if kind == "matmul":
        for op in ops:
            mnk = _matmul_mnk(op) if op.short in MATMUL_OPS else None
            if mnk:
                b, m, n, k = mnk
                return {"M": b * m, "N": n, "K": k}
        return None
    if kind == "fused_mlp":
        mms = [(op, _matmul_mnk(op)) for op in ops if op.short in MATMUL_OPS]
        mms = [(op, x) for op, x in mms if x]
        if len(mms) < 3:
            return None
        _, (b, m, n, k) = max(mms, key=lambda t: t[1][2])  # gate/up: the widest output
        return {"tokens": b * m, "hidden": k, "intermediate": n}
    return None


def exact_spec_shape(kind: str, ops: Sequence[OpCall]) -> bool:
    """Whether the spec's bytes formula describes this call (a batched matmul with per-batch
    weights is not the spec's [M,K]x[K,N], so its bytes come from the operators instead)."""
    if kind != "matmul":
        return True
    for op in ops:
        mnk = _matmul_mnk(op) if op.short in MATMUL_OPS else None
        if mnk:
            return mnk[0] == 1
    return False


def main_dtype(ops: Sequence[OpCall]) -> str | None:
    """The dtype of the biggest floating-point tensor the call reads ('fp32' | 'fp16' | 'bf16' | ...)."""
    best = None
    for op in ops:
        for shape, dt in op.tensor_args():
            if dt in ("float", "c10::Half", "c10::BFloat16", "double") and (best is None or _numel(shape) > best[0]):
                best = (_numel(shape), dt)
    return dtype_label(best[1]) if best else None
