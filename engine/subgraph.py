"""Any operation of a model as a problem: capture the forward as an ATen graph, pick a node or a chain of
neighbouring nodes, and write it out as a standalone KernelBench problem.

The loop can only target what it has a problem for. Rather than recognising operations by name, the
forward is captured with `torch.export` (or, where export refuses the model, `make_fx`, which specialises
Python control flow to the inputs given), every node's value is recorded by running the captured graph,
and a subgraph is copied node for node into a new FX graph whose generated code becomes `Model.forward`.
What counts as a chain is read from the operators themselves: `torch.Tag.pointwise` (an elementwise
prologue or epilogue joins its anchor) and the schema's alias annotations (views ride along).

The problem file is KernelBench's form (`Model`, `get_inputs()`, `get_init_inputs()`): its inputs have the
shapes, dtypes and strides the model gave the subgraph; floating inputs are fresh random draws with the
captured values' mean and spread (the harness needs fresh draws); parameters, buffers and non-floating
inputs (masks, indices, targets) keep the model's values, saved beside the file (`<stem>.pt`), because a
random mask or target would be another problem.
"""

from __future__ import annotations

import pprint
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import fx

from . import subgraph_patch


class SubgraphError(ValueError):
    """A subgraph that cannot be captured or written (one line: why)."""


@dataclass
class Capture:
    """A model's forward as an ATen graph, with every node's value from one run."""

    graph: fx.Graph
    values: dict[str, Any]  # node name -> its value (placeholders included)
    state: dict[str, tuple[str, str]]  # placeholder name -> ("parameter"|"buffer"|"constant", dotted name)
    how: str  # "torch.export" | "make_fx"

    def node(self, name: str) -> fx.Node:
        for n in self.graph.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


@dataclass
class Candidate:
    """A node, or a chain of neighbouring nodes a fused kernel could replace."""

    name: str  # the node names joined by "+", in graph order
    nodes: list[str]
    ops: list[str]  # "aten::conv2d", ... (views left out)
    anchor: str  # the node the chain grew from
    anchor_op: str
    anchor_shapes: str  # the anchor's tensor inputs, as a profile row writes them ("8x16, 32x16, 32")
    output_shapes: list[str]
    dtypes: list[str]
    modules: list[str] = field(default_factory=list)  # module paths of its nodes (torch.export only)


# ---------------------------------------------------------------- capture

def capture(model: torch.nn.Module, inputs: list) -> Capture:
    """The forward as an ATen graph: torch.export first, make_fx where export refuses the model."""
    with torch.no_grad():
        try:
            return _capture_export(model, inputs)
        except Exception as export_error:  # noqa: BLE001 (any refusal of export: try the tracer)
            try:
                return _capture_make_fx(model, inputs)
            except Exception as e:  # noqa: BLE001
                raise SubgraphError(f"cannot capture the forward: torch.export said "
                                    f"{_first_line(export_error)}; make_fx said {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def _capture_export(model: torch.nn.Module, inputs: list) -> Capture:
    from torch.export.graph_signature import InputKind

    ep = torch.export.export(model, tuple(inputs))
    kinds = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer", InputKind.CONSTANT_TENSOR: "constant"}
    flat = iter(torch.utils._pytree.tree_leaves(tuple(inputs)))
    args, state = [], {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(flat))
        elif spec.kind in kinds:
            args.append(ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target])
            state[spec.arg.name] = (kinds[spec.kind], spec.target)
        else:
            raise SubgraphError(f"an input of kind {spec.kind.name} is not supported")
    return Capture(ep.graph_module.graph, _run(ep.graph_module, args), state, "torch.export")


def _capture_make_fx(model: torch.nn.Module, inputs: list) -> Capture:
    from torch.fx.experimental.proxy_tensor import make_fx

    named = [("parameter", n, p) for n, p in model.named_parameters()] + \
            [("buffer", n, b) for n, b in model.named_buffers()]

    def forward(*flat: Any) -> Any:
        state = {n: v for (_, n, _), v in zip(named, flat)}
        return torch.func.functional_call(model, state, tuple(flat[len(named):]))

    args = [v for _, _, v in named] + list(inputs)
    # Real tensors, and a branch on a tensor's value follows the value these inputs have (one forward's graph).
    gm = make_fx(forward, pre_dispatch=True, record_module_stack=True, _error_on_data_dependent_ops=False)(*args)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    state = {p.name: (kind, name) for p, (kind, name, _) in zip(placeholders, named)}
    return Capture(gm.graph, _run(gm, args), state, "make_fx")


def _run(gm: fx.GraphModule, args: list) -> dict[str, Any]:
    """Every node's value, from one run of the captured graph (the model's own intermediates)."""
    values: dict[str, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            values[n.name] = out
            return out

    with torch.no_grad():
        Recorder(gm).run(*args)
    return values


# ---------------------------------------------------------------- what a node is

_is_view = subgraph_patch.is_view
_is_pointwise = subgraph_patch.is_pointwise
_outputs = subgraph_patch.outputs


def _is_compute(n: fx.Node, values: dict[str, Any]) -> bool:
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and not _is_view(n)
            and isinstance(values.get(n.name), torch.Tensor))


def _op_name(n: fx.Node) -> str:
    return f"aten::{n.target.overloadpacket.__name__}" if isinstance(n.target, torch._ops.OpOverload) \
        else str(n.target)


def _shape_text(shape: Any) -> str:
    from .profiling import shape_text

    return shape_text(shape)


def _tensor_inputs(n: fx.Node, values: dict[str, Any]) -> list[torch.Tensor]:
    return [values[a.name] for a in n.all_input_nodes if isinstance(values.get(a.name), torch.Tensor)]


# ---------------------------------------------------------------- candidates

def _describe(cap: Capture, nodes: list[fx.Node], anchor: fx.Node) -> Candidate:
    outs = _outputs(nodes)
    modules = []
    for n in nodes:
        stack = n.meta.get("nn_module_stack") or {}
        if stack:
            path = list(stack.values())[-1][0]
            if path and path not in modules:
                modules.append(path)
    return Candidate(
        name="+".join(n.name for n in nodes), nodes=[n.name for n in nodes],
        ops=[_op_name(n) for n in nodes if not _is_view(n)], anchor=anchor.name, anchor_op=_op_name(anchor),
        anchor_shapes=", ".join(_shape_text(t.shape) for t in _tensor_inputs(anchor, cap.values)),
        output_shapes=[_shape_text(cap.values[o.name].shape) for o in outs],
        dtypes=sorted({str(cap.values[o.name].dtype).removeprefix("torch.") for o in outs}), modules=modules)


def candidates(cap: Capture) -> list[Candidate]:
    """Every compute node alone, then every chain grown from a node (no two with the same nodes)."""
    compute = [n for n in cap.graph.nodes if _is_compute(n, cap.values)]
    seen: set[frozenset] = set()
    out: list[Candidate] = []
    for n in compute:
        seen.add(frozenset([n]))
        out.append(_describe(cap, [n], n))
    covered: set[fx.Node] = set()
    for n in sorted(compute, key=_is_pointwise):  # non-elementwise anchors first (a stable sort)
        if _is_pointwise(n) and n in covered:
            continue  # already inside a chain of a non-elementwise anchor
        chain = subgraph_patch.chain(n)
        if not _is_pointwise(n):
            covered.update(chain)
        key = frozenset(chain)
        if key not in seen and len(chain) > 1:
            seen.add(key)
            out.append(_describe(cap, chain, n))
    return out


def match_row(cands: list[Candidate], row: Any) -> list[Candidate]:
    """The candidates a profile row stands for, largest first: rows found by operator match the anchor's
    operator at the row's shapes; rows found by module match the module paths."""
    if getattr(row, "modules", None):
        hits = [c for c in cands if any(m in row.modules for m in c.modules)]
    else:
        hits = [c for c in cands if c.anchor_op == row.name and (not row.shapes or c.anchor_shapes in row.shapes)]
    rank = {s: i for i, s in enumerate(getattr(row, "shapes", None) or [])}  # the costliest call's shapes first
    return sorted(hits, key=lambda c: (rank.get(c.anchor_shapes, 0), -len(c.nodes)))


def find(cands: list[Candidate], name: str) -> Candidate:
    for c in cands:
        if c.name == name:
            return c
    raise KeyError(name)


# ---------------------------------------------------------------- extraction

def _attr(name: str) -> str:
    return name.replace(".", "_")


@dataclass
class Extracted:
    path: Path
    saved: Path | None  # the sidecar of parameters, buffers and non-floating inputs (None if nothing to save)
    inputs: list[torch.Tensor]  # the values the model gave the subgraph's inputs, in get_inputs() order
    expected: list[torch.Tensor]  # the values the subgraph computed in the model
    source: str


def subgraph_module(cap: Capture, cand: Candidate) -> tuple[fx.GraphModule, list[fx.Node], list[tuple[str, str]]]:
    """(the subgraph as a GraphModule, its input nodes in the capture, its state as (attribute, kind))."""
    nodes = [cap.node(n) for n in cand.nodes]
    members = set(nodes)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    inputs: list[fx.Node] = []
    state: list[tuple[str, str]] = []
    root = torch.nn.Module()
    for n in nodes:
        for a in n.all_input_nodes:
            if a in members or a in env:
                continue
            value = cap.values.get(a.name)
            if not isinstance(value, torch.Tensor):
                raise SubgraphError(f"{cand.name}: input {a.name} is a {type(value).__name__}, not a tensor")
            if a.name in cap.state:
                kind, target = cap.state[a.name]
                attr = _attr(target)
                while hasattr(root, attr):  # `conv.weight` and `conv_weight` both in one model
                    attr += "_"
                if kind == "parameter":
                    root.register_parameter(attr, torch.nn.Parameter(value.detach(), requires_grad=False))
                else:
                    root.register_buffer(attr, value)
                state.append((attr, kind))
                env[a] = graph.get_attr(attr)
            else:
                env[a] = graph.placeholder(a.name)
                inputs.append(a)
    for n in nodes:
        env[n] = graph.node_copy(n, lambda x: env[x])
    outs = _outputs(nodes)
    graph.output(env[outs[0]] if len(outs) == 1 else tuple(env[o] for o in outs))
    # Placeholders first, as a forward's parameters must be (get_attr and placeholders were interleaved).
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    first_other = next(n for n in graph.nodes if n.op != "placeholder")
    for p in placeholders:
        first_other.prepend(p)
    graph.lint()
    return fx.GraphModule(root, graph), inputs, state


def _globals_code(src: str, globals_: dict[str, Any]) -> list[str]:
    """Import lines for the names FX's generated code uses (its globals hold more than it uses)."""
    import ast

    used = {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
    lines = []
    for name, value in sorted(globals_.items()):
        if name not in used or value is torch or name == "torch":
            continue
        if name in ("inf", "nan") and isinstance(value, float):
            lines.append(f"from math import {name}")
        elif value is torch.device:
            lines.append(f"from torch import device as {name}" if name != "device" else "from torch import device")
        elif isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            lines.append(f"{name} = {value}")
        else:
            raise SubgraphError(f"the generated forward uses {name} ({type(value).__name__}); cannot write it")
    return lines


def _stats(t: torch.Tensor) -> tuple[float, float]:
    finite = t.detach().double().flatten()
    finite = finite[torch.isfinite(finite)]
    if finite.numel() == 0:
        return 0.0, 1.0
    mean = float(finite.mean())
    std = float(finite.std(unbiased=False)) if finite.numel() > 1 else 0.0
    return round(mean, 6), round(std, 6)


_FILE = '''"""{title}

Extracted by `autokernel extract` from {model} ({how}): nodes {nodes}.
Inputs have the shapes, dtypes and strides these nodes saw in the model; floating inputs are fresh random
draws with the captured values' mean and spread; parameters, buffers and non-floating inputs are the
model's own values{saved_note}.
"""

from pathlib import Path

import torch
{imports}
{loader}

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
{init}

{forward}

# name: (size, stride, storage offset, dtype, mean, std) of each input, as the model gave it
INPUTS = {{
{inputs_table}
}}


def _draw(size, stride, offset, dtype, mean, std):
    """A fresh random tensor laid out as the model's was (a transposed view stays transposed)."""
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    base = torch.randn(extent) * std + mean
    return base.to(dtype).as_strided(size, stride, offset)


def _fixed(name):
    """A saved input, copied into a tensor of its own with the same layout (callers may refill it)."""
    value = _SAVED[name]
    size, stride, offset, dtype = INPUTS[name.removeprefix("input.")][:4]
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    out = torch.empty(extent, dtype=dtype).as_strided(size, stride, offset)
    return out.copy_(value)


def get_inputs():
    return [{get_inputs}]


def get_init_inputs():
    return []


# The nodes this problem was cut from, as another capture of the model shows them (operators, shapes, how
# the chain grew): how a kernel written for this problem is put back into the model (subgraph_patch.py).
SUBGRAPH = {subgraph}
_BUILT = {{}}


def kernel_fn(*args):
    """The ModelNew written for this problem on the subgraph's inputs, then the model's own parameters and
    buffers in SUBGRAPH["attrs"] order (the swapped-in kernel reads the live model, not the saved copy)."""
    n = len(args) - len(SUBGRAPH["attrs"])
    model = _BUILT.get("model")
    if model is None:
        model = _BUILT["model"] = globals()["ModelNew"]().eval()
    for attr, value in zip(SUBGRAPH["attrs"], args[n:]):
        model._parameters.pop(attr, None)
        model._buffers.pop(attr, None)
        model.__dict__[attr] = value
    with torch.no_grad():
        return model(*args[:n])


kernel_fn.subgraph = SUBGRAPH
'''


def write_problem(cap: Capture, cand: Candidate, path: str | Path, model_name: str = "a model") -> Extracted:
    """Write `cand` as a KernelBench problem at `path` (and its saved values beside it)."""
    path = Path(path)
    gm, inputs, state = subgraph_module(cap, cand)
    code = gm.graph.python_code(root_module="self")
    imports = _globals_code(code.src, code.globals)
    saved: dict[str, torch.Tensor] = {}
    init = []
    for attr, kind in state:
        value = getattr(gm, attr).detach()
        saved[f"state.{attr}"] = value.clone()
        if kind == "parameter" and value.is_floating_point():
            init.append(f"self.{attr} = torch.nn.Parameter(_SAVED[{f'state.{attr}'!r}].clone())")
        else:
            init.append(f"self.register_buffer({attr!r}, _SAVED[{f'state.{attr}'!r}].clone())")
    rows, draws, values = [], [], []
    for a in inputs:
        t = cap.values[a.name]
        mean, std = _stats(t) if t.is_floating_point() else (0.0, 0.0)
        rows.append(f"    {a.name!r}: ({tuple(t.shape)}, {tuple(t.stride())}, {t.storage_offset()}, {t.dtype}, "
                    f"{mean!r}, {std!r}),")
        if t.is_floating_point():
            draws.append(f"_draw(*INPUTS[{a.name!r}])")
        else:
            saved[f"input.{a.name}"] = t.clone()
            draws.append(f"_fixed({f'input.{a.name}'!r})")
        values.append(t)
    nodes = [cap.node(n) for n in cand.nodes]
    record = subgraph_patch.record(nodes, cap.node(cand.anchor), lambda a: a.name in cap.state, len(nodes) > 1)
    record["attrs"] = [attr for attr, _ in state]
    sidecar = path.with_suffix(".pt") if saved else None
    forward = "\n".join("    " + line if line.strip() else "" for line in code.src.strip("\n").splitlines())
    source = _FILE.format(
        title=f"{' + '.join(cand.ops)} at {cand.anchor_shapes or 'its shapes'}: one piece of {model_name} "
              f"as a problem.",
        model=model_name, how=cap.how, nodes=cand.name,
        saved_note=f", saved beside this file in {sidecar.name}" if sidecar else "",
        imports="\n".join(imports),
        loader=f"_SAVED = torch.load(Path(__file__).with_name({sidecar.name!r}), weights_only=True)\n"
        if sidecar else "_SAVED = {}\n",
        init="\n".join("        " + line for line in init) or "        pass",
        forward=forward, inputs_table="\n".join(rows), get_inputs=", ".join(draws),
        subgraph=pprint.pformat(record, width=100, compact=True, sort_dicts=False))
    compile(source, str(path), "exec")
    path.parent.mkdir(parents=True, exist_ok=True)
    if sidecar:
        torch.save(saved, sidecar)
    path.write_text(source)
    expected = [cap.values[o.name] for o in _outputs([cap.node(n) for n in cand.nodes])]
    return Extracted(path, sidecar, values, expected, source)
