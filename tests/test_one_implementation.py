"""One Triton implementation per kernel type: a playbook candidate is the type's starter with other values
for its knob constants, so the starter is the template at its defaults and a move is a one-line diff."""

from __future__ import annotations

import pytest

from autokernel.playbook.templates._source import set_constants


def test_set_constants_moves_one_line_constants_and_keeps_their_comments():
    source = "import triton\n\nNUM_WARPS = 8  # tier 1, launch shape\nLOAD_EVICTION: str = 'evict_last'\nROWS = 1\n"
    out = set_constants(source, {"NUM_WARPS": 4, "LOAD_EVICTION": ""})
    assert out == "import triton\n\nNUM_WARPS = 4  # tier 1, launch shape\nLOAD_EVICTION: str = ''\nROWS = 1\n"


@pytest.mark.parametrize("source", ["ROWS = 1\n", "TILES = [\n    (64, 64),\n]\n", "def f():\n    NUM_WARPS = 8\n"])
def test_a_knob_the_source_does_not_define_on_one_line_is_an_error(source):
    with pytest.raises(KeyError, match="NUM_WARPS|TILES"):
        set_constants(source, {"NUM_WARPS": 4} if "TILES" not in source else {"TILES": [(32, 32)]})


def _starter_ctx(kernel, history=()):
    from autokernel.engine.agents.base import AgentContext, Measurement
    from autokernel.kernels import get_spec

    source = get_spec(kernel).starters["triton"].read_text()
    m = Measurement(f"{kernel}-0001", "starter", True, kernel_ms=0.05, speedup_eager=2.0, params={})
    return AgentContext(kernel=kernel, backend="triton", device="cuda", device_name="H100",
                        shape={"rows": 8192, "cols": 4096}, dtype="bf16", parent_id=m.candidate_id,
                        parent_source=source, parent_params={}, parent_measurement=m, best=m, pool=[],
                        history=list(history), round=1, max_ideas=4, max_variants=3)


@pytest.mark.parametrize("kernel", ["rmsnorm", "softmax"])
def test_the_starter_is_the_template_at_its_defaults_and_its_knobs_move_from_there(kernel):
    from autokernel.engine.agents.base import Measurement, Tried
    from autokernel.engine.agents.playbook import PlaybookAgent
    from autokernel.playbook.templates import get_template

    template = get_template(kernel)
    source = _starter_ctx(kernel).parent_source
    assert template.render(template.DEFAULTS) == source
    first = PlaybookAgent().propose(_starter_ctx(kernel))
    assert first[0].title == f"First launch shapes for the {kernel} starter"
    assert all(v.source != source for v in first[0].variants)  # never the starter again
    # None of the first guesses beat the starter: the agent moves the starter's own knobs, it does not stop.
    done, later = [], first
    for _ in range(5):
        if not later or not later[0].title.startswith("First launch shapes"):
            break
        done += [Tried(1, later[0].title, later[0].hypothesis, f"{kernel}-0001",
                       [Measurement(f"c{len(done)}{j}", v.label, True, kernel_ms=0.06, params=v.params)
                        for j, v in enumerate(later[0].variants)])]
        later = PlaybookAgent().propose(_starter_ctx(kernel, done))
    assert later and all(not i.title.startswith("First launch shapes") for i in later)
    for idea in later:
        for v in idea.variants:  # one knob moved away from the defaults
            assert sum(v.params[k] != template.DEFAULTS[k] for k in template.DEFAULTS) == 1
