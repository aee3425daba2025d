"""The patch under torch.compile: every kernel type's route becomes a custom operator that Dynamo traces
with no graph break, the first-call check still guards a compiled model, and the operators' namespace
is the patch file's own (issue 18). Kernels here are PyTorch functions, so no Triton interpreter is needed;
the backend records the graphs instead of running Inductor (slow on the CPU; tests/test_integrate.py
compiles with Inductor)."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel.engine import kernel_patch

KERNELS = {
    "rmsnorm": lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
    "layernorm": lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    "fused_mlp": lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.T,
    "rotary_embedding": lambda x, cos, sin: x * cos + torch.cat((-x[..., 4:], x[..., :4]), -1) * sin,
    "softmax": lambda x: torch.softmax(x, -1),
    "flash_attention": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "cross_entropy": lambda x, t: F.cross_entropy(x.float(), t),
    "matmul": lambda a, b: a @ b,
    "reduce": lambda x: x.sum(-1),
}
OPS = ("rmsnorm", "layernorm", "fused_mlp", "rotary_embedding", "softmax", "flash_attention", "cross_entropy",
       "matmul", "linear", "reduce")


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.rand(d) + 0.5), 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, max_seq):
        super().__init__()
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), torch.rand(head_dim // 2))
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())

    def forward(self, x):
        half = x.shape[-1] // 2
        seq = x.shape[-2]
        return x * self.cos[:seq] + torch.cat((-x[..., half:], x[..., :half]), -1) * self.sin[:seq]


class MLP(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w_gate, self.w_up, self.w_down = (nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False),
                                               nn.Linear(h, d, bias=False))

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Tiny(nn.Module):
    """One site of every kernel type: norms, rotary, attention, MLP, a softmax, a matmul, a sum, the loss."""

    def __init__(self, d=16, heads=2, vocab=12):
        super().__init__()
        self.heads = heads
        self.norm = RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.rotary = RotaryEmbedding(d // heads, 8)
        self.mlp = MLP(d, 24)
        self.ln = nn.LayerNorm(d)
        self.mix = nn.Parameter(torch.randn(d, d) / 4)
        self.head = nn.Linear(d, vocab)

    def forward(self, x, targets):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(self.rotary(q), self.rotary(k), v, is_causal=True)
        h = x + o.transpose(1, 2).reshape(b, s, d)
        h = self.ln(h + self.mlp(h)) @ self.mix
        h = h * torch.softmax(h, dim=-1).sum(-1, keepdim=True)
        logits = self.head(h)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1)), logits


def _inputs():
    torch.manual_seed(0)
    return torch.randn(2, 6, 16), torch.randint(0, 12, (2, 6))


def _recording(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    return backend


def _ops_in(graphs):
    code = "".join(g.code for g in graphs)
    ns = kernel_patch.namespace()
    return {op for op in OPS if f"torch.ops.{ns}.{op}.default" in code}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_every_kernel_types_route_is_one_custom_operator_in_one_graph():
    model = Tiny().eval()
    x, t = _inputs()
    with torch.no_grad():
        ref = model(x, t)
        patched = copy.deepcopy(model)
        stats = kernel_patch.patch(patched, KERNELS)
        explained = torch._dynamo.explain(patched)(x, t)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        assert _ops_in(explained.graphs) == set(OPS)
        graphs = []
        compiled = torch.compile(patched, fullgraph=True, backend=_recording(graphs))
        out = compiled(x, t)
    assert _ops_in(graphs) == set(OPS)
    for o, r in zip(out, ref):
        assert torch.allclose(o, r, atol=1e-5), (o - r).abs().max()
    counts = {r["kind"]: (r["calls"], r["mismatches"]) for r in stats.as_list(list(KERNELS))}
    assert all(calls >= 2 and not bad for calls, bad in counts.values()), counts  # explain's run, then compiled


def test_a_wrong_kernel_is_refused_inside_the_compiled_model_at_its_first_call():
    """Compiled before any eager call: the operator's own implementation runs the first-call check."""
    model = Tiny().eval()
    x, t = _inputs()
    with torch.no_grad():
        ref = model(x, t)
        patched = copy.deepcopy(model)
        stats = kernel_patch.patch(patched, {"softmax": lambda x: torch.softmax(x, -1) * 1.01,
                                             "rmsnorm": KERNELS["rmsnorm"]})
        compiled = torch.compile(patched, fullgraph=True, backend=_recording([]))
        first, again = compiled(x, t), compiled(x, t)
    for out in (first, again):
        assert all(torch.equal(o, r) for o, r in zip(out, ref))
    assert stats.calls["softmax"] == 0 and stats.fallbacks["softmax"] == 2 and stats.mismatches["softmax"]
    assert stats.calls["rmsnorm"] == 2 and not stats.mismatches["rmsnorm"]


def test_patch_after_torch_compile_and_a_call_that_needs_a_gradient():
    """patch() given the compiled model patches the module it wraps; Dynamo compiles again with the
    operators. With gradients on, every route falls back (a kernel has no backward) and the compiled
    model still trains."""
    model = Tiny().eval()
    x, t = _inputs()
    graphs = []
    compiled = torch.compile(model, fullgraph=True, backend=_recording(graphs))
    with torch.no_grad():
        ref = compiled(x, t)
        assert not _ops_in(graphs)
        stats = kernel_patch.patch(compiled, KERNELS)
        out = compiled(x, t)
    assert _ops_in(graphs[1:]) == set(OPS) and torch.allclose(out[0], ref[0], atol=1e-5)
    calls = dict(stats.calls)
    loss, _ = compiled(x, t)
    loss.backward()
    assert model.norm.weight.grad is not None and model.head.weight.grad.abs().sum() > 0
    assert dict(stats.calls) == calls


def _load_copy(name):
    spec = importlib.util.spec_from_file_location(name, kernel_patch.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_copy_of_the_patch_file_has_its_own_namespace_and_patching_twice_is_fine():
    """An exported package's _patch.py names its operators after the package; a second copy under the
    same name (the package loaded twice) takes the next free namespace instead of failing."""
    a, a_again, b = _load_copy("pkg_a._patch"), _load_copy("pkg_a._patch"), _load_copy("pkg_b._patch")
    assert (a.namespace(), a_again.namespace(), b.namespace()) == ("autokernel_pkg_a", "autokernel_pkg_a_2",
                                                                   "autokernel_pkg_b")
    x, t = _inputs()
    models = [Tiny().eval() for _ in range(3)]
    with torch.no_grad():
        for module, model in zip((a, a, b), models):  # `a` patches two models: its operators are reused
            module.patch(model, {"softmax": KERNELS["softmax"], "matmul": lambda p, q: p @ q})
            graphs = []
            torch.compile(model, fullgraph=True, backend=_recording(graphs))(x, t)
            code = "".join(g.code for g in graphs)
            assert f"torch.ops.{module.namespace()}.softmax.default" in code
            assert model._kernel_patch_stats.calls["softmax"] == 1
