"""`autokernel export`: a standalone package (no autokernel import) whose patch(model) routes the
model's calls to the kept kernel and keeps its outputs; plus the patcher's own guard rails."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel.engine import events as ev
from autokernel.engine import kernel_patch
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store

from loop_doubles import FakeWorker, ScriptedAgent, fake_profiler, fake_source, install_fake_specs

TRITON_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x2 = x.contiguous()
    y = torch.empty_like(x2)
    n = x2.shape[-1]
    _softmax_rows[(x2.numel() // n,)](x2, y, n, BLOCK=triton.next_power_of_2(n))
    return y
'''

MODEL = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 24)
    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1) * 2
def get_inputs():
    return [torch.randn(3, 5, 24)]
def get_init_inputs():
    return []
'''


@pytest.fixture
def session_with_softmax(tmp_path, monkeypatch):
    """A finished session whose kept softmax kernel is a real Triton kernel (judged by the fake harness)."""
    install_fake_specs(monkeypatch, tmp_path, kinds=("softmax",))
    (tmp_path / "model.py").write_text(MODEL)
    agent = ScriptedAgent(moves=[("real", [(0.5, "")])])
    real = fake_source(0.5, tag="real") + TRITON_SOFTMAX
    agent.propose = _with_source(agent.propose, real)
    store = Store(tmp_path / "s.db")
    cfg = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=3)
    session = OptimizeSession(cfg, store, agent=agent, worker=FakeWorker(), profiler=fake_profiler(("softmax",)))
    session.run()
    return tmp_path, session.session_id


def _with_source(propose, source):
    def wrapped(ctx):
        ideas = propose(ctx)
        for idea in ideas:
            for v in idea.variants:
                v.source = source
        return ideas
    return wrapped


def test_exported_package_imports_without_autokernel_and_patches(session_with_softmax):
    tmp_path, sid = session_with_softmax
    out = tmp_path / "pkgs" / "my_kernels"
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "export", "latest", "--db",
                           str(tmp_path / "s.db"), "-o", str(out), "--json"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["session_id"] == sid and [k["kind"] for k in result["kernels"]] == ["softmax"]
    assert sorted(p.name for p in out.iterdir()) == [".autokernel-export", "RESULTS.md", "__init__.py", "_patch.py", "softmax.py"]
    results = (out / "RESULTS.md").read_text()
    assert sid in results and "| softmax |" in results and "not meaningful" in results and "autokernel optimize" in results
    script = f"""
import importlib.util, sys, torch
sys.meta_path.insert(0, type("NoAutokernel", (), {{"find_spec": staticmethod(
    lambda name, *a: (_ for _ in ()).throw(ImportError("autokernel is off limits")) if name.startswith("autokernel") else None)}})())
import my_kernels
spec = importlib.util.spec_from_file_location("m", {str(tmp_path / "model.py")!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
model = m.Model().eval(); x = m.get_inputs()[0]
with torch.no_grad():
    ref = model(x)
    stats = my_kernels.patch(model)
    out = model(x); out = model(x)
assert stats.calls["softmax"] == 2 and not stats.mismatches["softmax"], stats.as_list(["softmax"])
assert str(stats) == repr(stats) == "PatchStats(softmax: 2 calls to the kernel)", repr(stats)
assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
assert not [k for k in sys.modules if k.startswith("autokernel")]
print("ok")
"""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    clean["PYTHONPATH"] = str(out.parent)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=clean,
                          cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    # a second export refuses to overwrite unless asked, then replaces only its own earlier export
    again = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "export", sid, "--db", str(tmp_path / "s.db"),
                            "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr
    again = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "export", sid, "--db", str(tmp_path / "s.db"),
                            "-o", str(out), "--force"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_export_latest_is_the_newest_optimize_session_not_a_newer_profile(session_with_softmax):
    """`export latest` took the newest session of any kind: after a profile it said "... is a profile
    session: only optimize sessions have kernels"."""
    tmp_path, sid = session_with_softmax
    db = str(tmp_path / "s.db")
    store = Store(db)
    for kind in ("bench", "profile"):  # what later `autokernel bench` and `autokernel profile` runs add
        time.sleep(0.01)
        newer = store.create_session(ev.SessionStarted(kind=kind, model=str(tmp_path / "model.py")))
        store.finish_session(newer, "completed", {"total_ms": 1.5, "top": "softmax"} if kind == "profile" else {})
    assert store.sessions()[0]["kind"] == "profile"
    proc = _cli("export", "latest", "--db", db, "-o", str(tmp_path / "k"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["session_id"] == sid
    proc = _cli("export", newer, "--db", db, "-o", str(tmp_path / "k2"))  # named explicitly: still refused
    assert proc.returncode == 2 and "is a profile session: only optimize sessions have kernels" in proc.stderr
    # the list says what each row holds, so the profile rows read as profiles and the search as a search
    listed = {e["kind"]: e["holds"] for e in json.loads(_cli("sessions", "--db", db, "--json").stdout)}
    assert listed["profile"] == "profile: 1.5 ms per forward, top softmax"
    assert listed["optimize"].endswith("kept softmax 2.00x") and listed["bench"].startswith("starter timings")
    table = _cli("sessions", "--db", db).stdout
    assert "profile: one `autokernel profile` run" in table and "kept softmax" in table


def test_export_latest_without_an_optimize_session_says_so(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    store.finish_session(store.create_session(ev.SessionStarted(kind="profile")), "completed", {})
    proc = _cli("export", "latest", "--db", str(db), "-o", str(tmp_path / "k"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no optimize session in" in proc.stderr


def test_two_exported_packages_compile_whole_in_one_process(session_with_softmax):
    """After a fresh import (no autokernel), each package's kernel is a custom operator in its own namespace:
    a model patched before torch.compile and one patched after both trace as one graph with the operator,
    and compute what the original does."""
    from autokernel.engine.export import export_session

    tmp_path, sid = session_with_softmax
    for name in ("my_kernels", "other_kernels"):
        export_session(Store(tmp_path / "s.db"), sid, tmp_path / "pkgs" / name)
    script = f"""
import importlib.util, sys, torch
sys.meta_path.insert(0, type("NoAutokernel", (), {{"find_spec": staticmethod(
    lambda name, *a: (_ for _ in ()).throw(ImportError("autokernel is off limits")) if name.startswith("autokernel") else None)}})())
import my_kernels, other_kernels
spec = importlib.util.spec_from_file_location("m", {str(tmp_path / "model.py")!r})
m = importlib.util.module_from_spec(spec); sys.modules["m"] = m; spec.loader.exec_module(m)  # Dynamo imports it
torch.manual_seed(0)
x = m.get_inputs()[0]
graphs = []
def backend(gm, example_inputs):
    graphs.append(gm.code)
    return torch._dynamo.backends.common.aot_autograd(fw_compiler=lambda g, _: g)(gm, example_inputs)
with torch.no_grad():
    before, after = m.Model().eval(), m.Model().eval()
    after.load_state_dict(before.state_dict())
    ref = before(x)
    stats = my_kernels.patch(before)
    explained = torch._dynamo.explain(before)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    out_before = torch.compile(before, fullgraph=True, backend=backend)(x)
    compiled = torch.compile(after, fullgraph=True, backend=backend)
    compiled(x)
    other = other_kernels.patch(compiled)
    out_after = compiled(x)
namespaces = (my_kernels._patch.namespace(), other_kernels._patch.namespace())
assert namespaces == ("autokernel_my_kernels", "autokernel_other_kernels"), namespaces
assert f"torch.ops.{{namespaces[0]}}.softmax.default" in graphs[0], graphs[0]
assert "softmax.default" not in graphs[1] and f"torch.ops.{{namespaces[1]}}.softmax.default" in graphs[2], graphs
for out in (out_before, out_after):
    assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
assert stats.calls["softmax"] == 2 and other.calls["softmax"] == 1 and not stats.mismatches["softmax"]
assert not [k for k in sys.modules if k.startswith("autokernel")]
print("ok")
"""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    clean["PYTHONPATH"] = str(tmp_path / "pkgs")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=clean,
                          cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


TORCH_LAYERNORM = """
import torch


def kernel_fn(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
"""
MODEL_TWO_KINDS = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.norm = nn.Linear(24, 24), nn.LayerNorm(24)
    def forward(self, x):
        return torch.softmax(self.norm(self.proj(x) + x), dim=-1) * 2
def get_inputs():
    return [torch.randn(3, 5, 24)]
"""


class _PerKindAgent:
    """One idea per target, 2x its parent, whose source is that kind's real kernel (judged by the fake harness)."""

    name = "per-kind"

    def __init__(self, sources):
        self.sources, self.asked = sources, set()

    def propose(self, ctx):
        from autokernel.engine.agents.base import Idea, Variant

        if ctx.kernel in self.asked:
            return []
        self.asked.add(ctx.kernel)
        source = fake_source(0.5, tag=ctx.kernel) + self.sources[ctx.kernel]
        return [Idea(tier=1, title="real", hypothesis="a real kernel", variants=[Variant(source=source, label="real")])]


def test_the_export_applies_the_kernels_integration_chose_for_patched_compile(tmp_path, monkeypatch):
    """Two kept kernels; integration found the forward under torch.compile faster without the LayerNorm
    (it cut the residual add's fusion), recommended patched + torch.compile with softmax alone, and wrote
    that into its event: the exported `patch(model)` applies softmax only, `kinds=KERNELS` both."""
    install_fake_specs(monkeypatch, tmp_path, kinds=("softmax", "layernorm"))
    (tmp_path / "model.py").write_text(MODEL_TWO_KINDS)
    store = Store(tmp_path / "s.db")
    cfg = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", integrate=False, plateau=3)
    session = OptimizeSession(cfg, store, agent=_PerKindAgent({"softmax": TRITON_SOFTMAX, "layernorm": TORCH_LAYERNORM}),
                              worker=FakeWorker(), profiler=fake_profiler(("softmax", "layernorm")))
    session.run()
    integ = ev.IntegrationResult(
        replaced=[{"kind": "softmax", "modules": 0, "calls": 1, "fallbacks": 0, "mismatches": [],
                   "chosen": ["patched", "patched_compile"]},
                  {"kind": "layernorm", "modules": 1, "calls": 1, "fallbacks": 0, "mismatches": [],
                   "chosen": ["patched"]}],
        correct=True, model_ms=9.0, eager_ms=10.0, compile_ms=6.0, patched_compile_ms=5.0, speedup_eager=10 / 9,
        speedup_compile=6 / 9, recommended="patched_compile", meaningful=False, detail="subsets chosen")
    store.append(session.session_id, integ)
    out = tmp_path / "pkgs" / "chosen_kernels"
    proc = _cli("export", session.session_id, "--db", str(tmp_path / "s.db"), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(k["kind"] for k in json.loads(proc.stdout)["kernels"]) == ["layernorm", "softmax"]
    assert "`patch(model)` applies: softmax (of softmax, layernorm" in (out / "RESULTS.md").read_text()
    script = f"""
import importlib.util, sys, torch
sys.meta_path.insert(0, type("NoAutokernel", (), {{"find_spec": staticmethod(
    lambda name, *a: (_ for _ in ()).throw(ImportError("autokernel is off limits")) if name.startswith("autokernel") else None)}})())
import chosen_kernels
spec = importlib.util.spec_from_file_location("m", {str(tmp_path / "model.py")!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
x = m.get_inputs()[0]
with torch.no_grad():
    model, every = m.Model().eval(), m.Model().eval()
    every.load_state_dict(model.state_dict())
    ref = model(x)
    chosen = chosen_kernels.patch(model)
    both = chosen_kernels.patch(every, kinds=chosen_kernels.KERNELS)
    outs = model(x), every(x)
assert chosen_kernels.APPLIED == ["softmax"], chosen_kernels.APPLIED
assert chosen.calls["softmax"] == 1 and chosen.modules["layernorm"] == 0, repr(chosen)
assert both.calls["softmax"] == 1 and both.modules["layernorm"] == 1 and both.calls["layernorm"] == 1, repr(both)
assert all(torch.allclose(o, ref, atol=1e-5) for o in outs)
print("ok")
"""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    clean["PYTHONPATH"] = str(out.parent)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=clean,
                          cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_applied_kinds_follow_only_a_correct_patched_recommendation():
    """Each patched forward has its own subset; an unpatched recommendation, a wrong integration or one from
    before the subset search (no `chosen`) leaves every kept kernel applied, as exports did before."""
    from autokernel.engine.export import applied_kinds

    kinds = ["softmax", "layernorm", "rmsnorm"]
    replaced = [{"kind": "softmax", "chosen": ["patched", "patched_compile"]}, {"kind": "layernorm", "chosen": ["patched"]},
                {"kind": "rmsnorm", "chosen": []}]

    def result(recommended, correct=True, items=replaced):
        return ev.IntegrationResult(replaced=items, correct=correct, recommended=recommended)

    assert applied_kinds(result("patched_compile"), kinds) == ["softmax"]
    assert applied_kinds(result("patched"), kinds) == ["softmax", "layernorm"]
    assert applied_kinds(result("compile"), kinds) == kinds
    assert applied_kinds(result("patched", correct=False), kinds) == kinds
    assert applied_kinds(result("patched", items=[{"kind": k, "calls": 1} for k in kinds]), kinds) == kinds
    assert applied_kinds(None, kinds) == kinds


def test_export_errors_are_one_line(tmp_path):
    db = tmp_path / "empty.db"
    Store(db)
    proc = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "export", "nope", "--db", str(db), "-o",
                           str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no session 'nope'" in proc.stderr


class _RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight


class _MLP(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False), nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _Block(nn.Module):
    """Holds its own w1/w3/w2 too: a block with such linears and more is not mistaken for an MLP."""

    def __init__(self, d=16, h=40):
        super().__init__()
        self.norm = _RMSNorm(d)
        self.mlp = _MLP(d, h)
        self.w1, self.w3, self.w2 = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        h = self.norm(x)
        q = self.w1(h).view(2, 3, 2, 8).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(2, 3, 16)
        return self.ln(self.mlp(a) + self.w2(x) + self.w3(x)).softmax(-1)


def test_patcher_routes_matching_calls_and_refuses_a_wrong_kernel():
    torch.manual_seed(0)
    model = _Block().eval()
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        ref = model(x)
        good = {
            "rmsnorm": lambda x, w, eps=1e-6: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
            "layernorm": lambda x, w, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), w, b, eps),
            "fused_mlp": lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.T,
            "softmax": lambda x: torch.softmax(x, -1),
            "flash_attention": lambda q, k, v, causal=False: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            "matmul": lambda a, b: a @ b,
        }
        patched = copy.deepcopy(model)
        stats = kernel_patch.patch(patched, good)
        out = patched(x)
        assert torch.allclose(out, ref, atol=1e-5)
        assert {k: stats.calls[k] > 0 for k in good} == {k: True for k in good}, stats.as_list(list(good))
        assert stats.modules["rmsnorm"] == 1 and stats.modules["fused_mlp"] == 1 and stats.modules["layernorm"] == 1
        # a kernel that computes something else is caught on its first call and never used there again
        wrong = copy.deepcopy(model)
        stats = kernel_patch.patch(wrong, {"softmax": lambda x: torch.softmax(x, -1) * 1.01,
                                           "rmsnorm": lambda x, w, eps=1e-6: x})
        assert torch.equal(wrong(x), ref) and torch.equal(wrong(x), ref)
        assert stats.calls["softmax"] == 0 and stats.fallbacks["softmax"] == 2 and stats.mismatches["softmax"]
        assert stats.calls["rmsnorm"] == 0 and stats.mismatches["rmsnorm"]
        # printed, it says what went where (it printed `<..._patch.PatchStats object at 0x...>`)
        text = str(stats)
        assert text.startswith("PatchStats(softmax: 0 calls to the kernel, 2 left to PyTorch, refused at 1 site(s): ")
        assert "; rmsnorm: 1 module swapped, 0 calls to the kernel, " in text and "max abs error" in text
        # a dtype the kernel was not checked on falls through to PyTorch
        typed = copy.deepcopy(model)
        stats = kernel_patch.patch(typed, {"softmax": kernel_patch.KernelEntry("softmax", good["softmax"], dtypes=["fp16"])})
        assert torch.equal(typed(x), ref) and stats.calls["softmax"] == 0 and stats.fallbacks["softmax"] == 1


def test_patcher_judges_a_half_precision_site_against_the_exact_result_not_only_the_models_rounding():
    """The bundled Llama's rotary embedding in bf16 rounds x*cos, rotate(x)*sin and their sum; a kernel
    that rounds once differs from it by an ulp where the two terms cancel (seen on the H100: max abs
    error 0.0312 against atol 0.01, so every rotary site fell back to PyTorch). Such a kernel is used;
    one that computes something else is still refused in half precision."""
    from autokernel.engine.examples.llama import RotaryEmbedding, rotate_half

    torch.manual_seed(0)
    rotary = RotaryEmbedding(64, 256).to(torch.bfloat16)
    x = (torch.randn(2, 4, 256, 64) * 6).to(torch.bfloat16)

    def fused(x, cos, sin):  # fp32 math, one rounding: what a fused kernel does
        xf = x.float()
        return (xf * cos.float() + rotate_half(xf) * sin.float()).to(x.dtype)

    with torch.no_grad():
        ref = rotary(x)
        tol = kernel_patch._DEFAULT_TOL
        assert not kernel_patch._close(fused(x, rotary.cos, rotary.sin), ref, tol)[0]  # the H100's case
        good = copy.deepcopy(rotary)
        stats = kernel_patch.patch(good, {"rotary_embedding": fused})
        out = good(x)
        assert stats.calls["rotary_embedding"] == 1 and not stats.mismatches["rotary_embedding"]
        assert torch.equal(out, fused(x, rotary.cos, rotary.sin))
        wrong = copy.deepcopy(rotary)
        stats = kernel_patch.patch(wrong, {"rotary_embedding": lambda x, cos, sin: fused(x, cos, -sin)})
        assert torch.equal(wrong(x), ref)
        assert stats.calls["rotary_embedding"] == 0 and stats.mismatches["rotary_embedding"]


class _Loss(nn.Module):
    def __init__(self, ignore_index=-100):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets, ignore_index=self.ignore_index)


def test_cross_entropy_is_routed_without_asking_the_gpu_about_ignored_targets():
    """The kernel's contract skips targets of -100 (F.cross_entropy's default), so a routed call needs no
    host read of the targets: on the H100 that read (a sync per forward) cost ~1 ms of a 26 ms Llama
    forward. Another ignore_index is not the contract's, and falls through to PyTorch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostReads(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten._local_scalar_dense, torch.ops.aten.is_nonzero):
                HostReads.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    logits, targets = torch.randn(16, 50), torch.randint(0, 50, (16,))
    targets[3] = targets[9] = -100
    contract = lambda x, t: F.cross_entropy(x.float(), t)  # noqa: E731 (the contract, as a kernel would compute it)
    with torch.no_grad():
        model = _Loss()
        stats = kernel_patch.patch(model, {"cross_entropy": contract})
        assert torch.equal(model(logits, targets), F.cross_entropy(logits, targets))  # first call: verified
        with HostReads():
            model(logits, targets)
        assert HostReads.n == 0 and stats.calls["cross_entropy"] == 2
        other = _Loss(ignore_index=7)
        stats = kernel_patch.patch(other, {"cross_entropy": contract})
        real = targets.clamp(min=0)  # -100 is no class when 7 is the ignored one
        assert torch.equal(other(logits, real), F.cross_entropy(logits, real, ignore_index=7))
        assert stats.calls["cross_entropy"] == 0 and stats.fallbacks["cross_entropy"] == 1


def test_a_vendored_cuda_build_finds_the_shared_headers(tmp_path):
    """An exported CUDA kernel builds through the package's own copy of cuda_build: its include path must
    point at headers that exist in the package (kernels/include/ak_hopper.cuh on Hopper), and the cache key
    must still cover them."""
    import importlib.util

    from autokernel.engine.export import vendor_cuda_build

    vendor_cuda_build(tmp_path)
    spec = importlib.util.spec_from_file_location("_vendored_cuda_build", tmp_path / "_cuda_build.py")
    vendored = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendored)
    assert (vendored.INCLUDE_DIR / "ak_hopper.cuh").is_file()
    assert f"-I{vendored.INCLUDE_DIR}" in vendored.nvcc_flags("90")
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void k() {}\n")
    before = vendored.extension_name(cu, "90")
    (vendored.INCLUDE_DIR / "ak_hopper.cuh").write_text("// edited\n")
    assert vendored.extension_name(cu, "90") != before
