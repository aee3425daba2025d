"""Swap fast kernels into a PyTorch model, where (and only where) a call matches a kernel's contract.

Standalone on purpose: this file imports nothing but torch, because `autokernel export` copies it
verbatim into the exported package (as `_patch.py`), so the exported `patch(model)` behaves exactly
as the integration that was checked; a KernelBench ModelNew carries it inline (engine/model_new.py),
and the planner asks it which kernel types a model's calls reach (`routed_calls`, engine/routing.py).

Two ways in:
- module replacement: the `forward` of a module whose job is one kernel type is replaced: RMSNorm
  modules (a 1-D `weight` and `eps`/`variance_epsilon`), `nn.LayerNorm`, SwiGLU MLP modules
  (gate/up/down, w_gate/w_up/w_down or w1/w3/w2 linears without bias), rotary-embedding modules
  (`cos`/`sin` tables [max_seq, D], forward(x [B, H, S, D]));
- function replacement: a TorchFunctionMode, active only during the patched model's forward, routes
  softmax over the last dim, scaled_dot_product_attention, cross_entropy, matmuls, F.linear (so every
  nn.Linear) and sums over the last dim to the kernels.
A call that does not fit (wrong dtype, dims, flags, or one that needs a gradient: a kernel has no
backward) falls through to PyTorch. The first call of each (site, shapes, dtype) is also run through
PyTorch and compared within the kernel's tolerance; a kernel that disagrees is never used at that site
again, so a wrong match cannot change the output.

torch.compile: every kernel type is a custom operator (`torch.library.custom_op`, with a fake
implementation that gives the output's shape and dtype), one per kind in a namespace of this file's
own (derived from the module's name, so two exported packages load into one process, and a second
copy of one gets the next free namespace). While Dynamo traces, a route emits that operator, so
`torch.compile(patched, fullgraph=True)` sees the whole forward and Inductor fuses around the kernels.
The operator's implementation is where the first-call check lives: it runs eagerly (the compiled graph
calls it with real tensors), compares the kernel with PyTorch at the first call of each shape, and
returns PyTorch's result at a site that disagreed; so a compiled model is as safe as an eager one and
nothing the trace sees depends on which sites passed. Eager calls run that same implementation
directly (the dispatcher's ~50 us a call would tax the patched eager forward). `custom_op` rather
than `triton_op`: a kernel may be CUDA C++ and launches its own kernels, and the check is Python.
"""

from __future__ import annotations

import itertools
import math
import re
import weakref
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_DEFAULT_TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
FUNCTION_KINDS = ("softmax", "flash_attention", "cross_entropy", "matmul", "reduce")


class KernelEntry:
    """One kept kernel: its `kernel_fn`, the dtypes it was checked on, and its tolerances."""

    def __init__(self, kind, fn, dtypes=None, tolerances=None):
        self.kind = kind
        self.fn = fn
        names = dtypes if dtypes else list(_DTYPES)
        self.dtypes = {_DTYPES[d] if isinstance(d, str) else d for d in names}
        self.tol = dict(_DEFAULT_TOL)
        for k, v in (tolerances or {}).items():
            self.tol[_DTYPES[k] if isinstance(k, str) else k] = tuple(v)

    def accepts(self, *tensors):
        return all(isinstance(t, torch.Tensor) and t.dtype in self.dtypes for t in tensors)


class PatchStats:
    """What the patch did: modules swapped, calls that went to a kernel, fall-throughs, mismatches.

    The counts grow as the patched model runs; `print(stats)` says where they stand per kernel kind (an
    exported package's `patch(model)` returns this, and a user's first move is to print it)."""

    def __init__(self, kinds=()):
        self.kinds = list(kinds)  # the kernel kinds patch() was given, in its order
        self.modules = defaultdict(int)
        self.calls = defaultdict(int)
        self.fallbacks = defaultdict(int)
        self.mismatches = defaultdict(list)

    def as_list(self, kinds):
        return [{"kind": k, "modules": self.modules[k], "calls": self.calls[k], "fallbacks": self.fallbacks[k],
                 "mismatches": list(self.mismatches[k])} for k in kinds]

    def _describe(self, kind):
        modules, calls = self.modules.get(kind, 0), self.calls.get(kind, 0)  # .get: printing adds no keys
        fallbacks, mismatches = self.fallbacks.get(kind, 0), self.mismatches.get(kind) or []
        words = [f"{modules} module{'s' if modules != 1 else ''} swapped"] if kind not in FUNCTION_KINDS or modules else []
        words.append(f"{calls} call{'s' if calls != 1 else ''} to the kernel")
        if fallbacks:
            words.append(f"{fallbacks} left to PyTorch")
        if mismatches:
            words.append(f"refused at {len(mismatches)} site(s): {mismatches[0]}")
        return f"{kind}: {', '.join(words)}"

    def __repr__(self):
        seen = [k for d in (self.modules, self.calls, self.fallbacks, self.mismatches) for k in d]
        kinds = list(dict.fromkeys(self.kinds + seen))
        if not kinds:
            return "PatchStats(no kernels)"
        return f"PatchStats({'; '.join(self._describe(k) for k in kinds)})"


def _close(out, ref, tol, same_dtype=True):
    """Whether `out` is within the kernel's tolerance (for out's dtype) of `ref`, and if not, why.
    `same_dtype=False` compares against a reference computed in a wider dtype."""
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        return False, "not a tensor"
    if out.shape != ref.shape or (same_dtype and out.dtype != ref.dtype):
        return False, f"got {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {ref.dtype}"
    atol, rtol = tol.get(out.dtype, (1e-4, 1e-4))
    o, r = out.detach().double(), ref.detach().double()
    err = (o - r).abs()
    bad = err > atol + rtol * r.abs()
    if bool(torch.isnan(o).ne(torch.isnan(r)).any()) or bool(bad.any()):
        return False, f"max abs error {float(err.nan_to_num(float('inf')).max()):.3g} (atol {atol}, rtol {rtol})"
    return True, ""


def _upcast(value):
    """fp16/bf16 tensors (also inside a tuple, list or dict) as fp32; anything else unchanged."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, (tuple, list)):
        return type(value)(_upcast(v) for v in value)
    if isinstance(value, dict):
        return {k: _upcast(v) for k, v in value.items()}
    return value


def _signature(args):
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


class _Site:
    """A place a kernel may be used (a module or a function): remembers which calls were verified.

    `op` names the custom operator (a kind, or "linear" for F.linear on the matmul kernel) and
    `reference(*op_args)` is what PyTorch computes there (the module's own forward, or the function).
    Registered by id in `_SITES` (weakly: the patched model owns its sites), which is how the custom
    operator, called from a compiled graph with nothing but tensors and the id, finds it."""

    def __init__(self, entry, stats, name, verify, op, reference, transposed=None):
        self.entry, self.stats, self.name, self.verify = entry, stats, name, verify
        self.op, self.reference, self.transposed = op, reference, transposed
        self.good, self.bad = set(), set()
        self.id = next(_SITE_IDS)
        _SITES[self.id] = self

    def run(self, args):
        """The kernel's output for the operator's arguments `args`, where verified, else PyTorch's.
        A probe entry (no kernel: `routed_calls`) counts the call and answers PyTorch's result."""
        if self.entry.fn is None:
            self.stats.calls[self.entry.kind] += 1
            return self.reference(*args)
        return self.call(_signature(args), lambda: _KERNEL_CALLS[self.op](self, *args),
                         lambda: self.reference(*args), lambda: self.reference(*_upcast(args)))

    def invoke(self, args):
        """`run`, through the custom operator while Dynamo traces (so the graph holds the operator)."""
        if torch.compiler.is_compiling():
            return _OPS[self.op](*args, self.id)
        return self.run(args)

    def call(self, key, run_kernel, run_reference, run_precise=None):
        """The kernel's output where it is verified to agree at this call's shapes, else PyTorch's.

        Agreeing means within the kernel's tolerance of the original call, or, failing that, of the
        original call on fp32 copies of its half-precision inputs (`run_precise`): the model's own
        code rounds to bf16 after every op (a rotary embedding's x*cos + rotate(x)*sin rounds three
        times), and a kernel that rounds once can sit a few ulps from it while being the closer of
        the two to the exact result. That is not a mismatch."""
        kind = self.entry.kind
        if key in self.bad:
            self.stats.fallbacks[kind] += 1
            return run_reference()
        if self.verify and key not in self.good:
            ref = run_reference()
            try:
                out = run_kernel()
                ok, why = _close(out, ref, self.entry.tol)
                if not ok and run_precise is not None and out.dtype in (torch.float16, torch.bfloat16):
                    ok = self._close_to_precise(out, run_precise)
            except Exception as e:  # a kernel that raises here is a mismatch, never the model's crash
                ok, why = False, f"{type(e).__name__}: {e}"
            if not ok:
                self.bad.add(key)
                self.stats.mismatches[kind].append(f"{self.name}: {why}")
                self.stats.fallbacks[kind] += 1
                return ref
            self.good.add(key)
            self.stats.calls[kind] += 1
            return out
        self.stats.calls[kind] += 1
        return run_kernel()

    def _close_to_precise(self, out, run_precise):
        try:
            precise = run_precise()
        except Exception:  # the original code may not take fp32 inputs (e.g. bf16 weights in a linear)
            return False
        return _close(out, precise, self.entry.tol, same_dtype=False)[0]


def _fallback(stats, kind):
    """Count a call that went to PyTorch (not while tracing: the count is of calls, and Dynamo would
    have to replay the increment)."""
    if not torch.compiler.is_compiling():
        stats.fallbacks[kind] += 1


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


# -- module replacement ------------------------------------------------------------------------------
def _rmsnorm_eps(m):
    for name in ("eps", "variance_epsilon", "epsilon"):
        v = getattr(m, name, None)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def _is_rmsnorm(m):
    w = getattr(m, "weight", None)
    return ("rmsnorm" in type(m).__name__.lower() and isinstance(w, torch.Tensor) and w.dim() == 1
            and (_rmsnorm_eps(m) is not None or isinstance(m, getattr(nn, "RMSNorm", ()))))


_MLP_EXTRAS = (nn.SiLU, nn.Dropout, nn.Identity)


def _mlp_linears(m):
    """(gate, up, down) of a SwiGLU MLP module: exactly three bias-free linears as its children,
    plus at most an activation or dropout (a block that merely holds such linears is not an MLP)."""
    children = list(m.children())
    linears = [c for c in children if isinstance(c, nn.Linear)]
    if len(linears) != 3 or any(not isinstance(c, (nn.Linear, *_MLP_EXTRAS)) for c in children):
        return None
    for names in (("gate_proj", "up_proj", "down_proj"), ("w_gate", "w_up", "w_down"), ("w1", "w3", "w2"),
                  ("gate", "up", "down")):
        parts = [getattr(m, n, None) for n in names]
        if all(isinstance(p, nn.Linear) and p.bias is None for p in parts):
            gate, up, down = parts
            if gate.weight.shape == up.weight.shape and down.in_features == gate.out_features:
                return parts
    return None


def _rotary_tables(m):
    """(cos, sin) [max_seq, D] of a rotary-embedding module whose forward(x) rotates x [B, H, S, D]."""
    cos, sin = getattr(m, "cos", None), getattr(m, "sin", None)
    if "rotary" in type(m).__name__.lower() and isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) \
            and cos.dim() == 2 and cos.shape == sin.shape:
        return cos, sin
    return None


def _module_plan(model, kernels):
    """(module name, module, kind) for each module one of the kernels can stand in for."""
    plan, claimed = [], set()
    for name, m in model.named_modules():
        if any(name == c or name.startswith(c + ".") for c in claimed):
            continue  # inside a module already swapped whole (e.g. the linears of a fused MLP)
        kind = None
        if "rmsnorm" in kernels and _is_rmsnorm(m):
            kind = "rmsnorm"
        elif "layernorm" in kernels and isinstance(m, nn.LayerNorm) and m.weight is not None:
            kind = "layernorm"
        elif "fused_mlp" in kernels and _mlp_linears(m) is not None:
            kind = "fused_mlp"
        elif "rotary_embedding" in kernels and _rotary_tables(m) is not None:
            kind = "rotary_embedding"
        if kind:
            plan.append((name, m, kind))
            claimed.add(name)
    return plan


def module_sites(model, kinds):
    """(module name, kind) of each module `patch` would swap for one of `kinds` (for timing them)."""
    return [(name, kind) for name, _, kind in _module_plan(model, set(kinds))]


def _rows(x, cols):
    return x.reshape(-1, cols).contiguous()


class _Transposed:
    """Caches weight.T made contiguous ([in, out], the matmul kernel's `b`) until the weight changes."""

    def __init__(self):
        self.cache = {}

    def __call__(self, w):
        key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype)
        hit = self.cache.get(id(w))
        if hit is None or hit[0] != key:
            hit = (key, w.detach().t().contiguous())
            self.cache[id(w)] = hit
        return hit[1]


# -- custom operators --------------------------------------------------------------------------------
# Per operator: its schema (the site id last), the kernel call on the operator's arguments, and the
# output's (shape, dtype), which the fake implementation allocates and the real one is held to.
_SCHEMAS = {
    "rmsnorm": "(Tensor x, Tensor weight, float eps, int site) -> Tensor",
    "layernorm": "(Tensor x, Tensor weight, Tensor? bias, float eps, int site) -> Tensor",
    "fused_mlp": "(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, int site) -> Tensor",
    "rotary_embedding": "(Tensor x, Tensor cos, Tensor sin, int site) -> Tensor",
    "softmax": "(Tensor x, int site) -> Tensor",
    "flash_attention": "(Tensor q, Tensor k, Tensor v, bool causal, int site) -> Tensor",
    "cross_entropy": "(Tensor x, Tensor target, int site) -> Tensor",
    "matmul": "(Tensor a, Tensor b, int site) -> Tensor",
    "linear": "(Tensor x, Tensor weight, int site) -> Tensor",
    "reduce": "(Tensor x, int site) -> Tensor",
}
_KERNEL_CALLS = {
    "rmsnorm": lambda s, x, w, eps: s.entry.fn(_rows(x, w.numel()), w, eps).reshape(x.shape),
    "layernorm": lambda s, x, w, b, eps: s.entry.fn(  # normalized dims flattened: one row is w.numel() wide
        _rows(x, w.numel()), w.reshape(-1), (b if b is not None else torch.zeros_like(w)).reshape(-1),
        eps).reshape(x.shape),
    "fused_mlp": lambda s, x, g, u, d: s.entry.fn(_rows(x, g.shape[1]), g, u, d).reshape(*x.shape[:-1], d.shape[0]),
    "rotary_embedding": lambda s, x, cos, sin: s.entry.fn(
        x, cos[:x.shape[-2]].to(x.dtype).contiguous(), sin[:x.shape[-2]].to(x.dtype).contiguous()),
    "softmax": lambda s, x: s.entry.fn(_rows(x, x.shape[-1])).reshape(x.shape),
    "flash_attention": lambda s, q, k, v, causal: s.entry.fn(q.contiguous(), k.contiguous(), v.contiguous(),
                                                             causal=causal),
    "cross_entropy": lambda s, x, t: s.entry.fn(x.contiguous(), t.contiguous()).to(x.dtype),
    "matmul": lambda s, a, b: s.entry.fn(_rows(a, a.shape[-1]), b.contiguous()).reshape(*a.shape[:-1], b.shape[1]),
    "linear": lambda s, x, w: s.entry.fn(_rows(x, w.shape[1]), s.transposed(w)).reshape(*x.shape[:-1], w.shape[0]),
    "reduce": lambda s, x: s.entry.fn(_rows(x, x.shape[-1])).reshape(x.shape[:-1]),
}
_SAME = lambda x, *rest: (x.shape, x.dtype)  # noqa: E731
_OUTPUTS = {
    "rmsnorm": _SAME, "layernorm": _SAME, "rotary_embedding": _SAME, "softmax": _SAME, "flash_attention": _SAME,
    "fused_mlp": lambda x, g, u, d: ((*x.shape[:-1], d.shape[0]), x.dtype),
    "cross_entropy": lambda x, t: ((), x.dtype),
    "matmul": lambda a, b: ((*a.shape[:-1], b.shape[1]), a.dtype),
    "linear": lambda x, w: ((*x.shape[:-1], w.shape[0]), x.dtype),
    "reduce": lambda x: (x.shape[:-1], x.dtype),
}
_SITES = weakref.WeakValueDictionary()  # site id -> _Site
_SITE_IDS = itertools.count()
_OPS = {}  # operator name -> OpOverload, registered on the first patch
_NAMESPACE = []


def _op_impl(*args):
    """What the compiled graph runs for one of our operators: the site's kernel (checked at the first
    call of each shape), held to the shape, dtype and layout the fake implementation promised. Routes
    take only calls whose tensors share one dtype, which the contracts keep; an original that returns
    another dtype (the check refused the kernel there) is cast, since the graph was built on the promise."""
    site, args = _SITES[args[-1]], args[:-1]
    shape, dtype = _OUTPUTS[site.op](*args)
    out = site.run(args)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape):
        raise RuntimeError(f"{site.name}: the result is not one {tuple(shape)} tensor, so a compiled "
                           f"model cannot take it from the {site.op} operator")
    out = out.to(dtype)
    ptr = out.untyped_storage().data_ptr()
    if out.stride() != _strides(site.op, args[0], shape) \
            or any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args):
        out = _layout(site.op, args[0], shape, dtype, out.device).copy_(out)  # may not alias an input either
    return out


def _strides(op, x, shape):
    """The strides `_layout` gives, without allocating where they follow from the shape alone."""
    if op == "rotary_embedding":
        return torch.empty_like(x, device="meta").stride()
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _layout(op, x, shape, dtype, device):
    """An empty output as the fake implementation makes it: rotary keeps x's layout (its starter writes a
    transposed q in place order, so attention's output reshapes as a view), the others are contiguous."""
    if op == "rotary_embedding":
        return torch.empty_like(x, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _fake_for(name):
    def fake(*args):
        shape, dtype = _OUTPUTS[name](*args[:-1])
        return _layout(name, args[0], shape, dtype, args[0].device)
    return fake


def namespace():
    """The custom operators' namespace of this copy of the file (registering them on the first call):
    `autokernel` in the library, `autokernel_<package>` in an exported one, with `_2`, `_3`... when
    another copy of the file already holds that name (a package loaded twice)."""
    if not _NAMESPACE:
        name = globals().get("__name__") or "standalone"  # exec'd with a bare dict (KernelBench's loader): none
        package = name.rpartition(".")[0] or name
        base = "autokernel" if package == "autokernel.engine" else "autokernel_" + re.sub(r"\W", "_", package)
        ns, n = base, 1
        while hasattr(getattr(torch.ops, ns), "softmax"):
            n += 1
            ns = f"{base}_{n}"
        for name, schema in _SCHEMAS.items():
            op = torch.library.custom_op(f"{ns}::{name}", _op_impl, mutates_args=(), schema=schema)
            op.register_fake(_fake_for(name))
            _OPS[name] = getattr(getattr(torch.ops, ns), name).default
        _NAMESPACE.append(ns)
    return _NAMESPACE[0]


def _module_reference(original):
    return lambda x, *weights: original(x)


def _swap_module(name, m, kind, entry, stats, verify):
    original = m.forward
    site = _Site(entry, stats, name or type(m).__name__, verify, kind, _module_reference(original))

    if kind == "rmsnorm":
        eps = _rmsnorm_eps(m)

        def forward(x, *rest, **kw):
            w = m.weight
            if rest or kw or not entry.accepts(x, w) or x.shape[-1] != w.numel() or _needs_grad(x, w):
                _fallback(stats, kind)
                return original(x, *rest, **kw)
            return site.invoke((x, w, eps if eps is not None else torch.finfo(x.dtype).eps))
    elif kind == "layernorm":
        def forward(x, *rest, **kw):
            w, b = m.weight, m.bias
            if rest or kw or not entry.accepts(x, w) or tuple(x.shape[x.dim() - w.dim():]) != tuple(w.shape) \
                    or _needs_grad(x, w, b) or (b is not None and b.dtype != w.dtype):
                _fallback(stats, kind)
                return original(x, *rest, **kw)
            return site.invoke((x, w, b, float(m.eps)))
    elif kind == "fused_mlp":
        gate, up, down = _mlp_linears(m)

        def forward(x, *rest, **kw):
            weights = (gate.weight, up.weight, down.weight)
            if rest or kw or not entry.accepts(x, *weights) or x.shape[-1] != gate.in_features \
                    or _needs_grad(x, *weights):
                _fallback(stats, kind)
                return original(x, *rest, **kw)
            return site.invoke((x, *weights))
    elif kind == "rotary_embedding":
        def forward(x, *rest, **kw):
            cos, sin = _rotary_tables(m)
            if rest or kw or not entry.accepts(x, cos, sin) or x.dim() != 4 or x.shape[-1] != cos.shape[-1] \
                    or x.shape[-2] > cos.shape[0] or _needs_grad(x):
                _fallback(stats, kind)
                return original(x, *rest, **kw)
            return site.invoke((x, cos, sin))
    else:
        return False
    m.forward = forward
    stats.modules[kind] += 1
    return True


# -- function replacement ----------------------------------------------------------------------------
# What PyTorch computes for a functional operator's arguments (the calls routed are exactly these).
_FUNCTION_REFERENCES = {
    "softmax": lambda x: torch.softmax(x, -1),
    "flash_attention": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "cross_entropy": lambda x, t: F.cross_entropy(x, t),
    "matmul": lambda a, b: torch.matmul(a, b),
    "linear": lambda x, w: F.linear(x, w),
    "reduce": lambda x: x.sum(-1),
}
_FUNCTION_SITES = {"softmax": "softmax", "flash_attention": "scaled_dot_product_attention",
                   "cross_entropy": "cross_entropy", "matmul": "matmul", "linear": "linear", "reduce": "sum"}


class KernelMode(TorchFunctionMode):
    """Routes matching functional calls to the kept kernels while the patched forward runs."""

    def __init__(self, kernels, stats, verify=True, transposed=None):
        super().__init__()
        self.kernels, self.stats, self.verify = kernels, stats, verify
        transposed = transposed or _Transposed()
        self.sites = {}
        for op, name in _FUNCTION_SITES.items():
            kind = "matmul" if op == "linear" else op
            if kind in kernels:  # made here, not at a first call: Dynamo may be tracing that one
                self.sites[op] = _Site(kernels[kind], stats, name, verify, op, _FUNCTION_REFERENCES[op], transposed)
        self.routes = {}
        if "softmax" in kernels:
            for f in (F.softmax, torch.softmax, torch.Tensor.softmax):
                self.routes[f] = self._softmax
        if "flash_attention" in kernels:
            self.routes[F.scaled_dot_product_attention] = self._sdpa
        if "cross_entropy" in kernels:
            self.routes[F.cross_entropy] = self._cross_entropy
        if "matmul" in kernels:
            for f in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm):
                self.routes[f] = self._matmul
            self.routes[F.linear] = self._linear
        if "reduce" in kernels:
            for f in (torch.sum, torch.Tensor.sum):
                self.routes[f] = self._sum

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = self.routes.get(func)
        if route is not None:
            out = route(args, kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)

    def _fallback(self, kind):
        _fallback(self.stats, kind)
        return NotImplemented

    def _softmax(self, args, kwargs):
        entry = self.kernels["softmax"]
        x = args[0] if args else kwargs.get("input")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if len(args) > 2 or kwargs.get("dtype") is not None or not entry.accepts(x) or x.dim() < 1 \
                or dim not in (-1, x.dim() - 1) or _needs_grad(x):
            return self._fallback("softmax")
        return self.sites["softmax"].invoke((x,))

    def _sdpa(self, args, kwargs):
        entry = self.kernels["flash_attention"]
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        a = dict(zip(names, args))
        a.update(kwargs)
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        extra = set(a) - set(names)
        scale = a.get("scale")
        if extra or a.get("attn_mask") is not None or a.get("dropout_p", 0.0) or not entry.accepts(q, k, v) \
                or q.dim() != 4 or q.shape != k.shape or q.shape != v.shape or a.get("enable_gqa") \
                or (scale is not None and abs(scale - 1 / math.sqrt(q.shape[-1])) > 1e-12) or _needs_grad(q, k, v):
            return self._fallback("flash_attention")
        return self.sites["flash_attention"].invoke((q, k, v, bool(a.get("is_causal", False))))

    def _cross_entropy(self, args, kwargs):
        entry = self.kernels["cross_entropy"]
        names = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                 "label_smoothing")
        a = dict(zip(names, args))
        a.update(kwargs)
        x, t = a.get("input"), a.get("target")
        if a.get("weight") is not None or a.get("size_average") is not None or a.get("reduce") is not None \
                or a.get("reduction", "mean") != "mean" or a.get("label_smoothing", 0.0) \
                or not entry.accepts(x) or x.dim() != 2 or not isinstance(t, torch.Tensor) \
                or t.dim() != 1 or t.dtype not in (torch.int64, torch.int32) \
                or a.get("ignore_index", -100) != -100 or _needs_grad(x):
            # The kernel's contract skips rows whose target is -100 (F.cross_entropy's default), so the
            # call is routed without asking the GPU whether any target is ignored (a host sync).
            return self._fallback("cross_entropy")
        return self.sites["cross_entropy"].invoke((x, t))

    def _matmul(self, args, kwargs):
        entry = self.kernels["matmul"]
        if kwargs or len(args) != 2:
            return self._fallback("matmul")
        a, b = args
        if not entry.accepts(a, b) or a.dtype != b.dtype or b.dim() != 2 or a.dim() < 2 or a.shape[-1] != b.shape[0] \
                or _needs_grad(a, b):
            return self._fallback("matmul")
        return self.sites["matmul"].invoke((a, b))

    def _linear(self, args, kwargs):
        entry = self.kernels["matmul"]
        a = dict(zip(("input", "weight", "bias"), args))
        a.update(kwargs)
        x, w, bias = a.get("input"), a.get("weight"), a.get("bias")
        if set(a) - {"input", "weight", "bias"} or not entry.accepts(x, w) or x.dtype != w.dtype \
                or w.dim() != 2 or x.dim() < 1 or x.shape[-1] != w.shape[1] or _needs_grad(x, w, bias):
            return self._fallback("matmul")
        y = self.sites["linear"].invoke((x, w))
        return y + bias if bias is not None else y

    def _sum(self, args, kwargs):
        entry = self.kernels["reduce"]
        a = dict(zip(("input", "dim", "keepdim"), args))
        a.update(kwargs)
        x, dim = a.get("input"), a.get("dim")
        if isinstance(dim, (tuple, list)) and len(dim) == 1:
            dim = dim[0]
        if len(args) > 3 or set(a) - {"input", "dim", "keepdim"} or not entry.accepts(x) or x.dim() < 1 \
                or not isinstance(dim, int) or dim not in (-1, x.dim() - 1) or _needs_grad(x):
            return self._fallback("reduce")
        y = self.sites["reduce"].invoke((x,))
        return y.unsqueeze(-1) if a.get("keepdim") else y


def _unwrap(model):
    """The module a `torch.compile`d model wraps (its `forward` is Dynamo's: patch the one it calls)."""
    return getattr(model, "_orig_mod", model)


def patch(model, kernels, verify=True):
    """Swap `kernels` ({kind: KernelEntry or kernel_fn}) into `model` in place; returns PatchStats.

    Module-level swaps are permanent; the functional routes are active only inside the model's
    forward (its `forward` is wrapped in the KernelMode), so nothing outside the model is touched.
    `model` may be the result of `torch.compile`: the module it wraps is patched, and Dynamo's guards
    on that module's forward compile it again, with the kernels, at the next call.
    """
    namespace()  # the custom operators exist before anything is traced
    model = _unwrap(model)
    table = {k: (v if isinstance(v, KernelEntry) else KernelEntry(k, v)) for k, v in kernels.items()}
    stats = PatchStats(table)
    for name, m, kind in _module_plan(model, table):
        _swap_module(name, m, kind, table[kind], stats, verify)
    if any(hasattr(e.fn, "subgraph") for e in table.values()):  # subgraph targets: an FX rewrite (subgraph_patch.py)
        __import__(__package__ + ".subgraph_patch", fromlist=["_"]).patch_subgraphs(model, table, stats, verify, _Site)
    functional = {k: e for k, e in table.items() if k in FUNCTION_KINDS}
    if functional:
        inner = model.forward
        mode = KernelMode(functional, stats, verify)

        def forward(*args, **kw):
            with mode:
                return inner(*args, **kw)
        model.forward = forward
    model._kernel_patch_stats = stats
    return stats


MODULE_KINDS = ("rmsnorm", "layernorm", "fused_mlp", "rotary_embedding")


def routed_calls(model, inputs, kinds=MODULE_KINDS + FUNCTION_KINDS):
    """{kind: how many calls of one forward `model(*inputs)` `patch` would route to a kernel of that kind}.

    The same matcher as `patch` (it is `patch`, with probe entries that run no kernel and answer
    PyTorch's result), so a planner that searches only kinds counted here never searches a kernel the
    model cannot use. Patches `model` in place: give it a model that is thrown away after."""
    stats = patch(model, {k: KernelEntry(k, None) for k in kinds}, verify=False)
    with torch.no_grad():
        model(*inputs)
    return {k: stats.calls[k] for k in kinds}
