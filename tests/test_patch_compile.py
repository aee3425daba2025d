"""The patch under torch.compile: every kernel type's route becomes a custom operator that Dynamo traces
with no graph break, the first-call check still guards a compiled model, and the operators' namespace
is the patch file's own (issue 18). The Triton starters run in a subprocess under the interpreter; the
other tests' kernels are PyTorch functions. The backend records the graphs instead of running Inductor
(slow on the CPU; tests/test_integrate.py compiles with Inductor)."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel.engine import kernel_patch
from autokernel.engine.examples.llama import FeedForward, RMSNorm, RotaryEmbedding, rotate_half

KERNELS = {
    "rmsnorm": lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
    "layernorm": lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    "fused_mlp": lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.T,
    "rotary_embedding": lambda x, cos, sin: x * cos + rotate_half(x) * sin,
    "softmax": lambda x: torch.softmax(x, -1),
    "flash_attention": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "cross_entropy": lambda x, t: F.cross_entropy(x.float(), t),
    "matmul": lambda a, b: a @ b,
    "reduce": lambda x: x.sum(-1),
}
OPS = ("rmsnorm", "layernorm", "fused_mlp", "rotary_embedding", "softmax", "flash_attention", "cross_entropy",
       "matmul", "linear", "reduce")


class Tiny(nn.Module):
    """One site of every kernel type: norms, rotary, attention, MLP, a softmax, a matmul, a sum, the loss."""

    def __init__(self, d=16, heads=2, vocab=12):
        super().__init__()
        self.heads = heads
        self.norm = RMSNorm(d)
        nn.init.uniform_(self.norm.weight, 0.5, 1.5)  # not ones: a kernel that drops the weight shows
        self.qkv = nn.Linear(d, 3 * d)
        self.rotary = RotaryEmbedding(d // heads, 8)
        self.mlp = FeedForward(d, 24)
        self.ln = nn.LayerNorm(d)
        self.mix = nn.Parameter(torch.randn(d, d) / 4)
        self.head = nn.Linear(d, vocab)

    def forward(self, x, targets):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(self.rotary(q), self.rotary(k), v, is_causal=True)
        h = x + o.transpose(1, 2).reshape(b, s, d)
        h = self.ln(h + self.mlp(h)) @ self.mix
        h = h + (torch.softmax(h, dim=-1) * h).sum(-1, keepdim=True)
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


def every_starter_in_one_graph():
    """Run in a subprocess under Triton's interpreter: the Tiny model patched with each kernel type's Triton
    starter traces as one graph holding every operator, and compiled computes what the original does."""
    from autokernel.kernels import get_spec

    table = {}
    for kind in KERNELS:
        spec = importlib.util.spec_from_file_location(f"starter_{kind}", get_spec(kind).starters["triton"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        table[kind] = module.kernel_fn
    model = Tiny(d=32).eval()
    x, t = torch.randn(2, 8, 32), torch.randint(0, 12, (2, 8))
    with torch.no_grad():
        ref = model(x, t)
        patched = copy.deepcopy(model)
        stats = kernel_patch.patch(patched, table)
        explained = torch._dynamo.explain(patched)(x, t)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        assert _ops_in(explained.graphs) == set(OPS)
        graphs = []
        out = torch.compile(patched, fullgraph=True, backend=_recording(graphs))(x, t)
    assert _ops_in(graphs) == set(OPS)
    for o, r in zip(out, ref):
        assert torch.allclose(o, r, atol=1e-4), (o - r).abs().max()
    counts = {r["kind"]: (r["calls"], r["mismatches"]) for r in stats.as_list(list(KERNELS))}
    assert all(calls >= 2 and not bad for calls, bad in counts.values()), counts  # explain's run, then compiled
    print("ok")


def test_every_kernel_types_triton_starter_is_one_custom_operator_in_one_graph():
    script = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
             "import test_patch_compile; test_patch_compile.every_starter_in_one_graph()"
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


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


def test_an_operator_returns_the_layout_its_fake_implementation_promised():
    """Inductor lays out the graph by the fake implementation: a kernel whose output is transposed is copied
    to the promised contiguous layout, while rotary keeps a transposed q's layout (its starter writes it that
    way, so attention's output reshapes as a view), and a kernel that returns its input (unchecked here) is
    copied: an operator's output may not alias its inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = Tiny().eval()
    stats = kernel_patch.patch(model, {"softmax": lambda x: torch.softmax(x, -1).t().contiguous().t(),
                                       "rotary_embedding": lambda x, cos, sin: x}, verify=False)
    site = {s.op: s.id for s in kernel_patch._SITES.values() if s.stats is stats}
    ops = kernel_patch._OPS
    x = torch.randn(5, 7)
    q = torch.randn(2, 8, 2, 8).transpose(1, 2)  # [B, H, S, D] in [B, S, H, D] memory
    with torch.no_grad():
        soft = ops["softmax"](x, site["softmax"])
        rotated = ops["rotary_embedding"](q, model.rotary.cos, model.rotary.sin, site["rotary_embedding"])
        with FakeTensorMode(allow_non_fake_inputs=True) as fake:
            fake_soft = ops["softmax"](fake.from_tensor(x), site["softmax"])
            fake_rotated = ops["rotary_embedding"](fake.from_tensor(q), model.rotary.cos, model.rotary.sin,
                                                   site["rotary_embedding"])
    assert soft.is_contiguous() and soft.stride() == fake_soft.stride() and torch.allclose(soft, torch.softmax(x, -1))
    assert rotated.stride() == fake_rotated.stride() == torch.empty_like(q).stride() != torch.empty(q.shape).stride()
    assert rotated.data_ptr() != q.data_ptr() and torch.equal(rotated, q)
