"""Loading a user's model file: every way it can fail is one specific line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from autokernel.engine import cli
from autokernel.engine.errors import UserError
from autokernel.engine.examples import example_path, names
from autokernel.engine.model_loading import load_model
from autokernel.engine.store import Store

GOOD = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return [8]
"""

# name -> (file text, the one line we expect to see, in part)
BROKEN = {
    "syntax": ("import torch\ndef get_inputs(:\n    pass\n", "bad.py: line 2: SyntaxError"),
    "import": ("import torch\nimport no_such_package_xyz\n", "bad.py: line 2: ModuleNotFoundError: No module named 'no_such_package_xyz'"),
    "missing_names": ("import torch\nfrom torch import nn\nclass Model(nn.Module):\n    pass\n", "bad.py does not define get_inputs()"),
    "not_a_module": ("class Model:\n    pass\ndef get_inputs():\n    return []\n", "Model must be a subclass of torch.nn.Module"),
    "constructor": (GOOD.replace("super().__init__()", "super().__init__()\n        raise ValueError('hidden size must be even')"),
                    "Model(...) raised ValueError: hidden size must be even (bad.py:8)"),
    "forward": (GOOD.replace("return self.lin(x)", "raise RuntimeError('no forward today')"),
                "forward raised RuntimeError: no forward today (bad.py:11)"),
    "forward_shape": (GOOD.replace("torch.randn(4, 8)", "torch.randn(4, 9)"), "forward raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    "inputs_raise": (GOOD.replace("return [torch.randn(4, 8)]", "raise KeyError('batch')"), "get_inputs() raised KeyError: 'batch'"),
    "wrong_device": (GOOD.replace("torch.randn(4, 8)", "torch.randn(4, 8, device='meta')"),
                     "get_inputs() returned a tensor on meta but the run is on cpu"),
}


@pytest.fixture(autouse=True)
def _restore_size_env(monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")  # the loader sets it; keep it from leaking


def _write(tmp_path, text, name="bad.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_failure_is_one_specific_line(case, tmp_path, capsys):
    text, expected = BROKEN[case]
    path = _write(tmp_path, text)
    rc = cli.main(["profile", str(path), "--device", "cpu", "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1, err
    assert err[0].startswith("autokernel profile: error: ")
    assert expected in err[0]


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no_model.py does not exist"):
        load_model(tmp_path / "no_model.py", "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_inputs_on_cuda_without_a_gpu(tmp_path):
    path = _write(tmp_path, GOOD.replace("torch.randn(4, 8)", "torch.randn(4, 8, device='cuda')"))
    with pytest.raises(UserError, match=r"get_inputs\(\) puts tensors on cuda, but torch sees no CUDA GPU here \(bad.py:14\)"):
        load_model(path, "cpu")


def test_a_good_file_loads_on_the_run_device_with_dtype(tmp_path):
    path = _write(tmp_path, GOOD, "good.py")
    loaded = load_model(path, "cpu", dtype="bf16")
    assert loaded.name == "good" and loaded.device == "cpu" and not loaded.model.training
    assert loaded.inputs[0].dtype == torch.bfloat16 and loaded.model.lin.weight.dtype == torch.bfloat16
    assert loaded.forward().shape == (4, 8)
    # the same file twice: two separate modules, no collision
    assert load_model(path, "cpu").module is not loaded.module


def test_factory_form(tmp_path):
    path = _write(tmp_path, """
        import torch
        def get_model_and_inputs():
            return torch.nn.Sequential(torch.nn.Linear(3, 2)), [torch.randn(5, 3)]
    """, "factory.py")
    loaded = load_model(path, "cpu")
    assert loaded.forward().shape == (5, 2)


def test_size_reaches_the_model_file(tmp_path):
    path = _write(tmp_path, GOOD.replace("return [torch.randn(4, 8)]",
                                         "import os\n    return [torch.randn({'small': 2, 'large': 3}[os.environ['AUTOKERNEL_MODEL_SIZE']], 8)]"), "sized.py")
    assert load_model(path, "cpu", size="large").inputs[0].shape[0] == 3
    assert load_model(path, "cpu").inputs[0].shape[0] == 2  # small is the CPU default
    with pytest.raises(UserError, match="unknown size"):
        load_model(path, "cpu", size="huge")


def test_examples_load_small_and_return_what_they_document():
    assert {"llama", "convnet", "vit"} <= set(names())
    with pytest.raises(ValueError, match="known: "):
        example_path("nope")
    llama = load_model(example_path("llama"), "cpu")
    loss, logits = llama.forward()
    assert loss.dim() == 0 and torch.isfinite(loss) and logits.shape[-1] == 1024
    probs = load_model(example_path("convnet"), "cpu").forward()
    assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[0]), atol=1e-5)
    vit = load_model(example_path("vit"), "cpu")
    logits = vit.forward()
    assert logits.shape == (2, 10) and bool(torch.isfinite(logits).all())
    images, keep = vit.inputs
    trimmed = keep.clone()
    trimmed[1, -1] = False  # a padded patch is masked out of attention and pooling: the output moves
    assert not torch.allclose(vit.model(images, trimmed)[1], logits[1])


def _run_cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_real_cli_one_line_then_traceback_with_debug(tmp_path):
    path = _write(tmp_path, BROKEN["forward"][0])
    db = str(tmp_path / "s.db")
    p = _run_cli("profile", str(path), "--device", "cpu", "--db", db)
    assert p.returncode == 2 and p.stdout == ""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert lines == ["autokernel profile: error: forward raised RuntimeError: no forward today (bad.py:11)"]
    p = _run_cli("profile", str(path), "--device", "cpu", "--db", db, "--debug")
    assert p.returncode != 0
    assert "Traceback (most recent call last)" in p.stderr and "no forward today" in p.stderr


def test_real_cli_syntax_error_and_missing_file(tmp_path):
    path = _write(tmp_path, BROKEN["syntax"][0])
    p = _run_cli("profile", str(path), "--db", str(tmp_path / "s.db"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().startswith("autokernel profile: error: bad.py: line 2: SyntaxError")
    p = _run_cli("profile", str(tmp_path / "nothing.py"), "--db", str(tmp_path / "s.db"))
    assert p.returncode == 2 and p.stderr.strip() == f"autokernel profile: error: model file {tmp_path / 'nothing.py'} does not exist"


@pytest.mark.parametrize("name", ["llama", "convnet", "vit"])
def test_large_examples_fit_a_gpu(name, monkeypatch):
    """Built on the meta device (no memory, no time): the large sizes run and stay far under 40 GB."""
    import importlib.util

    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "large")
    spec = importlib.util.spec_from_file_location(f"_large_{name}", example_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = [t.to("meta") for t in module.get_inputs()]
        out = model(*inputs)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weight_bytes < 8e9
    if name == "llama":
        loss, logits = out
        assert loss.shape == () and logits.dtype == torch.bfloat16
        assert logits.shape[0] * logits.shape[1] >= 8192  # tokens per forward: enough to fill an H100
        assert logits.numel() * 2 < 2e9


def test_every_command_takes_an_examples_name_where_it_takes_a_file(tmp_path):
    from autokernel.engine.commands.common import resolve_model_path

    assert resolve_model_path(None) == example_path("llama")
    assert resolve_model_path("llama_hotspots") == example_path("llama_hotspots")
    mine = tmp_path / "mine.py"
    assert resolve_model_path(str(mine)) == mine  # a path stays a path (the loader says it is missing)
    p = _run_cli("optimize", "no_such_example", "--headless", "--device", "cpu", "--db", str(tmp_path / "s.db"))
    assert p.returncode == 2 and "no_such_example does not exist" in p.stderr


def test_a_folder_for_a_model_is_the_same_one_line_in_every_command(tmp_path):
    """`optimize DIR` and `autokernel-tui DIR` said "model file DIR does not exist" of a folder that exists."""
    folder = tmp_path / "models"
    folder.mkdir()
    db = str(tmp_path / "s.db")
    runs = {"profile": _run_cli("profile", str(folder), "--db", db),
            "optimize": _run_cli("optimize", str(folder), "--headless", "--device", "cpu", "--db", db),
            "tui": subprocess.run(["autokernel-tui", str(folder), "--db", db], capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)}
    why = f"{folder} is a folder, not a model file: name the model's .py file"
    for name, p in runs.items():
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and why in p.stderr, (name, p.stderr)
        assert "does not exist" not in p.stderr and "Traceback" not in p.stderr
    assert Store(db).sessions() == []  # refused before a session was recorded for it


def test_inputs_are_drawn_on_the_runs_device_not_moved_there():
    """A problem's multi-GB torch.rand(...) is made where the run is (the meta device stands in for a GPU
    here); one whose get_inputs() cannot run there (a numpy round trip) is drawn as written, on the CPU."""
    import numpy as np

    from autokernel.engine.model_loading import draw_inputs

    made = draw_inputs(lambda: [torch.rand(4096, 393216), 3], "meta")
    assert made[0].device.type == "meta" and made[0].shape == (4096, 393216) and made[1] == 3

    def through_numpy():
        return [torch.from_numpy(np.asarray(torch.arange(6.0).numpy()))]

    (x,) = draw_inputs(through_numpy, "meta")
    assert x.device.type == "cpu" and x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert draw_inputs(lambda: [torch.ones(2)], "cpu")[0].device.type == "cpu"
