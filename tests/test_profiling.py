"""The profiler: time attributed to kernel types by module and by operator, counted once, with floors."""

from __future__ import annotations

import textwrap

import pytest
import torch

from autokernel.engine.attribution import OpCall, classify_module, kernel_shape, kind_by_pattern, kind_of_op, op_cost
from autokernel.engine.examples import example_path
from autokernel.engine.model_loading import load_model
from autokernel.engine.profiling import profile_model
from autokernel.engine.roofline import Ceilings

# fixed ceilings: the floors in these tests do not depend on a measurement
CEIL = Ceilings("test", bandwidth_gbs=100.0, matmul_tflops={"fp32": 1.0, "fp16": 2.0, "bf16": 2.0}, measured=False)

TINY_LLAMA_PIECE = """
import torch
from torch import nn

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.norm = RMSNorm(128)
        self.down = nn.Linear(128, 64)

    def forward(self, x):
        return self.down(self.norm(self.up(x)))

def get_inputs():
    return [torch.randn(32, 64)]

def get_init_inputs():
    return []
"""

# KernelBench's RMSNorm problem: the root module is the norm, over dim 1 of a 4-D tensor
KERNELBENCH_RMS = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, features, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms

def get_inputs():
    return [torch.randn(4, 16, 8, 6)]

def get_init_inputs():
    return [16, 1e-5]
"""


# kernels written as plain functions, as Hugging Face writes rotary embeddings
FUNCTIONS = """import torch
from torch import nn
import torch.nn.functional as F

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)

def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

class Attn(nn.Module):
    def __init__(s):
        super().__init__(); s.qkv = nn.Linear(64, 192, bias=False); s.o = nn.Linear(64, 64, bias=False)
        s.w = nn.Parameter(torch.ones(64))
        s.register_buffer("cos", torch.randn(16, 16)); s.register_buffer("sin", torch.randn(16, 16))
    def forward(s, x):
        x = rms(x, s.w)
        b, t, _ = x.shape
        q, k, v = s.qkv(x).view(b, t, 3, 4, 16).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary_pos_emb(q, k, s.cos, s.sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.o(y.transpose(1, 2).reshape(b, t, 64))

class Model(nn.Module):
    def __init__(s):
        super().__init__(); s.layers = nn.ModuleList([Attn(), Attn()])
    def forward(s, x):
        for l in s.layers: x = l(x)
        return x

def get_inputs(): return [torch.randn(2, 16, 64)]
def get_init_inputs(): return []
"""


@pytest.fixture(autouse=True)
def _size_env(monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")


def _profile(tmp_path, text, iters=2):
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(text))
    return profile_model(load_model(path, "cpu"), warmup=1, iters=iters, ceilings=CEIL)


def test_hand_written_rmsnorm_is_one_row(tmp_path):
    result = _profile(tmp_path, TINY_LLAMA_PIECE)
    by_name = {r.name: r for r in result.rows}
    assert "RMSNorm" in by_name
    row = by_name["RMSNorm"]
    assert row.kind == "rmsnorm" and row.calls == 1 and row.modules == ["norm"]
    assert row.target_shape == {"rows": 32, "cols": 128} and row.target_dtype == "fp32"
    for op in ("aten::pow", "aten::mean", "aten::rsqrt", "aten::mul", "aten::add"):
        assert op not in by_name, f"{op} leaked out of the RMSNorm module"
    assert by_name["aten::linear"].kind == "matmul" and by_name["aten::linear"].calls == 2
    # at least: read x, write y (32x128 fp32 each); the floor follows from the fixed bandwidth
    assert row.bytes >= 2 * 32 * 128 * 4
    assert row.floor_ms == pytest.approx(row.bytes / 100e9 * 1e3, rel=1e-6)
    matmul = by_name["aten::linear"]
    assert matmul.flops == 2 * 32 * 64 * 128 * 2
    # every row's self time counted once: the rows add up to the attributed time, shares to <= 1
    assert sum(r.self_ms for r in result.rows) == pytest.approx(result.attributed_ms)
    assert sum(r.share for r in result.rows) <= 1 + 1e-9
    assert [r.max_speedup for r in result.rows] == sorted((r.max_speedup for r in result.rows), reverse=True)


def test_rmsnorm_with_an_unhelpful_name_over_dim_1(tmp_path):
    result = _profile(tmp_path, KERNELBENCH_RMS)
    kinds = {r.kind for r in result.rows}
    assert kinds == {"rmsnorm"}, [(r.kind, r.name) for r in result.rows]
    (row,) = result.rows
    assert row.name == "Model" and row.modules == ["Model"]
    assert row.target_shape == {"rows": 4 * 8 * 6, "cols": 16}  # normalized over dim 1, not the last
    assert row.share > 0


def test_kernels_written_as_plain_functions(tmp_path):
    result = _profile(tmp_path, FUNCTIONS)
    by_name = {r.name: r for r in result.rows}
    rope = by_name["apply_rotary_pos_emb()"]
    assert rope.kind == "rotary_embedding" and rope.calls == 2
    assert rope.target_shape == {"batch": 2, "heads": 4, "seq": 16, "head_dim": 16}
    assert by_name["rms()"].kind == "rmsnorm" and by_name["rms()"].target_shape == {"rows": 32, "cols": 64}
    for op in ("aten::neg", "aten::cat", "aten::rsqrt", "aten::pow", "aten::mean"):
        assert op not in by_name, f"{op} leaked out of its function"
    assert by_name["aten::linear"].kind == "matmul" and by_name["aten::scaled_dot_product_attention"].calls == 2


def test_llama_example_profiles_with_every_kind():
    loaded = load_model(example_path("llama"), "cpu")
    result = profile_model(loaded, warmup=1, iters=2, ceilings=CEIL)
    kinds = {r.kind for r in result.rows}
    assert {"matmul", "rmsnorm", "flash_attention", "fused_mlp", "rotary_embedding", "cross_entropy"} <= kinds
    rows = {r.kind: r for r in result.rows if r.kind != "other"}
    assert rows["fused_mlp"].name == "FeedForward" and rows["fused_mlp"].calls == 2
    assert rows["fused_mlp"].target_shape == {"tokens": 256, "hidden": 256, "intermediate": 688}
    assert rows["rotary_embedding"].calls == 4 and rows["rotary_embedding"].target_shape == {
        "batch": 2, "heads": 4, "seq": 128, "head_dim": 64}
    assert rows["flash_attention"].target_shape["causal"] is True
    assert rows["cross_entropy"].target_shape == {"rows": 256, "vocab": 1024}
    assert rows["rmsnorm"].calls == 5  # two per layer, one final
    assert all(r.floor_ms > 0 for r in rows.values())
    assert result.device == "cpu" and not result.meaningful


def test_convnet_example_profiles():
    result = profile_model(load_model(example_path("convnet"), "cpu"), warmup=1, iters=1, ceilings=CEIL)
    names = {r.name for r in result.rows}
    assert "aten::conv2d" in names and "aten::linear" in names
    conv = next(r for r in result.rows if r.name == "aten::conv2d")
    assert conv.flops > 0 and conv.kind == "other" and conv.target_shape is None
    assert any(r.kind == "softmax" for r in result.rows)


def test_vit_example_profiles_with_its_norms_attention_and_ops_outside_the_kinds():
    result = profile_model(load_model(example_path("vit"), "cpu"), warmup=1, iters=1, ceilings=CEIL)
    kinds = {r.kind for r in result.rows}
    names = {r.name for r in result.rows}
    assert {"layernorm", "softmax", "matmul"} <= kinds
    assert {"aten::conv2d", "aten::gelu", "aten::group_norm", "aten::masked_fill"} <= names


def test_llama_hotspots_example_is_the_three_memory_bound_targets_at_the_llamas_shapes():
    result = profile_model(load_model(example_path("llama_hotspots"), "cpu"), warmup=1, iters=1, ceilings=CEIL)
    rows = {r.kind: r for r in result.rows}
    assert set(rows) == {"rmsnorm", "softmax", "cross_entropy"}
    from autokernel.engine.examples.llama import CONFIGS

    c = CONFIGS["small"]
    assert rows["rmsnorm"].target_shape == {"rows": c["batch"] * c["seq"], "cols": c["dim"]}
    assert rows["softmax"].target_shape == {"rows": c["batch"] * c["heads"] * c["seq"], "cols": c["seq"]}
    assert rows["cross_entropy"].target_shape == {"rows": c["batch"] * c["seq"], "vocab": c["vocab"]}


# -- the attribution rules on their own --------------------------------------------------------------
def test_operator_names():
    assert kind_of_op("aten::linear") == kind_of_op("aten::bmm") == "matmul"
    assert kind_of_op("aten::_scaled_dot_product_flash_attention") == "flash_attention"
    assert kind_of_op("aten::native_layer_norm") == "layernorm"
    assert kind_of_op("aten::cross_entropy_loss") == "cross_entropy"
    assert kind_of_op("aten::amax") == "reduce"
    assert kind_of_op("aten::gelu") == "other"


def test_patterns():
    assert kind_by_pattern(["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul", "aten::to"]) == "rmsnorm"
    assert kind_by_pattern(["aten::mean", "aten::sub", "aten::pow", "aten::mean", "aten::add", "aten::sqrt", "aten::div"]) == "layernorm"
    assert kind_by_pattern(["aten::amax", "aten::sub", "aten::exp", "aten::sum", "aten::div"]) == "softmax"
    assert kind_by_pattern(["aten::linear"] * 3 + ["aten::silu", "aten::mul"]) == "fused_mlp"
    assert kind_by_pattern(["aten::linear"] * 2 + ["aten::gelu"]) is None
    assert kind_by_pattern(["aten::mul", "aten::slice", "aten::neg", "aten::cat", "aten::mul", "aten::add"]) == "rotary_embedding"
    assert kind_by_pattern(["aten::log_softmax", "aten::nll_loss"]) == "cross_entropy"
    # a module named like a norm that runs a matmul is not a norm
    class FancyRMSNorm(torch.nn.Module):
        pass
    assert classify_module(FancyRMSNorm(), ["aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"]) == "rmsnorm"
    assert classify_module(FancyRMSNorm(), ["aten::linear", "aten::mean", "aten::rsqrt", "aten::mul"]) is None
    assert classify_module(torch.nn.LayerNorm(4), ["aten::layer_norm"]) == "layernorm"


def test_costs_and_shapes_from_recorded_ops():
    mm = OpCall("aten::addmm", [[128], [64, 256], [256, 128], [], []], ["float", "float", "float", "Scalar", "Scalar"], [None, None, None, 1, 1])
    b, f = op_cost(mm)
    assert f == 2 * 64 * 128 * 256
    assert b == (128 + 64 * 256 + 256 * 128 + 64 * 128) * 4
    assert kernel_shape("matmul", [mm]) == {"M": 64, "N": 128, "K": 256}
    softmax = OpCall("aten::_softmax", [[8, 100, 30], [], []], ["c10::BFloat16", "Scalar", "Scalar"], [None, 1, False])
    assert kernel_shape("softmax", [softmax]) == {"rows": 240, "cols": 100}
    views = OpCall("aten::transpose", [[4, 5], [], []], ["float", "Scalar", "Scalar"], [None, 0, 1])
    assert op_cost(views) == (0, 0)


@pytest.mark.parametrize("with_stack", [False, True])
@pytest.mark.parametrize("source", ["modules", "functions"])
def test_each_operator_self_time_is_counted_exactly_once(tmp_path, with_stack, source):
    """The rows add up to the profiler's own total of operator self times: nothing twice, nothing lost."""
    from torch.profiler import ProfilerActivity, profile

    from autokernel.engine.profiling import RANGE_PREFIX, ModuleRanges, _is_python, attribute

    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(TINY_LLAMA_PIECE if source == "modules" else FUNCTIONS))
    loaded = load_model(path, "cpu")
    ranges = ModuleRanges(loaded.model)
    try:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack) as prof:
            ranges.enabled = True
            for _ in range(2):
                loaded.model(*loaded.inputs)
            ranges.enabled = False
    finally:
        ranges.close()
    events = prof.events()
    expected_ms = sum(e.self_cpu_time_total for e in events
                      if not e.name.startswith(RANGE_PREFIX) and not _is_python(e)) / 1e3 / 2
    assert expected_ms > 0
    rows = attribute(events, ranges, "cpu", 2, 0.0, CEIL)
    assert sum(r.self_ms for r in rows) == pytest.approx(expected_ms, rel=1e-9)
    assert len({(r.kind, r.name) for r in rows}) == len(rows)


def test_a_norm_module_that_calls_a_norm_function_is_one_row(tmp_path):
    """Meta's Llama code: RMSNorm.forward calls self._norm(x.float()).type_as(x) * self.weight."""
    result = _profile(tmp_path, """
        import torch
        from torch import nn

        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))

            def _norm(self, x):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

            def forward(self, x):
                return self._norm(x.float()).type_as(x) * self.weight

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = RMSNorm(32)
                self.lin = nn.Linear(32, 32)

            def forward(self, x):
                return self.lin(self.norm(x))

        def get_inputs():
            return [torch.randn(8, 32)]
        """)
    rms_rows = [r for r in result.rows if r.kind == "rmsnorm"]
    assert [r.name for r in rms_rows] == ["RMSNorm"] and rms_rows[0].calls == 1
    assert {r.name for r in result.rows} <= {"RMSNorm", "aten::linear"}


def test_unknown_traffic_claims_no_speedup():
    """torch.profiler records no shapes for tensor lists: a cat's floor is unknown, so s is 1, not infinite."""
    from autokernel.engine.attribution import cost_known

    cat = OpCall("aten::cat", [[], []], ["TensorList", "Scalar"], [None, -1])
    assert not cost_known(cat)
    assert cost_known(OpCall("aten::view", [[4, 5], []], ["float", "ScalarList"], [None, [20]]))
    assert cost_known(OpCall("aten::mul", [[4, 5], [4, 5]], ["float", "float"], [None, None]))


def test_rows_keep_shapes_where_torch_leaves_input_dtypes_out(tmp_path, monkeypatch):
    """torch 2.11's parsed events have no `input_dtypes` (seen on the H100 image): the profiler takes
    them from the raw Kineto events, so every row keeps its shape, bytes and floor."""
    def seen(rows):  # the costliest call's shape can be either of two equal linears: its keys only
        return {(r.kind, r.name): (sorted(r.target_shape or {}), r.target_dtype, r.bytes) for r in rows}

    expected = seen(_profile(tmp_path, TINY_LLAMA_PIECE).rows)
    original = torch.profiler.profile.events

    def events_of_an_older_torch(self):
        evts = original(self)
        for e in evts:
            e.input_dtypes = None
        return evts

    monkeypatch.setattr(torch.profiler.profile, "events", events_of_an_older_torch)
    got = seen(_profile(tmp_path, TINY_LLAMA_PIECE).rows)
    assert got == expected
    assert got[("matmul", "aten::linear")][2] > 0 and got[("rmsnorm", "RMSNorm")][1] == "fp32"


@pytest.mark.parametrize("bad_parses", [1, 2])
def test_an_unreadable_trace_is_profiled_again(tmp_path, monkeypatch, bad_parses):
    """torch's Python tracer can leave names it cannot decode (a freed code object): the profile is
    taken again, without Python stacks after two bad tries, and the rows come out as usual."""
    original = torch.profiler.profile.events
    stacks = []

    def events(self):
        stacks.append(self.with_stack)
        if len(stacks) <= bad_parses:
            raise UnicodeDecodeError("utf-8", b"\xa0", 0, 1, "invalid start byte")
        return original(self)

    monkeypatch.setattr(torch.profiler.profile, "events", events)
    notes = []
    path = tmp_path / "m.py"
    path.write_text(TINY_LLAMA_PIECE)
    result = profile_model(load_model(path, "cpu"), warmup=0, iters=1, ceilings=CEIL, on_progress=notes.append)
    assert stacks == [True, True, False][: bad_parses + 1]
    assert any("profiling again" in n for n in notes)
    assert {r.name for r in result.rows} >= {"RMSNorm", "aten::linear"}
