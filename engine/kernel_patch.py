"""Swap fast kernels into a PyTorch model, where (and only where) a call matches a kernel's contract.

Standalone on purpose: this file imports nothing but torch, because `autokernel export` copies it
verbatim into the exported package (as `_patch.py`), so the exported `patch(model)` behaves exactly
as the integration that was checked; a KernelBench ModelNew carries it inline (engine/model_new.py),
and the planner asks it which kernel types a model's calls reach (`routed_calls`, engine/routing.py).

Which calls a kernel type takes is the type's own `Route` (its folder's `route.py`: the library reads
them from `autokernel.kernels`; an exported copy carries them inline: `autokernel.kernels.patch_source`).
Two ways in:
- module replacement: the `forward` of a module whose job is one kernel type (`Route.match`) is
  replaced (a norm, an MLP, a rotary embedding);
- function replacement: a TorchFunctionMode, active only during the patched model's forward, routes
  the functional calls a route names (`Route.functions`: softmax, attention, a matmul...) to the kernels.
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
import re
import weakref
from collections import defaultdict

import torch
from torch.overrides import TorchFunctionMode

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_DEFAULT_TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


class Op:
    """One custom operator a route emits: `schema` (its arguments; the site id is appended), `output(*args)`
    (the result's shape and dtype: the fake implementation allocates it and the real one is held to it),
    `call(site, *args)` (the kernel on the operator's arguments), `reference(*args)` (what PyTorch computes,
    for a function route; a module route's is the module's own forward), `site` (the site's name) and
    `like_input` (the output keeps the first argument's layout instead of being contiguous)."""

    def __init__(self, name, schema, output, call, reference=None, site=None, like_input=False):
        self.name, self.schema, self.output, self.call = name, schema, output, call
        self.reference, self.site, self.like_input = reference, site or name, like_input


class Route:
    """How kept kernels of one type reach a model's calls (a kernel folder's `route.py` defines `ROUTE`).

    A module route: `match(module)` is a state (anything but None) for a module whose forward the kernel
    replaces, and `module_args(module, state, entry, x)` the operator's arguments for one call, or None
    to leave that call to PyTorch; it emits `ops[0]`. A function route: `functions` maps torch functions
    to `handler(args, kwargs, entry)` -> (op name, op args[, post(result)]), or None for PyTorch."""

    def __init__(self, kind, ops, match=None, module_args=None, functions=None):
        self.kind, self.ops, self.match, self.module_args = kind, list(ops), match, module_args
        self.functions = dict(functions or {})


_BUNDLED = None  # {kind: Route} in a standalone copy (autokernel.kernels.patch_source appends the routes)


def routes():
    """{kind: Route} of every kernel type this copy can route: the bundled ones in a standalone copy,
    else the kernel library's (each type's `route.py`)."""
    if _BUNDLED is not None:
        return _BUNDLED
    library = __import__("autokernel.kernels", fromlist=["hooks"])  # a copy without routes needs the library
    return {kind: module.ROUTE for kind, module in library.hooks("route")}


def function_kinds():
    """The kinds routed through functional calls (the rest replace modules' forwards)."""
    return tuple(k for k, r in routes().items() if r.functions)


def module_kinds():
    return tuple(k for k, r in routes().items() if r.match is not None)


def __getattr__(name):
    if name == "FUNCTION_KINDS":  # the tuples this module once spelt out
        return function_kinds()
    if name == "MODULE_KINDS":
        return module_kinds()
    raise AttributeError(name)


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
        words = [f"{modules} module{'s' if modules != 1 else ''} swapped"] if kind not in function_kinds() or modules else []
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
        return self.call(_signature(args), lambda: _OP_TABLE[self.op].call(self, *args),
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


def needs_grad(*tensors):
    """Whether a call needs a gradient (a kernel has no backward: such a call stays with PyTorch)."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


# -- module replacement ------------------------------------------------------------------------------
def _module_plan(model, kernels):
    """(module name, module, kind, match state) for each module one of the kernels can stand in for."""
    matchers = [(k, r.match) for k, r in routes().items() if r.match is not None and k in kernels]
    plan, claimed = [], set()
    for name, m in model.named_modules():
        if any(name == c or name.startswith(c + ".") for c in claimed):
            continue  # inside a module already swapped whole (e.g. the linears of a fused MLP)
        for kind, match in matchers:
            state = match(m)
            if state is not None:
                plan.append((name, m, kind, state))
                claimed.add(name)
                break
    return plan


def module_sites(model, kinds):
    """(module name, kind) of each module `patch` would swap for one of `kinds` (for timing them)."""
    return [(name, kind) for name, _, kind, _ in _module_plan(model, set(kinds))]


def rows(x, cols):
    """x as a contiguous [rows, cols] matrix (what a row-wise kernel takes)."""
    return x.reshape(-1, cols).contiguous()


def same_as_input(x, *rest):
    """An operator's output spec when it is x's shape and dtype."""
    return x.shape, x.dtype


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
_OP_TABLE = {}  # operator name -> Op, of the routes registered in this process
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
    shape, dtype = _OP_TABLE[site.op].output(*args)
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
    if _OP_TABLE[op].like_input:
        return torch.empty_like(x, device="meta").stride()
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _layout(op, x, shape, dtype, device):
    """An empty output as the fake implementation makes it: contiguous, or x's layout where the operator
    says so (`Op.like_input`)."""
    if _OP_TABLE[op].like_input:
        return torch.empty_like(x, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _fake_for(name):
    def fake(*args):
        shape, dtype = _OP_TABLE[name].output(*args[:-1])
        return _layout(name, args[0], shape, dtype, args[0].device)
    return fake


def namespace():
    """The custom operators' namespace of this copy of the file (registering every route's operators not
    registered yet): `autokernel` in the library, `autokernel_<package>` in an exported one, with `_2`,
    `_3`... when another copy of the file already holds that name (a package loaded twice)."""
    ops = [op for route in routes().values() for op in route.ops]
    if not _NAMESPACE:
        name = globals().get("__name__") or "standalone"  # exec'd with a bare dict (KernelBench's loader): none
        package = name.rpartition(".")[0] or name
        base = "autokernel" if package == "autokernel.engine" else "autokernel_" + re.sub(r"\W", "_", package)
        ns, n = base, 1
        while any(hasattr(getattr(torch.ops, ns), op.name) for op in ops):
            n += 1
            ns = f"{base}_{n}"
        _NAMESPACE.append(ns)
    ns = _NAMESPACE[0]
    for op in ops:
        if op.name not in _OPS:
            _OP_TABLE[op.name] = op
            custom = torch.library.custom_op(f"{ns}::{op.name}", _op_impl, mutates_args=(),
                                             schema=f"({op.schema}, int site) -> Tensor")
            custom.register_fake(_fake_for(op.name))
            _OPS[op.name] = getattr(getattr(torch.ops, ns), op.name).default
    return ns


def _module_reference(original):
    return lambda x, *weights: original(x)


def _swap_module(name, m, kind, state, entry, stats, verify):
    """Replace `m.forward` by one that sends the calls its route takes to the kernel (through a site)."""
    original = m.forward
    route = routes()[kind]
    site = _Site(entry, stats, name or type(m).__name__, verify, route.ops[0].name, _module_reference(original))

    def forward(x, *rest, **kw):
        args = None if rest or kw else route.module_args(m, state, entry, x)
        if args is None:
            _fallback(stats, kind)
            return original(x, *rest, **kw)
        return site.invoke(args)
    m.forward = forward
    stats.modules[kind] += 1
    return True


# -- function replacement ----------------------------------------------------------------------------
class KernelMode(TorchFunctionMode):
    """Routes matching functional calls to the kept kernels while the patched forward runs."""

    def __init__(self, kernels, stats, verify=True, transposed=None):
        super().__init__()
        self.kernels, self.stats, self.verify = kernels, stats, verify
        transposed = transposed or _Transposed()
        self.sites, self.routes = {}, {}
        for kind, route in routes().items():
            if kind not in kernels:
                continue
            for op in route.ops:  # made here, not at a first call: Dynamo may be tracing that one
                if op.reference is not None:
                    self.sites[op.name] = _Site(kernels[kind], stats, op.site, verify, op.name, op.reference, transposed)
            for f, handler in route.functions.items():
                self.routes.setdefault(f, (kind, handler))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = self.routes.get(func)
        if route is not None:
            kind, handler = route
            got = handler(args, kwargs, self.kernels[kind])
            if got is None:
                _fallback(self.stats, kind)
            else:
                op, op_args, post = (*got, None)[:3]
                out = self.sites[op].invoke(op_args)
                return post(out) if post is not None else out
        return func(*args, **kwargs)


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
    for name, m, kind, state in _module_plan(model, table):
        _swap_module(name, m, kind, state, table[kind], stats, verify)
    if any(hasattr(e.fn, "subgraph") for e in table.values()):  # subgraph targets: an FX rewrite (subgraph_patch.py)
        __import__(__package__ + ".subgraph_patch", fromlist=["_"]).patch_subgraphs(model, table, stats, verify, _Site)
    functional = {k: e for k, e in table.items() if k in function_kinds()}
    if functional:
        inner = model.forward
        mode = KernelMode(functional, stats, verify)

        def forward(*args, **kw):
            with mode:
                return inner(*args, **kw)
        model.forward = forward
    model._kernel_patch_stats = stats
    return stats


def routed_calls(model, inputs, kinds=None):
    """{kind: how many calls of one forward `model(*inputs)` `patch` would route to a kernel of that kind}.

    The same matcher as `patch` (it is `patch`, with probe entries that run no kernel and answer
    PyTorch's result), so a planner that searches only kinds counted here never searches a kernel the
    model cannot use. Patches `model` in place: give it a model that is thrown away after. `kinds`: every
    kind with a route unless given."""
    kinds = tuple(routes()) if kinds is None else tuple(kinds)
    stats = patch(model, {k: KernelEntry(k, None) for k in kinds}, verify=False)
    with torch.no_grad():
        model(*inputs)
    return {k: stats.calls[k] for k in kinds}
