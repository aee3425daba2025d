"""Where a model's time goes, per kernel type, with each row's floor and Amdahl bound.

torch.profiler records every operator (self device time on CUDA, self CPU time otherwise, input
shapes and scalar arguments). Forward hooks wrap each sub-module call in a
`record_function("ak::<module index>::<call number>")` range, so each operator can be traced to
the modules that ran it. A module whose subtree is one kernel (a norm, a SwiGLU MLP, a rotary
embedding...) becomes one row however many operators it is made of; everything else is
attributed by the operator the user called (aten::linear, not the addmm inside it). Each
operator's self time is counted exactly once.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

from . import amdahl
from .attribution import (
    TORCH_DTYPES, OpCall, classify_function, classify_module, cost_known, exact_spec_shape, kernel_shape, kind_of_op, main_dtype, op_cost,
    op_pairs,
)
from .devices import device_name as _device_name
from .model_loading import LoadedModel
from .native_stderr import quiet_profile
from .roofline import Ceilings, ceilings as _ceilings, floor_ms as _floor_ms

RANGE_PREFIX = "ak::"


@dataclass
class ProfileRow:
    """One bottleneck: a kernel type as it appears in the model (a module class or an operator)."""

    name: str  # module class (e.g. "RMSNorm") or operator (e.g. "aten::linear")
    kind: str  # a kernel type from autokernel.kernels, or "other"
    calls: float  # per forward
    shapes: list[str]  # the input shapes of its costliest calls
    dtypes: list[str]
    self_ms: float  # per forward
    share: float  # of the model's end-to-end time
    bytes: int  # per forward, the least it must move
    flops: int  # per forward
    floor_ms: float  # per forward, at the device's ceilings
    kernel_speedup: float  # s = self_ms / floor_ms (>= 1, inf if nothing to move or compute)
    max_speedup: float  # S = 1 / ((1 - p) + p / s): the model's speedup if this row hit its floor
    target_shape: dict | None = None  # the spec shape of its costliest call (None for "other")
    target_dtype: str | None = None
    modules: list[str] = field(default_factory=list)  # module paths, for rows found by module

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("kernel_speedup", "max_speedup"):
            if d[k] == float("inf"):
                d[k] = None  # JSON has no infinity: null means unbounded (nothing to move or compute)
        return d


@dataclass
class ProfileResult:
    device: str
    device_name: str
    total_ms: float  # one forward, end to end (the larger of wall time and the time attributed)
    rows: list[ProfileRow]  # ranked by max_speedup, largest first
    wall_ms: float = 0.0  # median forward time measured without the profiler
    attributed_ms: float = 0.0  # sum of the rows' self times
    iters: int = 0
    meaningful: bool = True  # False on CPU: the numbers show the method, not GPU reality

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device, "device_name": self.device_name, "total_ms": self.total_ms,
            "wall_ms": self.wall_ms, "attributed_ms": self.attributed_ms, "iters": self.iters,
            "meaningful": self.meaningful, "rows": [r.to_json() for r in self.rows],
        }


# -- module ranges ------------------------------------------------------------------------------------
def shape_text(shape: Any) -> str:
    """`2x128x256` for a shape, `scalar` for a 0-d tensor."""
    dims = list(shape)
    return "x".join(str(int(d)) for d in dims) if dims else "scalar"


def _describe(obj: Any) -> list[str]:
    if isinstance(obj, torch.Tensor):
        return [shape_text(obj.shape)]
    if isinstance(obj, (list, tuple)):
        return [s for x in obj for s in _describe(x)]
    if isinstance(obj, dict):
        return [s for x in obj.values() for s in _describe(x)]
    return []


class ModuleRanges:
    """Forward hooks that open a profiler range around every sub-module call while enabled."""

    def __init__(self, model: torch.nn.Module):
        self.modules = list(model.named_modules())
        self.enabled = False
        self._stack: list[Any] = []
        self._count = 0
        self.call_args: dict[str, list[str]] = {}  # range name -> input shapes of that call
        self._handles = []
        for idx, (_, m) in enumerate(self.modules):
            try:
                pre = m.register_forward_pre_hook(self._pre(idx), with_kwargs=True)
            except (RuntimeError, TypeError, AttributeError):
                continue  # a module that takes no hooks (TorchScript): its ops are attributed by name
            self._handles.append(pre)
            self._handles.append(m.register_forward_hook(self._post))

    def _pre(self, idx: int):
        def hook(module, args, kwargs):
            if not self.enabled:
                return None
            name = f"{RANGE_PREFIX}{idx}::{self._count}"
            self._count += 1
            self.call_args[name] = _describe(args) + _describe(kwargs)
            rf = record_function(name)
            rf.__enter__()
            self._stack.append(rf)
            return None

        return hook

    def _post(self, module, args, output):
        if self.enabled and self._stack:
            self._stack.pop().__exit__(None, None, None)
        return None

    def close(self) -> None:
        while self._stack:  # a forward that raised leaves ranges open
            self._stack.pop().__exit__(None, None, None)
        for h in self._handles:
            h.remove()

    def module_index(self, range_name: str) -> int:
        return int(range_name[len(RANGE_PREFIX):].split("::", 1)[0])


# -- running ------------------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _self_us(evt: Any, device: str) -> float:
    if device == "cuda":
        for attr in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(evt, attr):
                return float(getattr(evt, attr))
        return 0.0
    return float(evt.self_cpu_time_total)


def _op_call(evt: Any) -> OpCall:
    return OpCall(
        name=evt.name,
        shapes=list(getattr(evt, "input_shapes", None) or []),
        dtypes=list(getattr(evt, "input_dtypes", None) or []),
        concrete=list(getattr(evt, "concrete_inputs", None) or []),
    )


def _fill_input_dtypes(prof: Any, events: list) -> None:
    """Give each operator event its argument dtypes where this torch leaves them out.

    `FunctionEvent.input_dtypes` is recent (torch 2.11, for one, has only `input_shapes`); without
    dtypes no argument counts as a tensor, so every row loses its shape, bytes and floor. The
    profiler's raw Kineto events always carry them: match them to the parsed events by name,
    thread and start time, computed as torch computes the parsed start."""
    if all(getattr(e, "input_dtypes", None) is not None for e in events):
        return
    try:
        results = prof.profiler.kineto_results
        start_ns = results.trace_start_ns()
        raw = {(k.name(), k.start_thread_id(), (k.start_ns() - start_ns) / 1000): list(k.dtypes())
               for k in results.events() if k.device_type() == DeviceType.CPU}
    except (AttributeError, RuntimeError):
        return  # an older profiler still: rows keep their names and times, without shapes
    for e in events:
        if getattr(e, "input_dtypes", None) is None:
            name = getattr(e, "trace_name", None) or e.name
            e.input_dtypes = raw.get((name, e.thread, e.time_range.start), [])


def _is_op(evt: Any) -> bool:
    """An operator (aten::mm, a custom ns::op), not a user range or a runtime call."""
    return "::" in evt.name and not evt.name.startswith(RANGE_PREFIX)


# torch's Python tracer (with_stack) keeps raw pointers to the names of code objects; one freed
# during the profiled forwards leaves garbage that `prof.events()` fails to decode (seen about once
# in ten runs on CPU, torch 2.13). A fresh profile almost always parses; the last try goes without
# Python stacks (plain functions are then found by operator only).
STACK_TRIES = 2


def _profiled_events(model, inputs, ranges: ModuleRanges, device: str, iters: int, with_stack: bool,
                     say: Callable[[str], None]) -> tuple[Any, list]:
    """Profile `iters` forwards; (profiler, parsed events with argument dtypes)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    tries = [True] * STACK_TRIES + [False] if with_stack else [False]
    for n, stack in enumerate(tries, 1):
        with quiet_profile(activities=activities, record_shapes=True, with_stack=stack) as prof:
            ranges.enabled = True
            try:
                for _ in range(iters):
                    model(*inputs)
                _sync(device)
            finally:
                ranges.enabled = False
        try:
            events = prof.events()  # parsed before any export: exporting first leaves torch's results unreadable
        except UnicodeDecodeError:
            if n == len(tries):
                raise
            say("the profiler's trace was unreadable (a torch bug with Python stacks): profiling again"
                + ("" if tries[n] else " without Python stacks"))
            continue
        _fill_input_dtypes(prof, events)
        return prof, events
    raise AssertionError("unreachable")


def profile_model(loaded: LoadedModel, warmup: int = 3, iters: int = 5,
                  on_progress: Callable[[str], None] | None = None,
                  ceilings: Ceilings | None = None, with_stack: bool = True,
                  trace_path: str | None = None) -> ProfileResult:
    """Profile `iters` forwards (after `warmup`) and return Amdahl-ranked rows, per forward.

    `with_stack` records Python calls too, so a kernel written as a plain function (HF's
    `apply_rotary_pos_emb`) is found like one written as a module; it slows the CPU side of the
    profiled forwards only (device times, and the wall time measured before, are unaffected).
    `trace_path` also writes the raw profile as a Chrome trace (chrome://tracing, Perfetto), so
    every number in the rows can be checked against the timeline it came from."""
    if iters < 1:
        raise ValueError("iters must be at least 1")
    device, model, inputs = loaded.device, loaded.model, loaded.inputs
    say = on_progress or (lambda msg: None)
    ranges = ModuleRanges(model)
    try:
        with torch.no_grad():
            say(f"warming up ({warmup} forwards)")
            for _ in range(warmup):
                model(*inputs)
            _sync(device)
            say(f"timing {iters} forwards")
            times = []
            for _ in range(iters):
                _sync(device)
                t0 = time.perf_counter()
                model(*inputs)
                _sync(device)
                times.append((time.perf_counter() - t0) * 1e3)
            wall_ms = statistics.median(times)
            say(f"profiling {iters} forwards")
            prof, events = _profiled_events(model, inputs, ranges, device, iters, with_stack, say)
    except torch.cuda.OutOfMemoryError as e:
        from .errors import UserError

        raise UserError("profiling ran out of GPU memory: try --size small or --dtype bf16") from e
    finally:
        ranges.close()
    if trace_path:
        say(f"writing the trace to {trace_path}")
        prof.export_chrome_trace(str(trace_path))
    say("measuring device ceilings" if ceilings is None else "attributing")
    ceil = ceilings or _ceilings(device)
    say("attributing time to kernel types")
    rows = attribute(events, ranges, device, iters, wall_ms, ceil)
    attributed = sum(r.self_ms for r in rows)
    total = max(wall_ms, attributed)
    for r in rows:
        r.share = r.self_ms / total if total > 0 else 0.0
        r.max_speedup = amdahl.end_to_end_bound(r.share, r.kernel_speedup)
    return ProfileResult(device=device, device_name=_device_name(device), total_ms=total,
                         rows=amdahl.rank(rows), wall_ms=wall_ms, attributed_ms=attributed,
                         iters=iters, meaningful=ceil.meaningful)


# -- attribution --------------------------------------------------------------------------------------
@dataclass
class _Call:
    time_us: float = 0.0
    ops: list = field(default_factory=list)  # OpCalls that describe the call
    arg_shapes: list = field(default_factory=list)


def _is_range(evt: Any) -> bool:
    return evt.name.startswith(RANGE_PREFIX)


_PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>[\w.<>]+)$")
_NOT_USER_FUNCS = frozenset({"forward", "_call_impl", "_wrapped_call_impl", "inner", "<module>", "<lambda>",
                             "decorate_context", "__call__"})


def _is_python(evt: Any) -> bool:
    """An event of the Python tracer (a function call), not an operator or a range."""
    if getattr(evt, "is_python_function", False):
        return True
    name = evt.name
    return name.startswith(("<built-in", "nn.Module: ")) or _PY_FRAME.match(name) is not None


def _user_function(evt: Any) -> str | None:
    """The name of a plain function of the model's own code that a Python-tracer event stands
    for (module forwards are ranges already; torch's and our own functions do not count)."""
    m = _PY_FRAME.match(evt.name)
    if m is None:
        return None
    path, func = m["file"].replace("\\", "/"), m["func"]
    if func in _NOT_USER_FUNCS or path.startswith(("torch/", "triton/", "<")) or "/torch/" in path \
            or "/triton/" in path or path.endswith(("autokernel/engine/profiling.py", "engine/profiling.py")):
        return None
    return func


def attribute(events: Any, ranges: ModuleRanges, device: str, iters: int, wall_ms: float,
              ceil: Ceilings) -> list[ProfileRow]:
    """Group the profiler's events into rows (unranked; share and max_speedup filled later).

    Scopes that can claim work: module ranges (classified per module, by its first call) and, when
    the profile has Python stacks, calls of plain functions in the model's code (classified per
    call). The innermost scope that is a kernel type claims an event; otherwise the outermost
    operator above it names its row.
    """
    cpu_events = [e for e in events if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU]
    scope_memo: dict[int, Any] = {}
    top_memo: dict[int, Any] = {}

    def scope(evt):
        """The innermost module range strictly above `evt` (None at the top). Iterative: Python
        stacks make the event tree deep."""
        chain, a = [], evt
        while True:
            if id(a) in scope_memo:
                found = scope_memo[id(a)]
                break
            chain.append(a)
            p = a.cpu_parent
            if p is None or _is_range(p):
                found = p
                break
            a = p
        for x in chain:
            scope_memo[id(x)] = found
        return found

    def top_op(evt):
        """The outermost operator above or at `evt`, below its module range: what the user called."""
        chain, a = [], evt
        while a is not None and not _is_range(a) and id(a) not in top_memo:
            chain.append(a)
            a = a.cpu_parent
        above = top_memo[id(a)] if a is not None and not _is_range(a) else None
        for x in reversed(chain):
            if above is None and _is_op(x):
                above = x
            top_memo[id(x)] = above
        return None if _is_range(evt) else top_memo[id(evt)]

    # 1. what each module call and each user-function call runs (the outermost ops inside it)
    tops = [e for e in cpu_events if _is_op(e) and top_op(e) is e]
    ops_in_call: dict[int, list[str]] = defaultdict(list)
    ops_in_func: dict[int, list[str]] = defaultdict(list)
    func_events: dict[int, Any] = {}
    for e in tops:
        a = e.cpu_parent
        while a is not None:
            if _is_range(a):
                ops_in_call[id(a)].append(e.name)
            elif _user_function(a):
                ops_in_func[id(a)].append(e.name)
                func_events[id(a)] = a
            a = a.cpu_parent
    first_call: dict[int, Any] = {}
    for e in cpu_events:
        if _is_range(e):
            first_call.setdefault(ranges.module_index(e.name), e)
    kinds: dict[int, str | None] = {}
    for idx, (path, module) in enumerate(ranges.modules):
        r = first_call.get(idx)
        names = ops_in_call.get(id(r), []) if r is not None else []
        kinds[idx] = classify_module(module, names) if names else None
    func_kinds = {fid: classify_function(_user_function(func_events[fid]), names)
                  for fid, names in ops_in_func.items()}

    claim_memo: dict[int, tuple[Any, Any]] = {}

    def claimer(evt):
        """The scope that claims `evt`: the innermost classified module call around it (or `evt`
        itself), else the innermost classified function call; None if there is neither. A module
        wins over a function inside it (Meta's RMSNorm.forward calls self._norm): the module is
        the unit the integration swaps."""
        chain, a = [], evt
        while a is not None and id(a) not in claim_memo:
            chain.append(a)
            a = a.cpu_parent
        module_claim, func_claim = claim_memo[id(a)] if a is not None else (None, None)
        for x in reversed(chain):  # outermost first: an inner claim overrides an outer one
            if _is_range(x):
                if kinds.get(ranges.module_index(x.name)):
                    module_claim = x
            elif func_kinds.get(id(x)):
                func_claim = x
            claim_memo[id(x)] = (module_claim, func_claim)
        module_claim, func_claim = claim_memo[id(evt)]
        return module_claim or func_claim

    # a type whose one call is two operators in a row (a recognise hook's OP_PAIR: log_softmax then
    # nll_loss on its output, a cross-entropy written out by hand): in one scope, the tail on the head's
    # input joins the head's call, and both make one row
    pair_partner: dict[int, Any] = {}  # id(tail top op) -> its head top op
    pair_heads: dict[int, tuple[str, str]] = {}  # id(head top op) -> (kind, call name)
    for heads, tails, call_name, pair_kind in op_pairs():
        last_head: dict[int, Any] = {}
        for e in tops:
            short = OpCall(e.name).short
            if short in heads:
                last_head[id(scope(e))] = e
            elif short in tails:
                head = last_head.pop(id(scope(e)), None)
                if head is not None and (head.input_shapes or [None])[0] == (e.input_shapes or [None])[0]:
                    pair_partner[id(e)] = head
                    pair_heads[id(head)] = (pair_kind, call_name)

    # 2. every event's self time, once, to a (kind, name) group and one call within it
    groups: dict[tuple[str, str], dict[int, _Call]] = defaultdict(dict)
    group_modules: dict[tuple[str, str], set[str]] = defaultdict(set)

    def call_for(evt):
        """(group key, call id) for the unit of work `evt` belongs to, creating the call."""
        c = claimer(evt)
        if c is not None and _is_range(c):
            idx = ranges.module_index(c.name)
            path, module = ranges.modules[idx]
            key = (kinds[idx], type(module).__name__)
            group_modules[key].add(path or type(module).__name__)
            if id(c) not in groups[key]:
                groups[key][id(c)] = _Call(arg_shapes=ranges.call_args.get(c.name, []))
            return key, id(c)
        if c is not None:
            key = (func_kinds[id(c)], f"{_user_function(c)}()")
            if id(c) not in groups[key]:
                groups[key][id(c)] = _Call()
            return key, id(c)
        top = top_op(evt)
        if top is not None and id(top) in pair_partner:
            top = pair_partner[id(top)]
        unit = top or evt
        if top is not None and id(top) in pair_heads:
            key = pair_heads[id(top)]
        elif top is not None:
            key = (kind_of_op(top.name), unit.name)
        else:  # a kernel launched from Python (Triton), outside any operator: name it by the kernel
            kernels = getattr(evt, "kernels", None) or []
            key = ("other", kernels[0].name if kernels else evt.name)
        cid = id(unit)
        if cid not in groups[key]:
            oc = _op_call(unit)
            groups[key][cid] = _Call(ops=[oc] if top is not None else [],
                                     arg_shapes=[shape_text(s) for s, _ in oc.tensor_args()])
        return key, cid

    for e in tops:  # claimed calls collect the outermost ops they ran, for shapes and bytes
        if claimer(e) is not None:
            key, cid = call_for(e)
            call = groups[key][cid]
            call.ops.append(_op_call(e))
            if not call.arg_shapes:  # a function call: show what its first operator read
                call.arg_shapes = [shape_text(s) for s, _ in call.ops[0].tensor_args()]
    for e in cpu_events:
        us = _self_us(e, device)
        if us <= 0:
            continue
        if device != "cuda" and (_is_range(e) or _is_python(e)):
            continue  # a range's or a Python function's own CPU time is interpreter and profiler overhead
        key, cid = call_for(e)
        groups[key][cid].time_us += us

    # 3. rows
    rows = []
    for key, calls in groups.items():
        kind, name = key
        total_us = sum(c.time_us for c in calls.values())
        if total_us <= 0:
            continue
        spec = _spec(kind)
        bytes_, flops, floor = 0, 0, 0.0
        dtypes: set[str] = set()
        best = max(calls.values(), key=lambda c: c.time_us)
        for c in calls.values():
            dt = main_dtype(c.ops)
            if dt:
                dtypes.add(dt)
            cost = _cost(kind, spec, c.ops, dt)
            if cost is None:  # what it moves is unknown: claim no speedup for this call
                floor += c.time_us / 1e3
                continue
            b, f = cost
            bytes_ += b
            flops += f
            floor += _floor_ms(b, f, dt or "fp32", ceil)
        self_ms = total_us / 1e3 / iters
        floor_ms = floor / iters
        # a target only where the spec's kernel can stand in for the call (not a batched matmul)
        exact = kind != "other" and exact_spec_shape(kind, best.ops)
        target_shape = kernel_shape(kind, best.ops) if exact else None
        shapes_by_time = defaultdict(float)
        for c in calls.values():
            shapes_by_time[", ".join(c.arg_shapes)] += c.time_us
        shapes = [s for s, _ in sorted(shapes_by_time.items(), key=lambda kv: -kv[1]) if s][:3]
        s = amdahl.kernel_speedup(self_ms, floor_ms)
        rows.append(ProfileRow(
            name=name, kind=kind, calls=round(len(calls) / iters, 3), shapes=shapes, dtypes=sorted(dtypes),
            self_ms=self_ms, share=0.0, bytes=int(bytes_ / iters), flops=int(flops / iters), floor_ms=floor_ms,
            kernel_speedup=s, max_speedup=1.0, target_shape=target_shape,
            target_dtype=main_dtype(best.ops) if target_shape else None,
            modules=sorted(group_modules.get(key, ())),
        ))
    return rows


def _spec(kind: str):
    if kind == "other":
        return None
    try:
        from ..kernels import get_spec

        return get_spec(kind)
    except ValueError:
        return None  # that kernel type is not in this build yet: estimate from the operators
    except Exception:  # a spec that fails to import must not stop a profile: estimate instead
        return None


def _cost(kind: str, spec, ops: list[OpCall], dtype: str | None) -> tuple[int, int] | None:
    """Bytes and FLOPs of one call: the spec's formula on its shape when there is one (what a fused
    kernel must do), else the sum over the operators it ran; None when that cannot be known."""
    if spec is not None and dtype in TORCH_DTYPES and exact_spec_shape(kind, ops):
        shape = kernel_shape(kind, ops)
        if shape:
            try:
                return int(spec.bytes_moved(shape, TORCH_DTYPES[dtype])), int(spec.flops(shape, TORCH_DTYPES[dtype]))
            except Exception:  # a spec formula that does not take this shape: fall back to the ops
                pass
    if not all(cost_known(op) for op in ops):
        return None
    b = f = 0
    for op in ops:
        ob, of = op_cost(op)
        b += ob
        f += of
    return b, f
