"""`autokernel profile` and `autokernel sessions` through the real CLI: JSON shape, ranking, the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autokernel.engine import cli
from autokernel.engine.store import Store

ROW_KEYS = {"name", "kind", "calls", "shapes", "self_ms", "share", "floor_ms", "max_speedup"}


def _cli(*args, cache=None):
    env = dict(os.environ, **({"AUTOKERNEL_CACHE_DIR": str(cache)} if cache else {}))
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *args], capture_output=True, text=True,
                          env=env, timeout=180)


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    """One real profile of the bundled Llama example, shared by the tests below."""
    base = tmp_path_factory.mktemp("profile_cli")
    db = base / "sessions.db"
    p = _cli("profile", "--device", "cpu", "--json", "--db", str(db), "--iters", "2", "--warmup", "1", cache=base / "cache")
    return p, db


def test_json_document(llama_run):
    p, _ = llama_run
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # stdout is exactly one JSON document, progress went to stderr
    assert doc["device"] == "cpu" and doc["total_ms"] > 0 and doc["device_name"]
    assert doc["model"].endswith("llama.py")
    assert doc["rows"], "no rows"
    for row in doc["rows"]:
        assert ROW_KEYS <= set(row)
        assert 0 <= row["share"] <= 1 and row["self_ms"] >= 0 and row["floor_ms"] >= 0
        assert row["max_speedup"] >= 1
    assert sum(r["share"] for r in doc["rows"]) <= 1 + 1e-9
    speedups = [r["max_speedup"] for r in doc["rows"]]
    assert speedups == sorted(speedups, reverse=True)
    kinds = {r["kind"] for r in doc["rows"]}
    assert {"matmul", "rmsnorm", "flash_attention", "fused_mlp", "rotary_embedding", "cross_entropy"} <= kinds


def test_stderr_has_no_kineto_lines(llama_run):
    """Every profile printed torch's `USDT: ... profiler_start/stop` lines: not the user's business."""
    p, _ = llama_run
    assert p.returncode == 0, p.stderr
    assert "USDT" not in p.stderr and "profiler_st" not in p.stderr and "External init callback" not in p.stderr


def test_session_is_stored_and_listed(llama_run):
    p, db = llama_run
    doc = json.loads(p.stdout)
    s = _cli("sessions", "--json", "--db", str(db))
    assert s.returncode == 0, s.stderr
    listed = json.loads(s.stdout)
    entry = next(e for e in listed if e["id"] == doc["session"])
    assert entry["kind"] == "profile" and entry["status"] == "completed" and entry["events"] == 3
    assert entry["holds"] == f"profile: {doc['total_ms']:.4g} ms per forward, top {doc['rows'][0]['name']}"
    assert entry["model"].endswith("llama.py")
    store = Store(db)
    types = [e.type for _, e in store.events(doc["session"])]
    assert types == ["session_started", "profile_ready", "session_done"]
    ready = store.events(doc["session"], types=["profile_ready"])[0][1]
    assert ready.rows == doc["rows"] and ready.total_ms == doc["total_ms"]
    store.close()


def test_table_and_newest_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")
    db = str(tmp_path / "s.db")
    trace = tmp_path / "trace.json"
    for extra in (["--trace", str(trace)], []):
        assert cli.main(["profile", "convnet", "--device", "cpu", "--db", db, "--iters", "1", "--warmup", "0", *extra]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::conv2d" for e in events)
    out = capsys.readouterr().out
    assert "aten::conv2d" in out and "share" in out
    assert cli.main(["sessions", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 2 and listed[0]["created"] >= listed[1]["created"]
    assert cli.main(["sessions", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "profile: one `autokernel profile` run" in table and table.count("ms per forward, top") == 2


def test_a_failed_load_is_a_failed_session(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_MODEL_SIZE", "small")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self):\n        return 1/0\n"
                   "def get_inputs():\n    return []\n")
    db = str(tmp_path / "s.db")
    assert cli.main(["profile", str(bad), "--db", db]) == 2
    capsys.readouterr()
    store = Store(db)
    (session,) = store.sessions()
    assert session["status"] == "failed"
    types = [e.type for _, e in store.events(session["id"])]
    assert types == ["session_started", "error", "session_done"]
    store.close()


def test_model_prints_stay_off_stdout_with_json(tmp_path):
    chatty = tmp_path / "chatty.py"
    chatty.write_text("import torch\nprint('hello from import')\n"
                      "class Model(torch.nn.Module):\n    def forward(self, x):\n        print('hi')\n        return torch.softmax(x, -1)\n"
                      "def get_inputs():\n    return [torch.randn(8, 16)]\ndef get_init_inputs():\n    return []\n")
    p = _cli("profile", str(chatty), "--json", "--db", str(tmp_path / "s.db"), "--iters", "1", "--warmup", "0",
             cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["kind"] for r in doc["rows"]] == ["softmax"] and "hello from import" in p.stderr


def test_bad_flags_are_one_line(tmp_path, capsys):
    assert cli.main(["profile", "--iters", "0", "--db", str(tmp_path / "s.db")]) == 2
    assert "--iters must be at least 1" in capsys.readouterr().err
