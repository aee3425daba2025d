"""`autokernel extract MODEL [--list] [--node NAME | --row N] -o problem.py`: one node or chain of a model as
a standalone KernelBench problem (engine/subgraph.py), so that any profile row can become a target.

`--list` shows the candidates (single nodes, then chains) with their operators and shapes; `--node` takes a
name from that list; `--row N` profiles the model and takes the chain an optimize session would search for
that row (the largest around its nodes with no operator of a kernel-type row; engine/subgraph_targets.py).
Exit 0 on success, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from .common import add_json_flag, print_json, resolve_model_path

HELP = "write one node or chain of a model (a profile row, an op with its epilogue) as a KernelBench problem"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None, help="model file or bundled example name (default: llama)")
    p.add_argument("--list", action="store_true", help="list the nodes and chains that can be extracted")
    p.add_argument("--node", metavar="NAME", help="a candidate's name from --list (e.g. conv2d+add+relu)")
    p.add_argument("--row", metavar="N", type=int, help="the profile row N (as `autokernel profile` numbers them)")
    p.add_argument("-o", "--output", metavar="PROBLEM.py", help="where to write the problem file")
    p.add_argument("--size", choices=("small", "large"), default=None, help="the model's size (default: small on cpu)")
    add_json_flag(p)


def _pick(args: argparse.Namespace, loaded, cands: list) -> tuple:
    """(candidate, how it was chosen) for --node or --row."""
    from .. import subgraph
    from ..subgraph_targets import choose

    if args.node:
        try:
            return subgraph.find(cands, args.node), f"node {args.node}"
        except KeyError:
            near = [c.name for c in cands if args.node in c.name][:4] or [c.name for c in cands][:4]
            raise UserError(f"no node or chain named {args.node!r} (e.g. {', '.join(near)}; --list shows all)") from None
    from ..profiling import profile_model

    if args.row < 1:
        raise UserError(f"--row counts from 1 (got {args.row})")
    result = profile_model(loaded, warmup=1, iters=2)
    if args.row > len(result.rows):
        raise UserError(f"the profile has {len(result.rows)} rows; there is no row {args.row}")
    row = result.rows[args.row - 1]
    hits = subgraph.match_row(cands, row)
    if not hits:
        raise UserError(f"row {args.row} ({row.name}) matches no node of the captured graph")
    # The chain an optimize session would search for this row (grown around it, no kernel-type row's op).
    known = {r.name for r in result.rows if r.kind != "other" and r.name.startswith("aten::")}
    grown = choose(cands, row.to_json(), set(), known)
    return grown or hits[0], f"row {args.row} ({row.name}, {len(hits)} candidate(s))"


def run(args: argparse.Namespace) -> int:
    from .. import subgraph
    from ..model_loading import load_model

    if args.node and args.row is not None:
        raise UserError("give --node or --row, not both")
    if not args.list and not args.node and args.row is None:
        raise UserError("say what to extract: --node NAME or --row N (or --list to see the candidates)")
    if not args.list and not args.output:
        raise UserError("-o PROBLEM.py is required: where to write the problem")
    if args.output and not args.output.endswith(".py"):
        raise UserError(f"{args.output}: the problem file must end in .py")
    path = resolve_model_path(args.model)
    loaded = load_model(path, "cpu", size=args.size)
    try:
        cap = subgraph.capture(loaded.model, list(loaded.inputs))
    except subgraph.SubgraphError as e:
        raise UserError(str(e)) from None
    cands = subgraph.candidates(cap)
    if args.list:
        if args.json:
            print_json({"model": str(path), "captured_by": cap.how, "candidates": [c.__dict__ for c in cands]})
            return 0
        print(f"{path.name}: {len(cands)} candidates (captured by {cap.how})")
        for c in cands:
            where = f"  [{', '.join(c.modules)}]" if c.modules else ""
            print(f"  {c.name:<40} {' + '.join(c.ops):<48} {c.anchor_shapes} -> {', '.join(c.output_shapes)} "
                  f"{'/'.join(c.dtypes)}{where}")
        return 0
    cand, how = _pick(args, loaded, cands)
    try:
        ex = subgraph.write_problem(cap, cand, args.output, path.name)
    except subgraph.SubgraphError as e:
        raise UserError(str(e)) from None
    if args.json:
        print_json({"problem": str(ex.path), "saved": str(ex.saved) if ex.saved else None, "candidate": cand.__dict__,
                    "chosen_by": how})
    else:
        extra = f" (+ {ex.saved.name})" if ex.saved else ""
        print(f"wrote {ex.path}{extra}: {cand.name} ({' + '.join(cand.ops)}), chosen by {how}", file=sys.stderr)
    return 0
