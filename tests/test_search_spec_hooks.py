"""The search asks every target's spec the same questions; a kernel type and a whole problem answer them
differently, so the search itself has no case for whole problems (issue 23)."""

from __future__ import annotations

from autokernel.engine.problem_spec import MODEL_SEED, problem_brief
from autokernel.kernels import get_spec

SEED_SOURCE = "K0_XBLOCK = 64\nK0_WARPS = 4\n\nclass ModelNew(Model):\n    pass\n"


def test_a_kernel_type_starts_from_its_starter_and_needs_nothing_else(tmp_path):
    spec = get_spec("softmax")
    assert spec.starter_required and spec.first_parent() is None
    assert spec.starter_params(SEED_SOURCE) == {} and spec.worker_args("large") == {} and spec.agent_problem() == ""


def test_a_whole_problem_starts_from_its_model_and_the_worker_builds_it_from_its_file(tmp_path):
    path = tmp_path / "problem.py"
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n")
    brief = problem_brief(path)
    assert not brief.starter_required  # an agent that writes ModelNew needs no seed
    cid, label, source = brief.first_parent()
    assert cid == MODEL_SEED and source == path.read_text() and "Model" in label
    assert brief.starter_params(SEED_SOURCE) == {"K0_XBLOCK": 64, "K0_WARPS": 4}  # a seed's constants
    assert brief.starter_params(path.read_text()) == {}
    assert brief.worker_args("small") == {"problem": str(path.resolve()), "size": "small"}
    assert brief.agent_problem() == str(path.resolve())
