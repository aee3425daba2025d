"""Put a subgraph target's kernel back into a model: an FX rewrite of the nodes it stands for.

Standalone like kernel_patch.py (imports only torch), because `autokernel export` ships it beside
`_patch.py`. A subgraph kernel is a `kernel_fn` with a `subgraph` attribute (written into every problem
engine/subgraph.py extracts): which ATen nodes of the model it replaces, by operator and shape. At the
patched model's first call with given input shapes the forward is captured with torch.export, every
place whose nodes match (the same operators at the same shapes, grown the same way) calls the kernel
instead, and that rewritten graph runs from then on. Each place is a kernel_patch site, so its first
call at each shape is checked against the nodes it replaced and a kernel that disagrees is not used
there. Anything that cannot be captured or matched, a call that needs a gradient, and a torch.compile
trace run the model's own forward.
"""

from __future__ import annotations

import operator

import torch
from torch import fx


# -- what a node is (engine/subgraph.py grows its chains with these same rules) ----------------------
def is_view(n):
    if n.op == "call_function" and n.target is operator.getitem:
        return True
    schema = getattr(n.target, "_schema", None)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None
                and not schema.returns[0].alias_info.is_write)


def is_pointwise(n):
    return torch.Tag.pointwise in getattr(n.target, "tags", ())


def target_name(n):
    """A node's operator as text ("aten.cumsum.default"), the same in every capture of the model."""
    return str(n.target) if isinstance(n.target, torch._ops.OpOverload) else getattr(n.target, "__name__", str(n.target))


def chain(anchor):
    """The anchor with its elementwise prologue (producers only it uses) and epilogue (a single-user run
    of elementwise consumers), views between them included, in graph order."""
    members = {anchor}
    grew = True
    while grew:  # prologue
        grew = False
        for m in list(members):
            for p in m.all_input_nodes:
                if p in members or p.op != "call_function" or not (is_pointwise(p) or is_view(p)):
                    continue
                if all(u in members for u in p.users):
                    members.add(p)
                    grew = True
    tail, run = anchor, []
    while len(tail.users) == 1:  # epilogue
        (user,) = tail.users
        if user.op != "call_function" or not (is_pointwise(user) or is_view(user)):
            break
        run.append(user)
        tail = user
    while run and is_view(run[-1]):
        run.pop()  # a chain ends on what it computes
    members.update(run)
    return [n for n in anchor.graph.nodes if n in members]


def outputs(nodes):
    """The members whose values are used outside them (the subgraph's outputs), in graph order."""
    members = set(nodes)
    outs = [n for n in nodes if any(u not in members for u in n.users)]
    return outs or nodes[-1:]


def boundary(nodes, is_state):
    """(inputs, state) of a subgraph: the nodes outside it that its members read, in the order a problem's
    forward takes them; `is_state(node)` says which are parameters, buffers or constants."""
    members, seen = set(nodes), set()
    inputs, state = [], []
    for n in nodes:
        for a in n.all_input_nodes:
            if a in members or a in seen:
                continue
            seen.add(a)
            (state if is_state(a) else inputs).append(a)
    return inputs, state


def _shape(n):
    value = n.meta.get("val")
    return list(value.shape) if isinstance(value, torch.Tensor) else None


def record(nodes, anchor, is_state, grown):
    """What a kernel for these nodes must match in another capture of the model (kept in the problem)."""
    inputs, state = boundary(nodes, is_state)
    return {"targets": [target_name(n) for n in nodes], "shapes": [_shape(n) for n in nodes],
            "anchor": nodes.index(anchor), "chain": bool(grown), "inputs": len(inputs), "state": len(state),
            "outputs": len(outputs(nodes))}


# -- finding and rewriting -----------------------------------------------------------------------------
def _is_attr(n):
    return n.op == "get_attr"


def matches(graph, rec, taken=()):
    """Each place in `graph` (an unlifted exported graph) whose nodes match `rec`, as a node list."""
    found, claimed = [], set(taken)
    anchor_target, anchor_shape = rec["targets"][rec["anchor"]], rec["shapes"][rec["anchor"]]
    for n in list(graph.nodes):
        if n.op != "call_function" or n in claimed or target_name(n) != anchor_target or _shape(n) != anchor_shape:
            continue
        nodes = chain(n) if rec["chain"] else [n]
        if [target_name(m) for m in nodes] != rec["targets"] or [_shape(m) for m in nodes] != rec["shapes"] \
                or nodes.index(n) != rec["anchor"] or claimed.intersection(nodes):
            continue
        inputs, state = boundary(nodes, _is_attr)
        if (len(inputs), len(state), len(outputs(nodes))) != (rec["inputs"], rec["state"], 1):
            continue
        found.append(nodes)
        claimed.update(nodes)
    return found


def reference_module(nodes, is_state):
    """The nodes alone as a GraphModule taking the subgraph's inputs, then its state (what the kernel replaces)."""
    inputs, state = boundary(nodes, is_state)
    graph = fx.Graph()
    env = {a: graph.placeholder(f"in_{i}") for i, a in enumerate(inputs + state)}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[outputs(nodes)[0]])
    return fx.GraphModule(torch.nn.Module(), graph)


class _Call:
    """The function a rewritten graph calls in place of the nodes: the kernel where its site agrees."""

    def __init__(self, site):
        self.site = site
        self.__name__ = f"autokernel_{site.entry.kind}"

    def __call__(self, *args):
        site, key = self.site, tuple((tuple(a.shape), a.dtype, a.stride()) for a in args)
        wide = [a.float() if a.dtype in (torch.float16, torch.bfloat16) else a for a in args]
        return site.call(key, lambda: site.entry.fn(*args), lambda: site.reference(*args),
                         lambda: site.reference(*wide))


def rewrite(gm, entries, make_site):
    """Replace every match of each entry's nodes in `gm` by a call to its kernel; {kind: places replaced}."""
    graph, counts, taken = gm.graph, {}, set()
    for entry in entries:
        counts[entry.kind] = 0
        for i, nodes in enumerate(matches(graph, entry.fn.subgraph, taken)):
            out, last = outputs(nodes)[0], nodes[-1]
            order = {n: k for k, n in enumerate(graph.nodes)}
            if any(order[u] < order[last] for u in out.users if u not in nodes):
                continue  # a reader between the members: the call could not sit before it
            inputs, state = boundary(nodes, _is_attr)
            site = make_site(entry, f"{entry.kind}#{i}", reference_module(nodes, _is_attr))
            with graph.inserting_after(last):
                call = graph.call_function(_Call(site), tuple(inputs + state))
            call.meta.update(out.meta)
            out.replace_all_uses_with(call, delete_user_cb=lambda u: u not in nodes)
            for n in reversed(nodes):
                if not n.users:
                    graph.erase_node(n)
            taken.update(nodes)
            counts[entry.kind] += 1
    if any(counts.values()):
        graph.lint()
        gm.recompile()
    return counts


class _Forward(torch.nn.Module):
    """The model's forward as it was before this patch, as a module torch.export can capture."""

    def __init__(self, model, forward):
        super().__init__()
        self.model = model
        self._forward = forward

    def forward(self, *args):
        return self._forward(*args)


def patch_subgraphs(model, table, stats, verify, site_class):
    """Route `model`'s forward through rewritten graphs for the subgraph kernels in `table` ({kind:
    KernelEntry}); `site_class(entry, stats, name, verify, op, reference)` is kernel_patch's site."""
    entries = [e for e in table.values() if getattr(e.fn, "subgraph", None)]
    if not entries:
        return
    inner = model.forward
    graphs = {}

    def make_site(entry, name, reference):
        return site_class(entry, stats, name, verify, entry.kind, reference)

    def build(args):
        with torch.no_grad():
            gm = torch.export.export(_Forward(model, inner), tuple(args)).module()
        counts = rewrite(gm, entries, make_site)
        for kind, n in counts.items():
            if not n:
                stats.mismatches[kind].append("no place in the captured forward matches the kernel's nodes")
        return gm if any(counts.values()) else None

    def forward(*args, **kw):
        if kw or torch.compiler.is_compiling() or not all(isinstance(a, torch.Tensor) for a in args) \
                or (torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters())):
            return inner(*args, **kw)
        key = tuple((tuple(a.shape), a.dtype, a.device) for a in args)
        if key not in graphs:
            try:
                graphs[key] = build(args)
            except Exception as e:  # the model cannot be captured at these inputs: its own forward runs
                graphs[key] = None
                for entry in entries:
                    stats.mismatches[entry.kind].append(f"the forward could not be captured: {type(e).__name__}: {e}")
        gm = graphs[key]
        return inner(*args) if gm is None else gm(*args)

    model.forward = forward
