"""One score from several KernelBench batches: a sample too long for one lent GPU session runs as chunks
(`KB_PROBLEMS=<some of the sample> scripts/gpu_suite.sh kbeval`, one chunk per session), and this merges their
`--json` documents into the table and fast_p one batch over all of them would print.

    python scripts/kb_merge.py chunk1/kb_batch.json chunk2/kb_batch.json -o sample.json

A problem in two chunks is an error (the score would count it twice); the chunks' devices and agents must agree.
A rerun of some problems of the chunks (after a fix, with the same settings) replaces their rows:

    python scripts/kb_merge.py chunk1/kb_batch.json --rerun fixed/kb_batch.json -o sample.json

A batch that reran some problems of the chunks and also ran a new chunk is a rerun with `--rerun-adds` (its rows
of problems in no chunk are added). Chunks from different GPUs are refused unless `--mixed-devices` (each row's
speedup is then against eager and torch.compile on its own GPU; the document lists every device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autokernel.engine.kernelbench import ProblemResult, fast_p, status_counts, ties


def merge(docs: list[dict], reruns: list[dict] = (), adds: bool = False, mixed_devices: bool = False) -> dict:
    """The merged document: every chunk's rows (a rerun's row in place of its problem's; with `adds`, a rerun's
    rows of new problems appended), fast_p and statuses over all of them, and each chunk's and rerun's command."""
    devices = sorted({str(d.get("device")) for d in [*docs, *reruns]})
    for key in ("agent",) if mixed_devices else ("device", "agent"):
        seen = {d.get(key) for d in [*docs, *reruns]}
        if len(seen) > 1:
            raise ValueError(f"the chunks ran with different {key}s: {sorted(map(str, seen))}")
    rows = [ProblemResult.from_json(p) for d in docs for p in d["problems"]]
    paths = [r.path for r in rows]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        raise ValueError(f"a problem is in more than one chunk: {twice[0]}")
    again = {r.path: r for r in (ProblemResult.from_json(p) for d in reruns for p in d["problems"])}
    known = set(paths)
    unknown = [path for path in again if path not in known]
    if unknown and not adds:
        raise ValueError(f"a rerun problem is in no chunk: {sorted(unknown)[0]} (--rerun-adds to add it)")
    rows = [again.get(r.path, r) for r in rows] + [again[path] for path in unknown]
    finished = [r for r in rows if r.status != "stopped"]
    return {"problems": [r.to_json() for r in rows], "fast_p": fast_p(finished), "fast_1_ties": ties(finished),
            "statuses": status_counts(r.status for r in rows), "counted": len(finished),
            "total": sum(d.get("total", len(d["problems"])) for d in docs) + len(unknown),
            "complete": all(d.get("complete") for d in docs),
            "meaningful": all(d.get("meaningful") for d in docs),
            "device": devices[0] if len(devices) == 1 else devices,
            "agent": docs[0].get("agent"), "chunks": [d.get("command") for d in docs],
            "reruns": [d.get("command") for d in reruns], "rerun_problems": len(again)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("batches", nargs="+", help="the JSON documents of `autokernel kernelbench ... --json`")
    p.add_argument("--rerun", action="append", default=[], metavar="JSON",
                   help="a batch that ran some of the chunks' problems again: its rows replace theirs")
    p.add_argument("--rerun-adds", action="store_true", help="a rerun's problems in no chunk are added, not refused")
    p.add_argument("--mixed-devices", action="store_true", help="chunks from different GPUs may be merged")
    p.add_argument("-o", "--out", required=True)
    args = p.parse_args(argv)
    try:
        merged = merge([json.loads(Path(b).read_text()) for b in args.batches],
                       [json.loads(Path(b).read_text()) for b in args.rerun], args.rerun_adds, args.mixed_devices)
    except (OSError, ValueError, KeyError) as e:
        print(f"kb_merge: {e}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(merged, indent=1))
    print(f"{merged['counted']} of {merged['total']} problems; statuses "
          f"{ {k: v for k, v in merged['statuses'].items() if v} }; fast_p eager {merged['fast_p']['eager']}, "
          f"compile {merged['fast_p']['compile']}; fast_1.0 ties within 2% {merged['fast_1_ties']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
