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

OTHER = "other"  # the kind of work no kernel type recognises


def kinds() -> tuple[str, ...]:
    """The kernel types found (autokernel.kernels), then `other`."""
    from autokernel.kernels import kernel_names

    return (*kernel_names(), OTHER)


def recognisers() -> list[tuple[str, Any]]:
    """(type, its `recognise` hook module) in listing order. A hook may define: `OPS` (operator names,
    as `OpCall.short`, that a user's call of names the type) and `OP_PREFIXES`; `MODULES` (module classes
    of the type); `NAMES` (hints in a lower-cased class or function name, underscores dropped) with
    `NAME_RANK` (the lowest rank wins among several) and `NAME_NEEDS_PATTERN` (a name counts only when
    the operators agree); `pattern(ops)` (a module's whole subtree is the type); `OP_PAIR` (head ops,
    tail ops, name: a tail on a head's input in its scope joins its call); `shape(ops)` (the spec shape
    of a call) and `exact(ops)` (whether the spec's formula describes the call; default yes)."""
    from autokernel.kernels import hooks

    return hooks("recognise")


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


def numel(shape: Sequence[int]) -> int:
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


NORM_OPS = frozenset({"pow", "mul", "mean", "add", "rsqrt", "sqrt", "div", "reciprocal", "square", "clamp", "clamp_min"})


def kind_of_op(name: str) -> str:
    """The kernel type of an operator the user called, by its name."""
    base = OpCall(name).short
    for kind, hook in recognisers():
        if base in getattr(hook, "OPS", ()) or base.startswith(tuple(getattr(hook, "OP_PREFIXES", ()))):
            return kind
    return OTHER


# -- modules ----------------------------------------------------------------------------------------
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
    if not ops:
        return None
    for kind, hook in recognisers():
        fn = getattr(hook, "pattern", None)
        if fn is not None and fn(ops):
            return kind
    return None


def _hinted_kind(name: str) -> str | None:
    """The type whose name hint `name` holds (the lowest NAME_RANK where several do), else None."""
    low = name.lower().replace("_", "")
    hinted = [(getattr(hook, "NAME_RANK", 100), i, kind) for i, (kind, hook) in enumerate(recognisers())
              if any(h in low for h in getattr(hook, "NAMES", ()))]
    return min(hinted)[2] if hinted else None


def _classify(by_name: str | None, subtree_op_names: Sequence[str]) -> str | None:
    """A name's hint, as long as the operators agree; else the operators' pattern."""
    ops = _pattern_ops(subtree_op_names)
    if not ops:
        return None
    by_pattern = kind_by_pattern(subtree_op_names)
    if by_name is not None and getattr(dict(recognisers()).get(by_name), "NAME_NEEDS_PATTERN", False):
        return by_name if by_pattern == by_name else None
    if by_name is not None:
        heavy = any(o in MATMUL_OPS or o.startswith(SDPA_PREFIXES) or o in CONV_OPS for o in ops)
        return None if heavy else by_name  # a "norm" that runs matmuls is something else
    return by_pattern


def classify_module(module: nn.Module, subtree_op_names: Sequence[str]) -> str | None:
    """A module's kernel type: by class (a type's `MODULES`: nn.LayerNorm, nn.RMSNorm, ...), or a telling
    class name, as long as the ops agree, or by the pattern of operators its subtree runs; None if neither."""
    by_class = next((kind for kind, hook in recognisers() if isinstance(module, tuple(getattr(hook, "MODULES", ())))),
                    None)
    return _classify(by_class or _hinted_kind(type(module).__name__), subtree_op_names)


def classify_function(func_name: str, subtree_op_names: Sequence[str]) -> str | None:
    """The kernel type of one call of a plain Python function in the model's code (say
    `apply_rotary_pos_emb`), by its name if the ops agree, else by the ops' pattern."""
    return _classify(_hinted_kind(func_name), subtree_op_names)


def op_pairs() -> list[tuple[frozenset, frozenset, str, str]]:
    """(head ops, tail ops, call name, kind) of each type whose one call is two operators in a row."""
    return [(*hook.OP_PAIR, kind) for kind, hook in recognisers() if getattr(hook, "OP_PAIR", None)]


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


def matmul_mnk(op: OpCall) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a matmul-like call, from its recorded shapes."""
    t = [s for s, _ in op.tensor_args()]
    base = op.short
    try:
        if base == "linear":
            x, w = t[0], t[1]
            return 1, numel(x[:-1]), w[0], w[1]
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
                return 1, numel(a[:-1]), 1, a[-1]
            if len(b) == 2:
                return 1, numel(a[:-1]), b[1], a[-1]
            batch = numel(_broadcast([a[:-2], b[:-2]]))
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
    out_elems = x[0] * w[0] * numel(out_sp)
    flops = 2 * out_elems * (x[1] // groups) * numel(w[2:])
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
    in_bytes = sum(numel(s) * _DTYPE_BYTES.get(d, 4) for s, d in args)
    mnk = matmul_mnk(op) if base in MATMUL_OPS else None
    if mnk:
        b, m, n, k = mnk
        return in_bytes + b * m * n * esize, 2 * b * m * n * k
    if base.startswith(SDPA_PREFIXES) and len(args) >= 3:
        q, k = args[0][0], args[1][0]
        if len(q) >= 2 and len(k) >= 2:
            flops = 4 * numel(q[:-1]) * k[-2] * q[-1]
            causal = any(v is True for v in op.concrete[3:7])
            return in_bytes + numel(q) * esize, flops // 2 if causal else flops
    if base in CONV_OPS:
        fo = _conv_flops_out(op)
        if fo:
            return in_bytes + fo[1] * esize, fo[0]
    first = args[0][0]
    n = numel(first)
    if base in REDUCE_OPS:
        dims = _reduced_dims(op, len(first))
        out = n // max(1, numel([first[d] for d in dims])) if first else 1
        return numel(first) * esize + out * esize, n
    if base in ("cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward"):
        return in_bytes + 4, 4 * n
    if base == "embedding" and len(args) >= 2:
        w, idx = args[0][0], args[1][0]
        out = numel(idx) * (w[-1] if w else 1) * esize
        return numel(idx) * _DTYPE_BYTES.get(args[1][1], 8) + 2 * out, 0
    if base in ("to", "_to_copy"):
        code = op.arg(1)
        out_size = _SCALAR_TYPE_BYTES.get(code, esize) if isinstance(code, int) and not isinstance(code, bool) else esize
        return n * esize + n * out_size, 0
    if base == "cat":
        return 2 * in_bytes, 0
    if base in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "batch_norm",
                "native_batch_norm", "_native_batch_norm_legit_no_training", "softmax", "_softmax", "log_softmax", "_log_softmax"):
        return in_bytes + n * esize, 5 * n
    out = numel(_broadcast(s for s, _ in args))
    return in_bytes + out * esize, out


def cost_known(op: OpCall) -> bool:
    """Whether `op_cost` can say what the op moves: not for ops on tensor lists (cat, stack), whose
    shapes the profiler does not record."""
    if op.short in VIEW_OPS:
        return True
    return not any(d == "TensorList" for d in op.dtypes) or bool(op.tensor_args())


# -- a call in a kernel spec's terms ----------------------------------------------------------------
def rows_cols(ops: Sequence[OpCall], names: set[str]) -> dict[str, int] | None:
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
            cols = numel(shape[-k:]) if shape else 1
        else:
            dims = _reduced_dims(op, len(shape))
            cols = numel([shape[d] for d in dims]) if shape else 1
        n = numel(shape)
        if best is None or n > best[0]:
            best = (n, {"rows": max(1, n // max(cols, 1)), "cols": cols})
    return best[1] if best else None


def kernel_shape(kind: str, ops: Sequence[OpCall]) -> dict[str, Any] | None:
    """The spec shape (keys as in the type's spec) of one call of a kernel type, derived from the
    operators it ran (the type's recognise hook); None when the ops do not say (or for `other`)."""
    fn = getattr(dict(recognisers()).get(kind), "shape", None)
    return fn(ops) if fn is not None else None


def exact_spec_shape(kind: str, ops: Sequence[OpCall]) -> bool:
    """Whether the spec's bytes formula describes this call (a batched matmul with per-batch
    weights is not the spec's [M,K]x[K,N], so its bytes come from the operators instead)."""
    fn = getattr(dict(recognisers()).get(kind), "exact", None)
    return fn(ops) if fn is not None else True


def main_dtype(ops: Sequence[OpCall]) -> str | None:
    """The dtype of the biggest floating-point tensor the call reads ('fp32' | 'fp16' | 'bf16' | ...)."""
    best = None
    for op in ops:
        for shape, dt in op.tensor_args():
            if dt in ("float", "c10::Half", "c10::BFloat16", "double") and (best is None or numel(shape) > best[0]):
                best = (numel(shape), dt)
    return dtype_label(best[1]) if best else None
