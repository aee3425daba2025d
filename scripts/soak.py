"""A soak (a script, not a test): `autokernel optimize --headless` with the LLM agent against a local
scripted server (scripts/soak_llm.py) for a long while, faults injected on a schedule, then what was
lost, the store's integrity, and how long each fault cost.

    nice -n 10 python3 scripts/soak.py --minutes 60 --out soak-out       # CPU, Triton's interpreter
    python3 scripts/soak.py --minutes 20 --device cuda --out soak-gpu      # a GPU box

Faults: a worker SIGKILLed mid-stage; a candidate that hangs; one that allocates until it cannot; the
LLM server answering garbage, timing out (held past the engine's `--llm-timeout-s`, which the soak sets short
with its own --llm-timeout-s), 429 with Retry-After, dropping the connection; the engine
SIGKILLed (twice) and resumed with `--resume`. At the end the engine is stopped with SIGTERM (a clean
stop, as Ctrl-C), resumed once more to finish the experiment the stop left undecided, and the store is judged
(scripts/soak_ledger.py). Writes soak.json and soak.md under --out; soak.json is rewritten every minute
so a soak cut short still leaves its figures.

On the CPU the engine (and so every worker, which inherits it) runs under RLIMIT_AS (--mem-limit-gb),
so the memory hog meets a MemoryError instead of the host's OOM killer. CUDA reserves more address
space than any sane limit, so on a GPU there is no such limit and the hog fills GPU memory instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soak_ledger import (PRINTED, account, connect_ro, decision_times, integrity, mid_experiment,  # noqa: E402
                         progress, stage_start_times)
from soak_llm import LLM_FAULTS, SoakLLM  # noqa: E402

# Faults per 30 minutes (the engine kills: twice per soak, whatever its length).
RATES = {"worker_kill": 3, "cand_hang": 1, "cand_hog": 1, "llm_garbage": 2, "llm_timeout": 1, "llm_429": 2,
         "llm_drop": 2}
ENGINE_KILLS = 2
MODEL = """import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)


def get_inputs():
    return [torch.randn({rows}, {cols})]
"""


def schedule(minutes: float) -> list[tuple[float, str]]:
    """(seconds from the start, fault) for the whole soak, each kind spread evenly over the run and the
    kinds interleaved, the first and last two minutes (a tenth of a short soak) left alone."""
    total = minutes * 60
    margin = min(120.0, total / 10)
    counts = {k: max(1, round(v * minutes / 30)) for k, v in RATES.items()}
    counts["engine_kill"] = ENGINE_KILLS
    order: list[str] = []
    while any(counts.values()):  # round robin: no kind bunched up
        for kind in sorted(counts, key=lambda k: -counts[k]):
            if counts[kind]:
                order.append(kind)
                counts[kind] -= 1
    step = (total - 2 * margin) / len(order)
    return [(margin + (i + 0.5) * step, kind) for i, kind in enumerate(order)]


def snapshot(folder: Path) -> Path:
    """The committed tree (`git archive HEAD`) under `folder`, laid out as the `autokernel` namespace, so
    the engines of a long soak run one version of the code while the working tree changes. Returns the
    folder to put first on PYTHONPATH."""
    repo = Path(__file__).resolve().parents[1]
    src, pkg = folder / "src", folder / "pkg" / "autokernel"
    src.mkdir(parents=True, exist_ok=True)
    pkg.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    for name in ("engine", "tui", "kernels", "playbook"):
        link = pkg / name
        if not link.exists():
            link.symlink_to(src / name)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    (folder / "COMMIT").write_text(head.stdout)
    return folder / "pkg"


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def workers_of(pid: int) -> list[int]:
    """Our engine's worker processes: its children running `autokernel.engine.worker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == pid and b"autokernel.engine.worker" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class Soak:
    """One soak: the engine processes it starts and resumes, the faults it injects, the samples it takes."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.db = self.out / "sessions.db"
        self.cache = self.out / "cache"
        self.model = self.out / "model.py"
        rows, cols = (64, 512) if args.device == "cpu" else (4096, 8192)
        self.model.write_text(MODEL.format(rows=rows, cols=cols))
        self.llm = SoakLLM(timeout_delay_s=args.llm_timeout_delay_s)
        self.t0 = time.time()
        self.plan = schedule(args.minutes)
        self.faults: list[dict] = []  # {"kind", "at", "detail"}
        self.samples: list[dict] = []
        self.runs: list[dict] = []  # one per engine process
        self.printed: set[tuple[str, int]] = set()
        self.proc: subprocess.Popen | None = None
        self.session_id: str | None = None
        self.killed_by_us = False
        self.orphans: list[dict] = []
        self.code = snapshot(self.out / "code") if args.snapshot else None

    # -- the engine -------------------------------------------------------------------------------
    def _command(self, resume: str | None, max_experiments: int | None = None) -> list[str]:
        cmd = [sys.executable, "-m", "autokernel.engine.cli", "optimize", "--headless", "--device", self.args.device,
               "--api-base", self.llm.api_base, "--db", str(self.db), "--plateau", "1000000", "--no-integrate",
               "--stop-at-ceiling", "0",  # on a GPU the starter is at the ceiling at once: the soak must go on
               "--llm-timeout-s", repr(self.args.llm_timeout_s)]
        if resume:
            cmd += ["--resume", resume]
        else:
            cmd += [str(self.model), "--agent", "openai/soak-model"]
        if max_experiments:
            cmd += ["--max-experiments", str(max_experiments)]
        return cmd

    def _limit(self) -> None:  # runs in the engine's process before exec
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a soak started with `&` would pass on SIGINT ignored
        if self.args.device == "cpu" and self.args.mem_limit_gb:
            cap = int(self.args.mem_limit_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def start(self, resume: str | None, max_experiments: int | None = None) -> None:
        env = dict(os.environ, OPENAI_API_KEY="sk-soak-not-a-real-key", AUTOKERNEL_CACHE_DIR=str(self.cache),
                   PYTHONUNBUFFERED="1")
        if self.code:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.code), env.get("PYTHONPATH")) if p)
        log = (self.out / f"engine-{len(self.runs) + 1}.log").open("w")
        self.proc = subprocess.Popen(self._command(resume, max_experiments), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=self._limit)
        log.close()
        self.killed_by_us = False
        self.runs.append({"n": len(self.runs) + 1, "pid": self.proc.pid, "resume": resume, "started": time.time(),
                          "log": log.name})

    def _session_of_run(self) -> str | None:
        """The session the running (or just ended) engine opened or resumed: the one its pid holds, not merely
        the newest, which is the last engine's until this one has created its own."""
        if self.proc is None:
            return None
        try:
            with connect_ro(self.db) as conn:
                row = conn.execute("SELECT id FROM sessions WHERE kind='optimize' AND pid=? "
                                   "ORDER BY created DESC, id DESC LIMIT 1", [self.proc.pid]).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def ended(self, code: int) -> None:
        """Book an engine exit: its code, whether we caused it, what it printed."""
        run = self.runs[-1]
        run.update(ended=time.time(), code=code, injected=self.killed_by_us)
        text = Path(run["log"]).read_text(errors="replace")
        sid = self.session_id or self._session_of_run()
        run["session"] = sid
        for line in text.splitlines():
            m = PRINTED.match(line)
            if m and sid:
                self.printed.add((sid, int(m.group(1))))
        if code not in (0, 130) and not self.killed_by_us:
            run["tail"] = text.strip().splitlines()[-5:]
        self._reap_orphans(run)

    def _reap_orphans(self, run: dict) -> None:
        """Workers run in a session of their own, so a killed engine's death signals none of them: each
        should end once its pipe breaks. Count those still alive 10 s later, and end them, by pid."""
        pids = run.get("workers", [])
        if not pids:
            return
        time.sleep(10)
        left = [p for p in pids if alive(p)]
        if left:
            self.orphans.append({"run": run["n"], "pids": left, "at": time.time() - self.t0})
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- faults -----------------------------------------------------------------------------------
    def inject(self, kind: str) -> None:
        now = time.time()
        if kind in LLM_FAULTS:
            self.llm.inject(kind)  # its time is when the server serves it (below)
            self.faults.append({"kind": kind, "queued": now - self.t0})
            return
        if kind == "engine_kill":
            run = self.runs[-1]
            run["workers"] = sorted(set(run.get("workers", [])) | set(workers_of(self.proc.pid)))
            self.killed_by_us = True
            self.proc.send_signal(signal.SIGKILL)
            self.faults.append({"kind": kind, "at": now, "detail": f"engine pid {self.proc.pid}"})
            return
        if kind == "worker_kill":
            deadline = now + 90
            while time.time() < deadline:
                pids = workers_of(self.proc.pid) if self.proc.poll() is None else []
                if pids and mid_experiment(self.db):
                    os.kill(pids[0], signal.SIGKILL)
                    self.faults.append({"kind": kind, "at": time.time(), "detail": f"worker pid {pids[0]}"})
                    return
                time.sleep(0.5)
            self.faults.append({"kind": kind, "at": None, "detail": "no worker mid-stage within 90 s: not injected"})

    def sample(self) -> None:
        pid = self.proc.pid if self.proc and self.proc.poll() is None else None
        workers = workers_of(pid) if pid else []
        if pid and self.runs:
            self.runs[-1].setdefault("workers", [])
            self.runs[-1]["workers"] = sorted(set(self.runs[-1]["workers"]) | set(workers))
        sizes = {p.name: p.stat().st_size for p in self.out.glob("sessions.db*") if p.exists()}
        size = sum(sizes.values())
        written, decided = progress(self.db) if self.db.exists() else (0, 0)
        self.samples.append({"t": round(time.time() - self.t0, 1), "engine_rss_kb": rss_kb(pid) if pid else None,
                             "worker_rss_kb": [rss_kb(w) for w in workers], "db_bytes": size,
                             "db_file_bytes": sizes.get("sessions.db", 0), "wal_bytes": sizes.get("sessions.db-wal", 0),
                             "written": written, "decided": decided, "run": len(self.runs)})

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> dict:
        end = self.t0 + self.args.minutes * 60
        plan = list(self.plan)
        self.start(None)
        last_sample = last_dump = 0.0
        crashes_in_a_row = 0
        while time.time() < end:
            code = self.proc.poll()
            if code is not None:
                self.ended(code)
                self.session_id = self.runs[-1]["session"]
                if code == 0:  # the session ended by itself (the agent ran dry): a new one goes on
                    self.start(None)
                    self.session_id = None
                    continue
                crashes_in_a_row = 0 if self.killed_by_us else crashes_in_a_row + 1
                if crashes_in_a_row > 3 or not self.session_id:
                    raise SystemExit(f"soak: the engine keeps failing; see {self.runs[-1]['log']}")
                self.start(self.session_id)
                continue
            if self.session_id is None:
                self.session_id = self._session_of_run()
            now = time.time()
            # An LLM fault waits until the last one was served, so that each meets the agent on its own.
            if plan and now - self.t0 >= plan[0][0] and not (plan[0][1] in LLM_FAULTS and self.llm.pending):
                self.inject(plan.pop(0)[1])
            if now - last_sample >= self.args.sample_s:
                self.sample()
                last_sample = now
            if now - last_dump >= 60:
                self.write(final=False)
                last_dump = now
            time.sleep(0.5)
        return self.close_out()

    def close_out(self) -> dict:
        """Stop cleanly, finish the experiment the stop left, then judge the store."""
        stop = {"sent": time.time()}
        self.sample()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the CLI stops cleanly on it, as on Ctrl-C
            try:
                code = self.proc.wait(self.args.stop_wait_s)
            except subprocess.TimeoutExpired:
                self.killed_by_us = True
                self.proc.send_signal(signal.SIGKILL)
                code = self.proc.wait()
                stop["not_honoured"] = True
        else:
            code = self.proc.returncode
        self.ended(code)
        stop.update(code=code, seconds=round(time.time() - stop["sent"], 1))
        self.session_id = self.runs[-1]["session"]
        written, _ = progress(self.db)
        if self.session_id:  # no new experiment: only the one the stop cut is finished
            self.start(self.session_id, max_experiments=max(written, 1))
            self.ended(self.proc.wait())
        return self.write(final=True, stop=stop)

    # -- the report -------------------------------------------------------------------------------
    def write(self, final: bool, stop: dict | None = None) -> dict:
        served = list(self.llm.served)
        events = [{"kind": f["kind"], "at": f["at"], "detail": f.get("detail", "")} for f in self.faults if "at" in f]
        events += [{"kind": k, "at": t, "detail": "served by the LLM server"} for t, k in served]
        events.sort(key=lambda f: f["at"] or 0)
        times = decision_times(self.db) if self.db.exists() else []
        starts = stage_start_times(self.db) if self.db.exists() else []
        def after(at: float | None, times: list[float]) -> float | None:
            """Seconds from `at` to the first of `times` after it."""
            later = [t for t in times if at and t > at]
            return round(min(later) - at, 1) if later else None

        for f in events:
            f["to_next_experiment_s"] = after(f["at"], [d for w, d in times if f["at"] and w > f["at"]])
            f["to_next_stage_s"] = after(f["at"], starts)
            f["at"] = round(f["at"] - self.t0, 1) if f["at"] else None
        per_kind: dict[str, int] = {}
        for f in events:
            if f["at"] is not None:
                per_kind[f["kind"]] = per_kind.get(f["kind"], 0) + 1
        crashes = [r for r in self.runs if "code" in r and r["code"] not in (0, 130) and not r["injected"]]
        result = {
            "command": " ".join(sys.argv), "commit": (self.code.parent / "COMMIT").read_text().strip()
            if self.code else None, "device": self.args.device, "machine": machine(),
            "minutes": self.args.minutes, "elapsed_s": round(time.time() - self.t0, 1), "final": final,
            "llm_timeout_s": self.args.llm_timeout_s, "llm_timeout_delay_s": self.args.llm_timeout_delay_s,
            "faults_injected": per_kind, "faults_queued_not_served": len(self.llm.pending),
            "faults": events, "engine_runs": self.runs, "engine_crashes": len(crashes),
            "orphaned_workers": self.orphans, "llm_requests": self.llm.requests, "llm_good_answers": self.llm.answers,
            "samples": self.samples, "stop": stop,
        }
        if final:
            result["ledger"] = account(self.db, self.cache, self.printed)
            result["integrity_check"] = integrity(self.db)
        (self.out / "soak.json").write_text(json.dumps(result, indent=1, default=str))
        if final:
            (self.out / "soak.md").write_text(markdown(result))
        return result


def machine() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    return f"{os.cpu_count()}-core {model}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def markdown(r: dict) -> str:
    led = r["ledger"]
    s = [x for x in r["samples"] if x["engine_rss_kb"]]
    first, last = (s[0], s[-1]) if s else ({}, {})
    rss = [x["engine_rss_kb"] / 1024 for x in s]
    warm = next((x["engine_rss_kb"] / 1024 for x in s if x["t"] >= 300), rss[-1] if rss else 0)
    lines = [
        f"# Soak: {r['minutes']:g} minutes on {r['device']}", "",
        f"- command: `{r['command']}`", f"- machine: {r['machine']}",
        f"- elapsed: {r['elapsed_s'] / 60:.1f} min, {len(r['engine_runs'])} engine processes",
        f"- LLM request timeout: {r['llm_timeout_s']:g} s (a timed-out request is held {r['llm_timeout_delay_s']:g} s)"
        if r.get("llm_timeout_s") else None, "",
        "| figure | value |", "|---|---|",
        f"| experiments completed (decided) | {led['decided']} of {led['written']} written |",
        f"| engine crashes besides the injected kills | {r['engine_crashes']} |",
        f"| events lost (undecided, numbering or seq gaps, files or printed lines not in the store) | {led['lost']} |",
        f"| store integrity_check | {r['integrity_check']} |",
        f"| workers left alive 10 s after their engine was killed | {sum(len(o['pids']) for o in r['orphaned_workers'])} |",
        f"| engine RSS at 5 min / max / last sample | {warm:.0f} / {max(rss):.0f} / {rss[-1]:.0f} MiB |" if rss else "| engine RSS | no sample |",
        f"| SQLite size (db+wal) first / last sample | {first.get('db_bytes', 0) / 1024:.0f} / {last.get('db_bytes', 0) / 1024:.0f} KiB |",
        f"| of which the database file itself (the WAL is checkpointed into it every ~4 MB) | "
        f"{first.get('db_file_bytes', 0) / 1024:.0f} / {last.get('db_file_bytes', 0) / 1024:.0f} KiB |",
        f"| clean stop at the end (SIGTERM) | exit {r['stop']['code']} after {r['stop']['seconds']} s |" if r["stop"] else "",
        "", "Faults injected per kind: " + ", ".join(f"{k} {v}" for k, v in sorted(r["faults_injected"].items())), "",
        "| at (s) | fault | detail | to the next stage started (s) | to the next experiment decided (s) |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {f['at']} | {f['kind']} | {f['detail']} | {f.get('to_next_stage_s')} | {f['to_next_experiment_s']} |"
              for f in r["faults"]]
    lines += ["", "Samples (every few minutes): t (s), engine RSS (MiB), SQLite bytes, experiments decided", ""]
    step = max(1, len(s) // 12)
    lines += [f"- {x['t']:.0f}: {x['engine_rss_kb'] / 1024:.0f} MiB, {x['db_bytes']} B, {x['decided']}" for x in s[::step]]
    return "\n".join(line for line in lines if line is not None) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="how long the faults run (default 60)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", default="soak-out", help="folder for the database, logs, soak.json and soak.md")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples of RSS and store size")
    p.add_argument("--mem-limit-gb", type=float, default=4.0, help="RLIMIT_AS of the engine and its workers (CPU)")
    p.add_argument("--llm-timeout-s", type=float, default=20.0,
                   help="the engine's LLM request timeout (its --llm-timeout-s; default 20, so that each timed-out "
                        "request costs the soak seconds, not the agent's default 300 s)")
    p.add_argument("--llm-timeout-delay-s", type=float, default=None,
                   help="how long the server sits on a timed-out request (default: the timeout plus 10 s)")
    p.add_argument("--snapshot", action="store_true",
                   help="run the engine from a copy of the committed tree (git archive HEAD), not the working tree")
    p.add_argument("--stop-wait-s", type=float, default=600.0, help="how long the final clean stop may take")
    args = p.parse_args()
    if args.minutes <= 0:
        raise SystemExit("soak: --minutes must be positive")
    if args.llm_timeout_s <= 0:
        raise SystemExit("soak: --llm-timeout-s must be positive")
    if args.llm_timeout_delay_s is None:
        args.llm_timeout_delay_s = args.llm_timeout_s + 10.0
    if args.llm_timeout_delay_s <= args.llm_timeout_s:
        raise SystemExit("soak: --llm-timeout-delay-s must be longer than --llm-timeout-s (else nothing times out)")
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        if soak.proc is not None and soak.proc.poll() is None:
            soak.proc.kill()
        soak.llm.close()
    led = result["ledger"]
    print(f"soak: {led['decided']} experiments, {result['engine_crashes']} crashes, {led['lost']} lost, "
          f"integrity {result['integrity_check']}; {soak.out / 'soak.md'}")


if __name__ == "__main__":
    main()
