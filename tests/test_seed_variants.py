"""A conv problem's seed comes with a variant whose convolutions are channels-last (2-d ones where Inductor's GPU
heuristic expects a gain, as torch.compile lays them out; 3-d ones always, which cuDNN computes so;
engine/inductor_seed.py), and the playbook starts from it once, autotuned, before tuning the seed's own knobs. On
a GPU torch.compile's channels-last convs were most of its lead over a seed in the Model's layout
(docs/results/h100/kernelbench_sample.md, the layout probe)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.engine.agents.base import AgentContext, Measurement, Tried
from autokernel.engine.agents.playbook import PlaybookAgent
from autokernel.engine.agents.seed_moves import seed_knobs
from autokernel.engine.seed_autotune import autotune_seed
from autokernel.engine.seeding import CHANNELS_LAST, seed_variants
from autokernel.engine.worker import Worker

from problem_support import inductor_seeds

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, groups=groups)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


def get_inputs():
    return [torch.randn(16, {cin}, 5, 5)]


def get_init_inputs():
    return [{cin}, {cout}, {groups}]
'''


CONV3D = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{conv}(8, 16, 3)

    def forward(self, x):
        return torch.sigmoid(self.conv(x)) * 2.0


def get_inputs():
    return [torch.randn(16, 8, 5, 6, 7)]


def get_init_inputs():
    return []
'''


def _problem(folder: Path, name: str, cin: int, cout: int, groups: int = 1) -> Path:
    path = folder / f"{name}.py"
    path.write_text(PROBLEM.format(cin=cin, cout=cout, groups=groups))
    return path


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> dict:
    """Seeds of a conv that Inductor's GPU heuristic makes channels-last (64 -> 128 channels) and of a grouped one
    it leaves in the Model's layout (channels-last is slower there, by its measurements), made once."""
    folder = tmp_path_factory.mktemp("variants")
    wide, grouped = _problem(folder, "wide", 64, 128), _problem(folder, "grouped", 8, 16, groups=2)
    verdicts = inductor_seeds([wide, grouped], folder / "seeds")
    return {"wide": (wide, verdicts[0]), "grouped": (grouped, verdicts[1])}


def test_a_conv_gets_a_channels_last_variant_and_a_grouped_one_none(seeded):
    wide, verdict = seeded["wide"]
    seed = Path(verdict["seed"])
    assert verdict["variants"] == {CHANNELS_LAST: str(seed.with_name(f"{seed.stem}.channels_last.py"))}
    assert seed_variants(seed) == verdict["variants"]
    variant = Path(verdict["variants"][CHANNELS_LAST]).read_text()
    assert "channels-last" in variant.split('"""')[1] and variant != seed.read_text()
    # the Model's NCHW input and weight are copied into the channels-last order before the library conv reads them
    assert len(re.findall(r"^@triton.jit", variant, re.M)) > len(re.findall(r"^@triton.jit", seed.read_text(), re.M))

    _, grouped = seeded["grouped"]
    assert grouped["variants"] == {} and seed_variants(grouped["seed"]) == {}


def test_the_variant_passes_the_worker_check(seeded):
    wide, verdict = seeded["wide"]
    with Worker(device="cpu") as w:
        report = w.check(verdict["variants"][CHANNELS_LAST], kernel="problem", problem=str(wide), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]


@pytest.mark.parametrize("conv", ["Conv3d", "ConvTranspose3d"])
def test_a_3d_conv_runs_channels_last_in_the_variant_and_returns_the_models_layout(tmp_path, conv):
    """Inductor never lays a 3-d conv out channels-last; the variant does (its input and weight copied so), the
    Triton after the conv reads that layout, and the output comes back contiguous, as the Model's does."""
    problem = tmp_path / f"{conv}.py"
    problem.write_text(CONV3D.format(conv=conv))
    (verdict,) = inductor_seeds([problem], tmp_path / "seed.py")
    variant = Path(verdict["variants"][CHANNELS_LAST])
    text = variant.read_text()
    after_conv = re.search(r"torch\.convolution\(.*\n\s*_check_layout\(\w+, \((\d+), (\d+), (\d+), (\d+), (\d+)\), "
                           r"\((\d+), (\d+), (\d+), (\d+), (\d+)\)\)", text)
    assert after_conv, text[-3000:]
    channels, stride = int(after_conv.group(2)), [int(after_conv.group(i)) for i in range(6, 11)]
    assert stride[1] == 1 and stride[4] == channels  # channels innermost: channels-last 3-d
    with Worker(device="cpu") as w:
        report = w.check(str(variant), kernel="problem", problem=str(problem), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]
    run = subprocess.run([sys.executable, "-c", f"""
import importlib.util, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
variant = load({str(variant)!r}, "variant")
torch.manual_seed(0)
x = torch.randn(16, 8, 5, 6, 7)
torch.manual_seed(1)
out = variant.ModelNew()(x)
torch.manual_seed(1)
ref = variant.Model()(x)
print(out.is_contiguous(), ref.is_contiguous(), bool(torch.allclose(out, ref, atol=1e-5)))
"""], capture_output=True, text=True, timeout=300)
    assert run.stdout.split() == ["True", "True", "True"], run.stderr[-2000:]


def _ctx(source: str, variants: dict, history=()) -> AgentContext:
    parent = Measurement("problem-0001", "Inductor seed", True, kernel_ms=2.0, params=seed_knobs(source))
    return AgentContext(kernel="problem", backend="triton", device="cuda", device_name="H100", shape={},
                        dtype="fp32", parent_id="problem-0001", parent_source=source, parent_params=seed_knobs(source),
                        parent_measurement=parent, best=parent, pool=[], history=list(history), round=1,
                        max_ideas=9, max_variants=3, seed_variants=variants)


def test_the_playbook_starts_from_the_variant_first_autotuned_and_only_once(seeded):
    _, verdict = seeded["wide"]
    source = Path(verdict["seed"]).read_text()
    variant = Path(verdict["variants"][CHANNELS_LAST]).read_text()
    ideas = PlaybookAgent().propose(_ctx(source, {CHANNELS_LAST: variant}))
    first = ideas[0]
    assert first.title == "Start from the seed's channels-last variant" and len(first.variants) == 1
    tuned = autotune_seed(variant)
    expected = tuned.source if tuned.kernels else variant
    assert first.variants[0].source == expected
    assert first.variants[0].params["variant"] == CHANNELS_LAST
    # the hypothesis cites the parent's measurement as handed in (the fixture's kernel_ms=2.0): no clock is read
    assert "2 ms" in first.hypothesis and "faster channels-last" in first.hypothesis

    tried = Tried(first.tier, first.title, first.hypothesis, first.parent_id,
                  [Measurement("c1", CHANNELS_LAST, False, failure="smoke: off by 1e-3", params=first.variants[0].params)])
    again = PlaybookAgent().propose(_ctx(source, {CHANNELS_LAST: variant}, history=[tried]))
    assert again and not any("variant" in i.title for i in again)  # a failed variant is not offered again
    assert [i.title for i in again] == [i.title for i in ideas[1:]][: len(again)]

    assert not any("variant" in i.title for i in PlaybookAgent().propose(_ctx(source, {})))


@pytest.mark.timeout(900)
def test_a_kernelbench_run_tries_the_variant_after_the_seed(tmp_path):
    """End to end: the session seeds the problem (writing the variant beside the seed), checks and times the
    seed, and its next experiment starts from the variant, which passes every stage."""
    problem = _problem(tmp_path, "wide_conv", 64, 128)
    db = tmp_path / "s.db"
    run = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "kernelbench", str(problem), "--device", "cpu",
                          "--max-experiments-per-problem", "2", "--db", str(db), "--json"],
                         capture_output=True, text=True, timeout=880)
    assert run.returncode == 0, run.stderr[-3000:]
    with sqlite3.connect(db) as con:
        rows = [(t, json.loads(p)) for t, p in con.execute("select type, payload from events order by session_id, seq")]
    written = [p for t, p in rows if t == "candidate_written"]
    assert len(written) == 2, [p.get("label") for p in written]
    assert written[1]["params"].get("variant") == CHANNELS_LAST
    ideas = [p["title"] for t, p in rows if t == "idea_proposed"]
    assert "Start from the seed's channels-last variant" in ideas
    decisions = {p["candidate_id"]: p["decision"] for t, p in rows if t == "decision"}
    assert decisions.get(written[1]["candidate_id"]) in ("kept", "discarded"), decisions  # passed its checks


def test_the_llm_is_told_of_the_channels_last_layout_where_the_seed_has_that_variant(seeded):
    from autokernel.engine.agents.prompts import build_prompt
    from autokernel.engine.problem_spec import problem_brief

    wide, verdict = seeded["wide"]
    source = Path(verdict["seed"]).read_text()
    variant = Path(verdict["variants"][CHANNELS_LAST]).read_text()
    ctx = _ctx(source, {CHANNELS_LAST: variant})
    ctx.seed_source, ctx.seed = source, ctx.parent_measurement
    prompt = build_prompt(ctx, problem_brief(wide))
    assert "convolutions faster channels-last" in prompt
    ctx.seed_variants = {}
    assert "channels-last" not in build_prompt(ctx, problem_brief(wide))


def test_a_variant_that_cannot_be_made_leaves_the_seed_standing(monkeypatch, tmp_path):
    """Inductor failing on the channels-last form (any error, not only SeedError) means no variant, not no seed."""
    import autokernel.engine.inductor_seed as seeding

    def fails(*args, **kwargs):
        raise RuntimeError("Inductor fell over")

    monkeypatch.setattr(seeding, "write_seed", fails)
    seed = seeding.Seed(source='"""doc"""\nx = 1\n', kernels=["k"], extern=["convolution"], inductor_code="")
    assert seeding._channels_last_variant(tmp_path / "p.py", None, [], seed) is None
