"""A lane's child (engine/kernelbench_lanes.py) whose problem runs on the loop's doubles (fake profiler,
worker, agent; the KernelBench check answered from the problem's name), for tests/test_kernelbench_lanes.py.

A problem named `slow` runs until it is stopped or killed, unless $LANE_SLOW_ENDS is set; the fake kernel
types live under $LANE_SPECS."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from loop_doubles import batch_session_factory, install_fake_specs  # noqa: E402

from autokernel.engine.kernelbench_lanes import child_main  # noqa: E402

_doubles = batch_session_factory(delay_s=0.05)


def factory(config, store, listeners):
    if "slow" in Path(config.model_path).stem and not os.environ.get("LANE_SLOW_ENDS"):
        config.max_experiments = 10 ** 6  # ends only when stopped (SIGTERM) or killed
    return _doubles(config, store, listeners)


if __name__ == "__main__":
    with pytest.MonkeyPatch.context() as mp:
        install_fake_specs(mp, Path(os.environ["LANE_SPECS"]), kinds=("fakesoft",))
        sys.exit(child_main(session_factory=factory))
