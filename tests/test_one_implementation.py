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
