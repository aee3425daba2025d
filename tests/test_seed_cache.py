"""A problem's Inductor seed is made once per problem text, size and versions: asked again (a resumed or repeated
batch, a seed made ahead while the previous problem ran) it is a copy from the seed cache, and two askers at once
make it once. A batch beside a GPU asks for its next problems' seeds as each problem starts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autokernel.engine import seeding
from autokernel.engine.kernelbench import BatchConfig, KernelBenchBatch, discover
from autokernel.engine.seed_prefetch import SeedPrefetch
from autokernel.engine.seeding import CHANNELS_LAST, seed_problem, seed_variants
from autokernel.engine.store import Store

from loop_doubles import batch_session_factory, install_fake_specs

PROBLEMS = Path(__file__).parent / "kernelbench_problems"
CONV = PROBLEMS / "level2" / "6_conv_bias_relu.py"  # its seed has a channels-last variant
LOG_SOFTMAX = PROBLEMS / "level1" / "5_log_softmax.py"


def _counting(monkeypatch) -> list:
    made = []
    real = seeding._generate

    def generate(problem, *args):
        made.append(Path(problem).name)
        return real(problem, *args)

    monkeypatch.setattr(seeding, "_generate", generate)
    return made


def test_a_seed_is_made_once_and_copied_with_its_variant_after(tmp_path, monkeypatch):
    made = _counting(monkeypatch)
    answers = {}

    def ask(name):
        answers[name] = seed_problem(CONV, tmp_path / name / "inductor_seed.py", "small")

    askers = [threading.Thread(target=ask, args=(n,)) for n in ("a", "b")]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    assert made == [CONV.name]  # the second asker waited for the first, then copied
    first = tmp_path / "a" / "inductor_seed.py"
    assert answers["a"] == (first, "") and answers["b"] == (tmp_path / "b" / "inductor_seed.py", "")
    assert (tmp_path / "b" / "inductor_seed.py").read_text() == first.read_text()
    assert set(seed_variants(first)) == {CHANNELS_LAST} == set(seed_variants(tmp_path / "b" / "inductor_seed.py"))

    cached = []
    out = tmp_path / "c" / "seed.py"
    assert seed_problem(CONV, out, "small", on_cached=lambda: cached.append(1)) == (out, "")
    assert made == [CONV.name] and cached == [1]
    assert out.read_text() == first.read_text()
    assert Path(seed_variants(out)[CHANNELS_LAST]).read_text() == Path(seed_variants(first)[CHANNELS_LAST]).read_text()


def test_the_key_changes_with_the_problem_and_the_size(tmp_path):
    twin = tmp_path / CONV.name
    twin.write_text(CONV.read_text())
    changed = tmp_path / "changed.py"
    changed.write_text(CONV.read_text().replace("def get_inputs", "# one more line\ndef get_inputs", 1))
    key = seeding._cache_key(CONV, "small")
    assert seeding._cache_key(twin, "small") == key  # the text decides, not where the file is
    assert seeding._cache_key(changed, "small") != key
    assert seeding._cache_key(CONV, "large") != key
    assert seeding._cache_key(tmp_path / "missing.py", "small") is None


def test_a_read_only_cache_still_seeds(tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(blocked))
    out = tmp_path / "seed.py"
    assert seed_problem(LOG_SOFTMAX, out, "small") == (out, "")


def test_a_batch_makes_the_next_problems_seed_while_one_runs(tmp_path, monkeypatch):
    install_fake_specs(monkeypatch, tmp_path)
    problems, _ = discover([PROBLEMS / "level1" / "3_row_sum.py", LOG_SOFTMAX])
    made = _counting(monkeypatch)
    key = seeding._cache_key(LOG_SOFTMAX, "small")

    def started(i, problem):  # the last problem starts once the seed asked for ahead is in the cache
        if i == 1:
            deadline = time.monotonic() + 300
            while not (seeding._cache_root() / key / "seed.py").is_file() and time.monotonic() < deadline:
                time.sleep(0.2)

    config = BatchConfig(device="cpu", max_experiments=1, prefetch_seeds=True)
    batch = KernelBenchBatch(problems, config, Store(tmp_path / "s.db"), on_start=started,
                             session_factory=batch_session_factory())
    batch.run()
    assert made == [LOG_SOFTMAX.name]  # asked for when the first problem started
    out = tmp_path / "later" / "seed.py"
    monkeypatch.setattr(seeding, "_generate", lambda *a: pytest.fail("the seed was made again"))
    assert seed_problem(LOG_SOFTMAX, out, "small") == (out, "")


def test_a_seed_under_way_ends_with_the_batch(tmp_path):
    ahead = SeedPrefetch("small")
    spawned = []
    real = ahead._spawned
    ahead._spawned = lambda proc: (spawned.append(proc), real(proc))
    ahead.ask([LOG_SOFTMAX, LOG_SOFTMAX])  # asked twice, made once
    deadline = time.monotonic() + 120
    while not spawned and time.monotonic() < deadline:
        time.sleep(0.05)
    ahead.close()
    (proc,) = spawned
    assert proc.wait(timeout=60) != 0  # killed, not finished
    ahead.ask([CONV])  # a closed prefetch asks for nothing more
    time.sleep(0.5)
    assert len(spawned) == 1
