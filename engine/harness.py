"""The five correctness stages, run inside a worker process against one candidate.

Every trial draws fresh random inputs (a new seed each time, so a kernel that caches results is
caught), computes the reference in float64 *before* the candidate runs, poisons the memory the
caching allocator is about to hand out, calls the candidate while recording every PyTorch op it
issues, synchronizes the whole device (work left on a side stream is waited for), and then checks:
the inputs are unchanged, no PyTorch compute op was called, a kernel of its own was launched, the
output has the reference's shape and dtype, no NaN/Inf where the reference is finite, and the values
are within the spec's tolerance, compared in float64. A whole problem whose Model returns several
tensors has each output checked so, by position (`engine/outputs.py`), and is also held to KernelBench's own
rule (`KernelSpec.native_tolerance`): within its tolerance of Model run in the inputs' own dtype on this
device, the very answer (TF32 convolutions and all) KernelBench compares against.

Memory (a KernelBench problem's inputs may take a large share of the GPU): each trial is planned from its
footprint (`engine/fit.py`) before anything is allocated. A problem whose own tensors exceed the free
memory gets the "does not fit" verdict with that footprint; the float64 reference is used only when its
copies fit with a clear margin, else the reference runs in the inputs' own dtype (the stage detail says
so); values are compared in float64 a chunk at a time; and nothing of a trial outlives it.

This module never runs in the engine's process: `engine/worker.py` runs it in a subprocess.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import secrets
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel.kernels.spec import KernelSpec, noncontiguous_like

from . import coverage, fit, guards, l2, sandbox
from .outputs import OutputCountError, as_list, chunks, paired, several
from .results import FAIL, PASS, SKIPPED, STAGES, StageOutcome

# Under Triton's interpreter big shapes take minutes: the CPU run keeps to problems this size
# (spec.elements(shape)); matmul-like kernels are counted as M*N*K, hence the larger limit.
CPU_ELEMENT_LIMIT = 70_000
CPU_ELEMENT_LIMIT_COMPUTE = 300_000

# Aten ops a candidate may issue: allocation, views, copies and casts. Anything else computes
# (part of) the result in PyTorch instead of in the candidate's own kernel.
ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "full", "full_like", "new_full", "ones", "ones_like", "fill_", "zero_", "arange",
    "view", "_unsafe_view", "reshape", "as_strided", "alias", "detach", "lift_fresh", "t", "transpose",
    "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "narrow", "unbind", "split",
    "split_with_sizes", "chunk", "view_as", "flatten", "unflatten", "contiguous", "clone", "copy_",
    "_to_copy", "to", "resize_", "set_", "record_stream",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_reshape_alias", "as_strided_",
    "empty_permuted", "_has_compatible_shallow_copy_type", "is_same_size", "size", "stride",
    "storage_offset", "numel", "dim", "_unsafe_index",
})

# Ops that bring tensor values to the host or compare whole tensors. A kernel has no use for them;
# a cache that recognises an input it has seen before (and skips the work when timed) needs them.
HOST_READ_OPS = frozenset({"_local_scalar_dense", "item", "is_nonzero", "equal", "allclose", "tolist"})


class CandidateError(Exception):
    """The candidate could not even be loaded (syntax error, import error, no kernel_fn)."""


def load_candidate(path: str | Path, module_name: str, entry: str = "kernel_fn") -> Callable[..., Any]:
    """Import a candidate file under a unique module name and return its `entry` (`kernel_fn`, or a
    whole-problem candidate's `ModelNew` class)."""
    path = Path(path)
    try:
        source = path.read_text()
    except OSError as e:
        raise CandidateError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        tree = ast.parse(source, str(path))
        compile(tree, str(path), "exec")
    except SyntaxError as e:
        raise CandidateError(f"{path.name}: line {e.lineno}: SyntaxError: {e.msg}") from None
    why = static_refusal(tree)
    if why:
        raise CandidateError(f"{path.name}: {why}")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the candidate's own import-time failure
        raise CandidateError(f"{path.name}: importing raised {type(e).__name__}: {_first_line(e)}"
                             f"{sandbox.explain(e)}") from None
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise CandidateError(f"{path.name} defines no {entry}")
    return fn


# The first line against a candidate reaching out of its worker (the operating system's layers in
# `engine/sandbox.py` hold what a source hides): modules for the network or other processes, and os calls
# that start, replace or signal processes.
NETWORK_MODULES = frozenset({"socket", "ssl", "urllib", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
                             "telnetlib", "xmlrpc", "asyncio"})
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "pty", "pexpect", "sh"})
OS_PROCESS_CALLS = re.compile(r"^(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawnp?|kill|killpg)$")
_ENV_READS = frozenset({"environ", "environb", "getenv", "getenvb"})


def static_refusal(tree: ast.Module) -> str:
    """'' for a source the static check lets through; else why not, in one line."""
    env_read = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top in NETWORK_MODULES:
                    return f"imports {name}: a kernel has no use for the network"
                if top in PROCESS_MODULES:
                    return f"imports {name}: a kernel may not start processes"
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                hit = [a.name for a in node.names if OS_PROCESS_CALLS.match(a.name)]
                if hit:
                    return f"imports os.{hit[0]}: a kernel may not start or signal processes"
        elif isinstance(node, ast.Call) and _imports_by_name(node) in NETWORK_MODULES | PROCESS_MODULES:
            return f"imports {_imports_by_name(node)} by name: a kernel has no use for the network or processes"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if OS_PROCESS_CALLS.match(node.attr):
                return f"uses os.{node.attr}: a kernel may not start or signal processes"
            env_read = env_read or node.attr in _ENV_READS
    if env_read:
        keys = sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and sandbox.SECRET.search(n.value) and n.value.isidentifier()})
        if keys:
            return f"reads the environment variable {keys[0]}: a kernel has no use for credentials"
    return ""


def _imports_by_name(call: ast.Call) -> str:
    """The top module `__import__("x")` or `importlib.import_module("x.y")` names, else ''."""
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if name in ("__import__", "import_module") and call.args and isinstance(call.args[0], ast.Constant) \
            and isinstance(call.args[0].value, str):
        return call.args[0].value.split(".")[0]
    return ""


def bind_candidate(spec: KernelSpec, loaded: Callable[..., Any]) -> Callable[..., Any]:
    """What the stages call: `loaded` itself, or what the spec builds from it (a ModelNew instance).
    Building runs here, before any call is watched: creating parameters with torch ops in `__init__`
    is not computing the result."""
    if spec.bind is None:
        return loaded
    try:
        return spec.bind(loaded)
    except Exception as e:
        raise CandidateError(f"building {spec.entry} raised {type(e).__name__}: {_first_line(e)}"
                             f"{sandbox.explain(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


# -- watching what the candidate does ---------------------------------------------------------

class _OpRecorder(TorchDispatchMode):
    """Records the aten ops a call issues (except inside kernel launches, which are ours to allow)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.device_moves: list[str] = []
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            name = func.overloadpacket.__name__
            self.ops.append(name)
            if name == "_to_copy" and args and isinstance(args[0], torch.Tensor):
                dev = kwargs.get("device")
                if dev is not None and torch.device(dev).type != args[0].device.type:
                    self.device_moves.append(f"{args[0].device.type} -> {torch.device(dev).type}")
        return func(*args, **kwargs)


class LaunchTracker:
    """Counts the candidate's own kernel launches (Triton, interpreted or compiled) and pauses op
    recording while Triton's launcher runs (the interpreter copies tensors with aten ops)."""

    def __init__(self) -> None:
        self.launches = 0
        self.recorder: _OpRecorder | None = None
        # The caller's CUDA stream while a candidate call is watched, and how many launches went
        # elsewhere: work on a side stream is never waited for by a caller (or a timer) on its stream.
        self.expected_stream: int | None = None
        self.off_stream = 0
        self._install()

    def note_stream(self) -> None:
        expected = self.expected_stream
        if expected is None:
            return
        try:
            if torch.cuda.current_stream().cuda_stream != expected:
                self.off_stream += 1
        except Exception:  # never let the bookkeeping break a launch
            pass

    def _install(self) -> None:
        try:
            import triton.runtime.jit as jit
        except Exception:  # no Triton: CUDA candidates only
            return
        targets = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            targets.append(InterpretedFunction)
        except Exception:
            pass
        for cls in targets:
            original = cls.run
            if getattr(original, "_autokernel_wrapped", False):
                continue
            tracker = self

            def run(self_, *args, __original=original, **kwargs):
                tracker.launches += 1
                tracker.note_stream()
                rec = tracker.recorder
                if rec is not None:
                    rec.paused += 1
                try:
                    return __original(self_, *args, **kwargs)
                finally:
                    if rec is not None:
                        rec.paused -= 1

            run._autokernel_wrapped = True
            cls.run = run


_TRACKER: LaunchTracker | None = None


def launch_tracker() -> LaunchTracker:
    global _TRACKER
    if _TRACKER is None:
        _TRACKER = LaunchTracker()
    return _TRACKER


def _cuda_foreign_kernels(fn: Callable[[], Any]) -> int:
    """How many GPU kernels a call launched that are not PyTorch's own (a CUDA extension's).

    The profiler links each GPU kernel to the operator that launched it: PyTorch's kernels (cuBLAS,
    copies, fills) run inside an `aten::` op, a CUDA extension's from its own binding, outside any.
    Names are no guide: an extension's kernel may well be called `wmma_gemm_kernel`."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.events()

    def compute(name: str) -> bool:
        return not name.lower().startswith(("memcpy", "memset"))

    launched = sum(1 for e in events if getattr(e, "device_type", None) == DeviceType.CUDA and compute(e.name))
    by_torch = sum(1 for e in events if getattr(e, "device_type", None) == DeviceType.CPU
                   and e.name.startswith("aten::") for k in e.kernels if compute(k.name))
    return max(0, launched - by_torch)


# -- one trial -------------------------------------------------------------------------------

@dataclass
class CheckContext:
    spec: KernelSpec
    kernel_fn: Callable[..., Any]
    device: str
    extra_shapes: list[dict] = field(default_factory=list)
    out_dtype_cache: dict = field(default_factory=dict)
    own_kernel_seen: bool = False
    # A subset of the spec's dtypes to check (the search screens candidates in the target's dtype and
    # checks every dtype only before it keeps one); None: all of them.
    dtypes: tuple | None = None
    # The dtypes whose trials in the current stage were judged by a reference in their own dtype (memory).
    own_dtype_refs: set = field(default_factory=set)

    @property
    def interpreter(self) -> bool:
        return self.device == "cpu"

    def element_limit(self) -> float:
        if not self.interpreter:
            return math.inf
        return CPU_ELEMENT_LIMIT_COMPUTE if self.spec.metric == "TFLOP/s" else CPU_ELEMENT_LIMIT

    def fits(self, shape: dict, allowance: float = 1.0) -> bool:
        return self.spec.elements(shape) <= self.element_limit() * allowance


class TrialFailure(Exception):
    """A trial found the candidate wrong; the message is the stage's plain reason."""


def _fmt_shape(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items())


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))


def _upcast(args: tuple) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def _snapshot(args: tuple, on_device: bool = True) -> list:
    """Copies of the inputs, to see whether the candidate changed them: on the host when the device has no
    room for a second copy of a large problem's inputs."""
    return [(a.clone() if on_device else a.detach().to("cpu", copy=True)) if isinstance(a, torch.Tensor) else None
            for a in args]


def _unchanged(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`a` still equals its snapshot `b` (which may be on the host), a chunk at a time."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat = b.reshape(-1)
    return all(torch.equal(x.to(b.device), flat[start:start + x.numel()]) for start, x in chunks(a))


# -- memory: the plan of one trial ---------------------------------------------------------------

WIDE_MARGIN = 2  # the float64 copies are counted twice over: the reference's own intermediates are float64 too
OWN_DTYPE_TOLERANCE = 2.0  # a kernel type's tolerance, widened when the reference carries rounding of its own

_FOOTPRINTS: dict[tuple, fit.Footprint] = {}


@dataclass(frozen=True)
class TrialPlan:
    wide: bool  # the reference in float64 (else in the inputs' own dtype)
    snapshot_on_device: bool


def footprint(ctx: CheckContext, shape: dict, dtype: torch.dtype) -> fit.Footprint:
    """The trial's tensors at `shape` and `dtype`: a whole problem's, measured when it was built; a kernel
    type's, from its inputs and reference run on fake tensors (shapes only, nothing allocated)."""
    given = getattr(ctx.spec.reference, "footprint", None)
    if given is not None:
        return given
    key = (ctx.spec.name, ctx.spec.reference, tuple(sorted(shape.items())), dtype)
    if key not in _FOOTPRINTS:
        try:  # sizes are the same on every device; fake host tensors draw from the host generator as given
            with FakeTensorMode(allow_non_fake_inputs=True):
                args = ctx.spec.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(0), "normal")
                outs = as_list(ctx.spec.reference(*args))
            floating = sum(t.numel() for t in [*args, *outs] if isinstance(t, torch.Tensor) and t.is_floating_point())
            _FOOTPRINTS[key] = fit.Footprint(fit.tensor_bytes(args), fit.tensor_bytes(outs), 0, 8 * floating)
        except Exception:  # a reference fake tensors cannot run: the bytes the spec says the op moves, halved
            moved = int(ctx.spec.bytes_moved(shape, dtype))
            _FOOTPRINTS[key] = fit.Footprint(moved - moved // 2, moved // 2, 0, moved // dtype.itemsize * 8)
    return _FOOTPRINTS[key]


def plan_trial(ctx: CheckContext, shape: dict, dtype: torch.dtype) -> TrialPlan:
    """Where a trial's tensors go, decided before any is allocated, against `fit.free_bytes`.

    The problem's own footprint (inputs, the reference's and the candidate's outputs) must fit, or the
    trial is not run: `fit.DoesNotFit`, its verdict naming that footprint. The float64 reference (upcast
    inputs, float64 outputs and weights) is the better judge and is used when it fits with a clear margin.
    Else the reference runs in the inputs' own dtype on the device: what KernelBench itself compares against
    (with atol = rtol = 1e-2, a whole problem's tolerance here), and for a kernel type with twice its
    tolerance, since the reference's own rounding is then of the same size as an allowed candidate's. A
    float64 reference on the host was the other way: sound too, but for a multi-GB problem it takes longer
    than a stage's time limit, on every trial."""
    fp = footprint(ctx, shape, dtype)
    free = fit.free_bytes(ctx.device)
    if fp.to_allocate > free:
        fit.release(ctx.device)  # what earlier stages and candidates left in the caches is not the problem's
        free = fit.free_bytes(ctx.device)
        if fp.to_allocate > free:
            raise fit.DoesNotFit(fp.total, ctx.device, "its inputs, the reference's and the candidate's outputs"
                                 + (", its weights" if fp.params else ""))
    own = fp.to_allocate + fp.inputs  # args, the two outputs and the snapshot of the inputs
    wide = own + WIDE_MARGIN * fp.wide <= free
    return TrialPlan(wide=wide, snapshot_on_device=wide or own <= free)


def _reference(ctx: CheckContext, args: tuple, dtype: torch.dtype, plan: TrialPlan) -> Any:
    """The reference's answer for `args`: in float64 when the plan allows (and it does not run out after
    all), else in the inputs' own dtype, noted for the stage's detail."""
    if plan.wide:
        try:
            return ctx.spec.reference(*_upcast(args))
        except torch.OutOfMemoryError:
            fit.release(ctx.device)
    ctx.own_dtype_refs.add(dtype)
    ref = ctx.spec.reference(*args)
    if dtype not in ctx.out_dtype_cache:  # its output's dtype is the one the candidate's must have
        ctx.out_dtype_cache[dtype] = tuple(o.dtype for o in ref) if several(ref) else ref.dtype
    return ref


def judge_output(spec: KernelSpec, out: Any, args: tuple, dtype: torch.dtype, device: str) -> str:
    """Check an output made outside the stages (the timer's last call) against the reference for `args`,
    under a trial's memory rule: float64 only where its copies fit twice over in what is free, else the
    inputs' own dtype; compared a chunk at a time. Raises TrialFailure; returns how it was judged."""
    ctx = CheckContext(spec, None, device)
    outs = [o for o in as_list(out) if isinstance(o, torch.Tensor)]
    floating = sum(t.numel() for t in [*args, *outs] if isinstance(t, torch.Tensor) and t.is_floating_point())
    given = getattr(spec.reference, "footprint", None)
    wide_bytes = max(8 * floating, given.wide if given is not None else 0)
    wide = fit.tensor_bytes(outs) + WIDE_MARGIN * wide_bytes <= fit.free_bytes(device)
    ref = _reference(ctx, args, dtype, TrialPlan(wide=wide, snapshot_on_device=False))
    judge(ctx, out, ref, args, dtype, "normal", "the timed call")
    return memory_note(ctx).removeprefix("; ")


def _tolerance(ctx: CheckContext, dtype: torch.dtype) -> tuple[float, float]:
    atol, rtol = ctx.spec.tolerance(dtype)
    if dtype in ctx.own_dtype_refs and ctx.spec.bind is None:  # a kernel type; a whole problem keeps KernelBench's
        return atol * OWN_DTYPE_TOLERANCE, rtol * OWN_DTYPE_TOLERANCE
    return atol, rtol


def memory_note(ctx: CheckContext) -> str:
    """What the stage's detail says when some of its trials were judged in their own dtype."""
    if not ctx.own_dtype_refs:
        return ""
    parts = []
    for d in sorted(ctx.own_dtype_refs, key=str):
        atol, rtol = _tolerance(ctx, d)
        parts.append(f"{_dtype_name(d)} (atol={atol:.2g}, rtol={rtol:.2g})")
    return ("; judged against the reference in the inputs' own dtype, " + ", ".join(parts)
            + ": its float64 copies would not fit in the device's free memory")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _poison_value(dtype: torch.dtype) -> Any:
    """NaN, or for an integer or bool output a value as unlikely to be right (NaN is no integer)."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).max


def _poison_allocator(ref: Any, dtype: Any, device: str) -> None:
    """Fill the blocks the caching allocator will hand out next with NaN, so an output the candidate
    never writes cannot silently hold an earlier (reference) result. `ref` and `dtype`: the one
    output's, or (sequences) each output's."""
    if device != "cuda":
        return
    shapes = [(r.shape, d) for r, d in zip(as_list(ref), as_list(dtype)) if r.numel()]
    need = sum(r.numel() * d.itemsize for r, d in zip(as_list(ref), as_list(dtype)))
    # Two blocks of each when there is room, one when the candidate's own output barely fits beside it.
    free = fit.free_bytes(device)
    copies = 2 if 3 * need <= free else 1 if 2 * need <= free else 0
    blocks = [torch.full(shape, _poison_value(d), dtype=d, device=device) for shape, d in shapes for _ in range(copies)]
    del blocks


def make_args(ctx: CheckContext, shape: dict, dtype: torch.dtype, mode: str) -> tuple:
    gen = torch.Generator().manual_seed(secrets.randbits(62))  # fresh inputs for every trial
    return tuple(ctx.spec.make_inputs(shape, dtype, ctx.device, gen, mode))


def _dynamo_frames() -> int:
    """Frames torch.compile has compiled in this process (a candidate must not add any)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0
    return int(sum(dynamo.counters["frames"].values()))


# Ways to get a tensor's values into Python or numpy without an aten op (so the op recorder never
# sees them): on a CPU tensor a candidate could compute the whole result in numpy.
HOST_COPY_METHODS = ("numpy", "__array__", "tolist")


@contextmanager
def _host_copies_watched(tracker: "LaunchTracker") -> Iterator[list[str]]:
    """Records calls of `HOST_COPY_METHODS` made by the candidate (not by Triton's launcher, which
    the tracker marks as paused), by shadowing them on torch.Tensor for the length of one call."""
    seen: list[str] = []
    had = {n: vars(torch.Tensor)[n] for n in HOST_COPY_METHODS if n in vars(torch.Tensor)}

    def watch(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self, *a, **k):
            rec = tracker.recorder
            if rec is not None and not rec.paused:
                seen.append(name)
            return original(self, *a, **k)
        return method

    for name in HOST_COPY_METHODS:
        setattr(torch.Tensor, name, watch(name, getattr(torch.Tensor, name)))
    try:
        yield seen
    finally:
        for name in HOST_COPY_METHODS:
            if name in had:
                setattr(torch.Tensor, name, had[name])
            else:
                delattr(torch.Tensor, name)


def _refuse_what_escapes(out: Any, threads: str, device: str) -> None:
    """Outputs that compute when read, work left on a thread, replaced library functions, L2 set aside to
    survive the timer's flush: each would let the values come out right while the call (and so the timer)
    does less than the work."""
    changed = guards.replaced()
    if changed:
        raise TrialFailure(guards.replaced_reason(changed, "during a call"))
    for k, o in enumerate(as_list(out)):
        why = guards.output_refusal(o)
        if why:
            raise TrialFailure(f"{why}{f' (output {k})' if several(out) else ''}")
    if threads:
        raise TrialFailure(threads)
    if l2.persisting_bytes(device):
        raise TrialFailure("sets aside L2 for persisting accesses (cudaLimitPersistingL2CacheSize): its lines would "
                           "survive the timer's L2 flush, which no caller in a model gets")


def call_watched(ctx: CheckContext, args: tuple) -> Any:
    """Call the candidate, recording its PyTorch ops and counting its kernel launches."""
    tracker = launch_tracker()
    before = tracker.launches
    frames_before = _dynamo_frames()
    rec = _OpRecorder()
    tracker.recorder = rec
    tracker.off_stream = 0
    if ctx.device == "cuda":
        tracker.expected_stream = torch.cuda.current_stream().cuda_stream
    threads_before = guards.thread_snapshot()
    l2.reset(ctx.device)  # GPU only: what a candidate set aside is seen after its own call
    try:
        with _host_copies_watched(tracker) as host_copies, rec:
            out = ctx.kernel_fn(*args)
        threads = guards.threads_left(threads_before)  # before the sync: a thread may be about to finish
        _sync(ctx.device)
    finally:
        tracker.recorder = None
        tracker.expected_stream = None
    if tracker.off_stream:
        raise TrialFailure("launches its kernel on a side stream: a caller (or a timer) on its own stream never "
                           "waits for that work; launch on torch.cuda.current_stream()")
    if host_copies:
        raise TrialFailure(f"copies tensor values to Python/numpy (Tensor.{host_copies[0]}): the work must run in "
                           "its own kernel")
    if _dynamo_frames() > frames_before:
        raise TrialFailure("runs torch.compile: PyTorch (Inductor) computes the result, not a kernel of its own")
    host_reads = sorted({op for op in rec.ops if op in HOST_READ_OPS})
    if host_reads:
        raise TrialFailure(f"reads tensor values on the host (aten::{host_reads[0]}): a kernel's work must not depend "
                           "on Python looking at the data (that is how a result cache recognises its inputs)")
    compute_ops = sorted({op for op in rec.ops if op not in ALLOWED_OPS and op not in ctx.spec.library_ops})
    if set(compute_ops) & {o.removeprefix("aten::") for o in ctx.spec.forbidden_ops}:
        hit = sorted(set(compute_ops) & {o.removeprefix("aten::") for o in ctx.spec.forbidden_ops})
        raise TrialFailure(f"calls the reference op aten::{hit[0]} instead of launching its own kernel")
    if compute_ops:
        raise TrialFailure(
            f"computes with PyTorch ops ({', '.join('aten::' + o for o in compute_ops[:4])}) instead of its own kernel")
    if rec.device_moves:
        raise TrialFailure(f"moves data off the device ({rec.device_moves[0]}): the work must run in its own kernel")
    _refuse_what_escapes(out, threads, ctx.device)
    if tracker.launches > before:
        ctx.own_kernel_seen = True
    elif not ctx.own_kernel_seen:
        if ctx.device == "cuda" and _cuda_foreign_kernels(lambda: ctx.kernel_fn(*args)) > 0:
            ctx.own_kernel_seen = True
        else:
            raise TrialFailure("launched no kernel of its own (no Triton launch, no CUDA extension kernel)")
    return out


def expected_dtype(ctx: CheckContext, dtype: torch.dtype) -> torch.dtype | tuple[torch.dtype, ...]:
    """The reference's output dtype for inputs of `dtype` (from a tiny run of the reference); a tuple,
    one per output, for a reference that returns several."""
    if dtype not in ctx.out_dtype_cache:
        gen = torch.Generator().manual_seed(0)
        args = ctx.spec.make_inputs(ctx.spec.smoke_shape, dtype, "cpu", gen, "normal")
        out = ctx.spec.reference(*args)
        ctx.out_dtype_cache[dtype] = tuple(o.dtype for o in out) if several(out) else out.dtype
    return ctx.out_dtype_cache[dtype]


def compare(ctx: CheckContext, out: Any, ref: Any, dtype: torch.dtype, mode: str, where: str,
            tolerance: Callable[[torch.dtype], float] | None = None, slack: Any = None) -> None:
    """Shape, dtype, non-finite values and tolerance, in float64: of the one output, or of each of a
    reference's several (as many, in order; a failure names the output by its position). `tolerance`: atol =
    rtol by output dtype, in place of the spec's; `slack`: another answer (as `ref` is structured) whose
    distance from `ref` is allowed on top, element by element."""
    try:
        pairs = paired(out, ref)
    except OutputCountError as e:
        raise TrialFailure(f"{where}: {ctx.spec.entry} {e}") from None
    wants = as_list(expected_dtype(ctx, dtype))
    slacks = as_list(slack) if slack is not None else [None] * len(pairs)
    for (name, o, r), want, extra in zip(pairs, wants, slacks):
        _compare_one(ctx, o, r, want, dtype, mode, f"{where}, {name}" if name else where,
                     (tolerance(want),) * 2 if tolerance else None, extra)


def _compare_one(ctx: CheckContext, out: Any, ref: torch.Tensor, want: torch.dtype, dtype: torch.dtype, mode: str,
                 where: str, tolerance: tuple[float, float] | None = None, slack: Any = None) -> None:
    """One output against its float64 reference (`want`: the dtype it must have; `dtype`: the inputs')."""
    if not isinstance(out, torch.Tensor):
        raise TrialFailure(f"{where}: {ctx.spec.entry} returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        raise TrialFailure(f"{where}: output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != want:
        raise TrialFailure(f"{where}: output dtype {out.dtype}, expected {want}")
    if out.device.type != torch.device(ctx.device).type:
        raise TrialFailure(f"{where}: output on {out.device}, expected {ctx.device}")
    atol, rtol = tolerance or _tolerance(ctx, dtype)
    if mode != "normal" and ref.numel():  # scaled regimes: the absolute tolerance scales with the answer
        biggest = 0.0
        for _, r in chunks(ref):
            r = r.double()
            finite = r[torch.isfinite(r)]
            if finite.numel():
                biggest = max(biggest, float(finite.abs().max()))
        atol *= max(1.0, biggest)
    # In float64 a chunk at a time: a whole output in float64, and its temporaries, would take several
    # times the output's own size (a multi-GB output: tens of GiB).
    flat_out = out.detach().reshape(-1)
    for start, r in chunks(ref):
        o = flat_out[start:start + r.numel()].double()
        r = r.double()
        bad_nonfinite = ~torch.isfinite(o) & torch.isfinite(r)
        if bool(bad_nonfinite.any()):
            k = int(bad_nonfinite.nonzero()[0, 0])
            idx = _index(start + k, ref.shape)
            raise TrialFailure(f"{where}: {o[k].item()} at {idx} where the reference is finite ({r[k].item():.4g})")
    worst, worst_at, n_bad = -1.0, (0, 0.0, 0.0), 0
    for start, r in chunks(ref):
        o = flat_out[start:start + r.numel()].double()
        r = r.double()
        err = (o - r).abs()
        both_inf = torch.isinf(o) & torch.isinf(r) & (torch.sign(o) == torch.sign(r))
        allowed = atol + rtol * r.abs()
        if isinstance(slack, torch.Tensor) and slack.shape == ref.shape:
            allowed = allowed + (slack.detach().reshape(-1)[start:start + r.numel()].to(r.device).double() - r).abs()
        bad = ~((err <= allowed) | both_inf | (torch.isnan(o) & torch.isnan(r)))
        if bool(bad.any()):
            err = torch.where(bad, err.nan_to_num(nan=math.inf), torch.zeros_like(err))
            k = int(err.argmax())
            n_bad += int(bad.sum())
            if float(err[k]) > worst:
                worst, worst_at = float(err[k]), (start + k, o[k].item(), r[k].item())
    if n_bad:
        flat, got, expected = worst_at
        raise TrialFailure(
            f"{where}: max abs error {worst:.3g} at {_index(flat, ref.shape)} (got {got:.6g}, "
            f"expected {expected:.6g}; atol={atol:.2g}, rtol={rtol:.2g}; "
            f"{n_bad} of {ref.numel()} elements off)")


def _index(flat: int, shape: torch.Size) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)] if len(shape) else []


def trial(ctx: CheckContext, shape: dict, dtype: torch.dtype, mode: str = "normal", noncontig: bool = False) -> None:
    """One fresh-input run of the candidate, checked against the reference (float64 where it fits, see
    `plan_trial`). Its inputs, outputs and reference are this function's locals only: all are freed when it
    returns."""
    where = f"{_fmt_shape(shape)}, {_dtype_name(dtype)}" + ("" if mode == "normal" else f", {mode} inputs") + (
        ", non-contiguous" if noncontig else "")
    plan = plan_trial(ctx, shape, dtype)
    if plan.wide:
        expected_dtype(ctx, dtype)  # its small run (a whole problem's full draw) before this trial's tensors exist
    args = make_args(ctx, shape, dtype, mode)
    if noncontig:
        args = noncontiguous_args(ctx, args)
    before = _snapshot(args, plan.snapshot_on_device)
    ref = _reference(ctx, args, dtype, plan)
    _poison_allocator(ref, expected_dtype(ctx, dtype), ctx.device)
    out = call_watched(ctx, args)
    for i, (a, b) in enumerate(zip(args, before)):
        if b is not None and not _unchanged(a, b):
            raise TrialFailure(f"{where}: {ctx.spec.entry} modified its input argument {i}")
    del before
    judge(ctx, out, ref, args, dtype, mode, where)


def judge(ctx: CheckContext, out: Any, ref: Any, args: tuple, dtype: torch.dtype, mode: str, where: str) -> None:
    """`compare`, and for a whole problem (`KernelSpec.native_tolerance`) the two rules of its own forward:
    the candidate may be as far from the float64 answer as that forward is, element by element (a cuDNN conv
    in TF32 at large inputs is), and on normal inputs it must be within KernelBench's tolerance of it."""
    native = None
    try:
        compare(ctx, out, ref, dtype, mode, where)
    except TrialFailure as e:
        if ctx.spec.native_tolerance is None or not _is_wide(ref, dtype):
            raise
        native = ctx.spec.reference(*args)
        try:
            compare(ctx, out, ref, dtype, mode, where, slack=native)
        except TrialFailure:
            raise e from None  # what is wrong with it against the exact answer
    if mode == "normal" and ctx.spec.native_tolerance is not None:
        if _is_wide(ref, dtype):  # the float64 judge passed it; now the answer as the user's own code gives it
            ref = native if native is not None else ctx.spec.reference(*args)
        compare(ctx, out, ref, dtype, mode, f"{where}, against the reference in its own dtype",
                tolerance=ctx.spec.native_tolerance)


def _is_wide(ref: Any, dtype: torch.dtype) -> bool:
    """Whether `_reference` answered in float64 for inputs of `dtype` (not in their own dtype)."""
    return dtype != torch.float64 and any(isinstance(r, torch.Tensor) and r.dtype == torch.float64
                                          for r in as_list(ref))


# -- the five stages -------------------------------------------------------------------------

def _stage(name: str, body: Callable[[], str], entry: str = "kernel_fn") -> StageOutcome:
    t0 = guards.perf_counter()
    try:
        detail = body()
        return StageOutcome(name, PASS, detail, guards.perf_counter() - t0)
    except (TrialFailure, fit.DoesNotFit) as e:  # a no-fit detail is the verdict itself, with the footprint
        return StageOutcome(name, FAIL, str(e), guards.perf_counter() - t0)
    except DeviceFault:
        raise
    except Exception as e:  # the candidate raised: a failure with its own message
        if is_device_fault(e):
            raise DeviceFault(f"{type(e).__name__}: {_first_line(e)}") from None
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f" ({Path(f.filename).name}:{f.lineno})" for f in reversed(tb) if "autokernel" not in f.filename), "")
        return StageOutcome(name, FAIL, f"{entry} raised {type(e).__name__}: {_first_line(e)}{where}"
                            f"{sandbox.explain(e)}", guards.perf_counter() - t0)


class DeviceFault(Exception):
    """The GPU context is broken (illegal address, device-side assert): the worker must die."""


def is_device_fault(e: BaseException) -> bool:
    text = str(e).lower()
    return any(s in text for s in ("illegal memory access", "device-side assert", "unspecified launch failure",
                                   "illegal instruction", "misaligned address", "cuda error: an illegal"))


def _dtypes(ctx: CheckContext) -> tuple[torch.dtype, ...]:
    return tuple(ctx.dtypes) if ctx.dtypes else ctx.spec.dtypes


def _dtypes_text(ctx: CheckContext) -> str:
    """'3 dtypes', or 'bf16 only' when screening in a subset."""
    if ctx.dtypes and tuple(ctx.dtypes) != tuple(ctx.spec.dtypes):
        return "/".join(_dtype_name(d) for d in _dtypes(ctx)) + " only"
    return f"{len(_dtypes(ctx))} dtypes"


def stage_smoke(ctx: CheckContext) -> str:
    dtype = _dtypes(ctx)[0]
    trial(ctx, ctx.spec.smoke_shape, dtype)
    return f"{_fmt_shape(ctx.spec.smoke_shape)}, {_dtype_name(dtype)}"


def _sweep_shapes(ctx: CheckContext) -> tuple[list[dict], list[dict]]:
    """(shapes to run, shapes not run at full size) of the sweep and the extra (target) shapes, which get
    a larger allowance; on the interpreter a shape too large runs as a stand-in (`engine/coverage.py`)."""
    run, unrun = coverage.plan(ctx.spec.sweep_shapes, ctx.spec.batch_dims, ctx.fits)
    more, more_unrun = coverage.plan(ctx.extra_shapes, ctx.spec.batch_dims, lambda s: ctx.fits(s, allowance=4.0))
    return run + [s for s in more if s not in run], coverage.merge(unrun, more_unrun)


def _edge_shapes(ctx: CheckContext) -> tuple[list[dict], list[dict]]:
    return coverage.plan(ctx.spec.edge_shapes, ctx.spec.batch_dims, ctx.fits)


def view_shapes(ctx: CheckContext, edge_shapes: list[dict]) -> list[dict]:
    """The shapes the edge-case stage runs again as non-contiguous views: the smoke shape and the last edge one."""
    if not ctx.spec.noncontiguous_views:
        return []
    return [ctx.spec.smoke_shape] + [s for s in edge_shapes if s != ctx.spec.smoke_shape][-1:]


def noncontiguous_args(ctx: CheckContext, args: tuple) -> tuple:
    """The same values with each data tensor as a strided view (what real code passes: slices, transposes)."""
    return tuple(noncontiguous_like(a) if i in ctx.spec.data_args and isinstance(a, torch.Tensor) and a.dim() >= 1
                 else a for i, a in enumerate(args))


def unrun_shapes(ctx: CheckContext) -> tuple[list[dict], int]:
    """Every shape of the stages not run at full size (with its stand-in, if any), and how many distinct
    shapes the stages name: what a verdict must admit it did not check."""
    total = coverage.total_shapes([ctx.spec.smoke_shape], ctx.spec.sweep_shapes, ctx.extra_shapes, ctx.spec.edge_shapes)
    return coverage.merge(_sweep_shapes(ctx)[1], _edge_shapes(ctx)[1]), total


def _refill(args: tuple, fresh: tuple) -> None:
    """New values into the same tensor objects, leaving id, data_ptr and version counter as they were
    (`.data` has its own version counter), so nothing but the data itself tells the calls apart."""
    for a, b in zip(args, fresh):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a.data.copy_(b)


def reuse_trial(ctx: CheckContext, shape: dict, dtype: torch.dtype) -> None:
    """Two calls on the same tensor objects with new values in between: the second answer must follow
    the new values (a cache keyed on the tensor, its address or its version fails), and the first
    answer must be left as it was (a kernel that returns one shared output buffer fails)."""
    where = f"{_fmt_shape(shape)}, {_dtype_name(dtype)}"
    plan = plan_trial(ctx, shape, dtype)
    if plan.wide:
        expected_dtype(ctx, dtype)
    args = make_args(ctx, shape, dtype, "normal")
    ref1 = _reference(ctx, args, dtype, plan)
    out1 = call_watched(ctx, args)
    judge(ctx, out1, ref1, args, dtype, "normal", where)
    del ref1
    kept = _snapshot(tuple(as_list(out1)), plan.wide)  # on the host unless there is room to spare
    _refill(args, make_args(ctx, shape, dtype, "normal"))
    ref2 = _reference(ctx, args, dtype, plan)
    out2 = call_watched(ctx, args)
    try:
        judge(ctx, out2, ref2, args, dtype, "normal", where)
    except TrialFailure as e:
        raise TrialFailure(f"called again on the same tensors holding new values, it answered for the old ones "
                           f"(a result cache): {e}") from None
    if any(not isinstance(o, torch.Tensor) or not _unchanged(o, k) for o, k in zip(as_list(out1), kept)):
        raise TrialFailure(f"{where}: the next call overwrote the output of the previous one "
                           f"({ctx.spec.entry} returns a shared buffer, not a fresh output)")


def stage_shape_sweep(ctx: CheckContext) -> str:
    shapes, unrun = _sweep_shapes(ctx)
    # The smoke shape again, on fresh inputs: a kernel that caches its first answer fails here.
    trial(ctx, ctx.spec.smoke_shape, _dtypes(ctx)[0])
    reuse_trial(ctx, ctx.spec.smoke_shape, _dtypes(ctx)[0])
    for shape in shapes:
        for dtype in _dtypes(ctx):
            trial(ctx, shape, dtype)
    note = coverage.describe(unrun)
    return f"{len(shapes)} shapes x {_dtypes_text(ctx)}" + (f"; {note}" if note else "")


def _stability_shapes(ctx: CheckContext) -> list[dict]:
    shapes = [ctx.spec.smoke_shape]
    odd = [s for s in ctx.spec.sweep_shapes if ctx.fits(s) and any(int(v) % 2 for v in s.values() if not isinstance(v, bool))]
    if odd:
        shapes.append(odd[0])
    return shapes


def stage_stability(ctx: CheckContext) -> str:
    shapes = _stability_shapes(ctx)
    modes = list(ctx.spec.stability_modes)
    for n, shape in enumerate(shapes):
        # Under the interpreter the half types are emulated and slow: the second (odd) shape runs in
        # the first dtype only there; every dtype still meets every regime on the first shape.
        dtypes = _dtypes(ctx)[:1] if ctx.interpreter and n > 0 else _dtypes(ctx)
        for dtype in dtypes:
            for mode in modes:
                trial(ctx, shape, dtype, mode)
    extra = f" (the odd shape in {_dtype_name(_dtypes(ctx)[0])} only on the CPU interpreter)" if ctx.interpreter and len(shapes) > 1 else ""
    return f"{', '.join(modes)} inputs on {len(shapes)} shapes x {_dtypes_text(ctx)}{extra}"


def _output_tensors(ctx: CheckContext, out: Any) -> list[torch.Tensor]:
    """The tensors a call returned, in order (one, or a whole problem's several); TrialFailure for anything else."""
    for k, o in enumerate(as_list(out)):
        if not isinstance(o, torch.Tensor):
            which = f" as output {k}" if several(out) else ""
            raise TrialFailure(f"{ctx.spec.entry} returned {type(o).__name__}{which}, not a tensor")
    return as_list(out)


def stage_determinism(ctx: CheckContext) -> str:
    shapes, _ = _sweep_shapes(ctx)
    shape = max(shapes, key=ctx.spec.elements) if shapes else ctx.spec.smoke_shape
    loose = 0.0  # the largest run-to-run difference allowed because the problem's own forward has as much
    jitter: dict = {}  # (dtype, output) -> whether the problem's own forward repeats itself
    for dtype in _dtypes(ctx):
        plan = plan_trial(ctx, shape, dtype)  # the runs' inputs and outputs must fit, as a trial's do
        args = make_args(ctx, shape, dtype, "normal")
        first = _snapshot(tuple(_output_tensors(ctx, call_watched(ctx, args))), plan.snapshot_on_device)
        for i in (1, 2):  # each later run is compared with the first as it comes, and let go
            out = _output_tensors(ctx, call_watched(ctx, args))
            if len(out) != len(first):
                raise TrialFailure(f"{_fmt_shape(shape)}, {_dtype_name(dtype)}: run {i + 1} returned {len(out)} "
                                   f"outputs, run 1 {len(first)}, on the same input")
            for k, (b, a) in enumerate(zip(out, first)):
                b = b.detach().to(a.device)
                same = a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8) if a.numel() else a,
                                                          b.reshape(-1).view(torch.uint8) if b.numel() else b)
                if not same:
                    diff = (a.double() - b.double()).abs() if a.shape == b.shape else torch.tensor(math.inf)
                    worst = float(diff.nan_to_num(nan=math.inf).max())
                    if a.shape == b.shape and _within_reference_jitter(ctx, args, a, b, k, jitter):
                        loose = max(loose, worst)
                        continue
                    which = f", output {k}" if len(first) > 1 else ""
                    raise TrialFailure(f"{_fmt_shape(shape)}, {_dtype_name(dtype)}{which}: run {i + 1} differs from run 1 "
                                       f"(max difference {worst:.3g}) on the same input")
    if loose:
        return (f"3 runs at {_fmt_shape(shape)} x {_dtypes_text(ctx)} agree within KernelBench's tolerance (up to "
                f"{loose:.3g} apart), as the problem's own forward, whose runs differ too")
    return f"3 runs bitwise identical at {_fmt_shape(shape)} x {_dtypes_text(ctx)}"


def _within_reference_jitter(ctx: CheckContext, args: tuple, a: torch.Tensor, b: torch.Tensor, k: int,
                             jitter: dict) -> bool:
    """For a whole problem whose own forward is not bitwise repeatable (a library kernel with atomics: cuDNN's
    transposed 3-d conv), whether two of the candidate's runs agree within KernelBench's tolerance. A
    candidate of a problem whose forward repeats exactly must repeat exactly too."""
    if ctx.spec.native_tolerance is None:
        return False
    if (a.dtype, k) not in jitter:  # asked once per output and dtype: two runs of the forward, one at a time
        first = as_list(ctx.spec.reference(*args))[k].detach().clone()
        jitter[(a.dtype, k)] = not torch.equal(first, as_list(ctx.spec.reference(*args))[k])
        del first
    if not jitter[(a.dtype, k)]:
        return False
    tol = ctx.spec.native_tolerance(a.dtype)
    return bool(torch.allclose(b.to(a.device).double(), a.double(), atol=tol, rtol=tol, equal_nan=True))


def stage_edge_cases(ctx: CheckContext) -> str:
    shapes, unrun = _edge_shapes(ctx)
    if not ctx.spec.edge_shapes and not ctx.spec.noncontiguous_views:
        return f"skipped: {ctx.spec.name} has no edge shapes or non-contiguous views (its inputs are fixed)"
    for shape in shapes:
        for dtype in _dtypes(ctx):
            trial(ctx, shape, dtype)
    views = view_shapes(ctx, shapes)
    for shape in views:
        for dtype in _dtypes(ctx):
            trial(ctx, shape, dtype, noncontig=True)
    note = coverage.describe(unrun)
    return f"{len(shapes)} edge shapes and {len(views)} non-contiguous views x {_dtypes_text(ctx)}" + (
        f"; {note}" if note else "")


STAGE_FUNCS: dict[str, Callable[[CheckContext], str]] = {
    "smoke": stage_smoke,
    "shape_sweep": stage_shape_sweep,
    "stability": stage_stability,
    "determinism": stage_determinism,
    "edge_cases": stage_edge_cases,
}
assert tuple(STAGE_FUNCS) == STAGES


def run_stages(ctx: CheckContext, on_start: Callable[[str], None] = lambda s: None,
               on_end: Callable[[StageOutcome], None] = lambda o: None) -> Iterator[StageOutcome]:
    """Run the stages in order; after the first failure the rest are skipped."""
    failed = False
    for name in STAGES:
        if failed:
            outcome = StageOutcome(name, SKIPPED, "an earlier stage failed")
        else:
            on_start(name)
            outcome = _stage(name, lambda: _noted(ctx, STAGE_FUNCS[name]), ctx.spec.entry)
            failed = outcome.status != PASS
            _release_between_stages(ctx.device)
        on_end(outcome)
        yield outcome


def _noted(ctx: CheckContext, stage: Callable[[CheckContext], str]) -> str:
    """The stage's detail, or its failure, and how its trials were judged when memory decided that."""
    ctx.own_dtype_refs = set()
    try:
        return stage(ctx) + memory_note(ctx)
    except TrialFailure as e:
        raise TrialFailure(f"{e}{memory_note(ctx)}") from None


RELEASE_ABOVE = 1 << 30  # unused bytes in the caching allocator worth handing back between stages


def _release_between_stages(device: str) -> None:
    """Hand the caching allocator's unused blocks back when there are many (a large problem's trials leave
    gigabytes cached in block sizes the next stage may not reuse)."""
    if device == "cuda" and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > RELEASE_ABOVE:
        torch.cuda.empty_cache()
