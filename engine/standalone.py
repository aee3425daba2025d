"""Several Python sources as one self-contained module: what a KernelBench submission must be.

A scored `model_new.py` holds the problem's code, the patcher and each kept kernel in one file, with
nothing loaded from a path. Each source is rewritten through `ast`: its docstrings go (a KernelBench
static check reads prose such as "the forward pass" as a `pass` statement), its top-level names that
another source binds differently get a prefix (two kernels both define `kernel_fn` and `_warps`), and
references to them follow, scope by scope, so the code computes exactly what it did alone. A kernel that
imports the starters' shared Triton helpers gets their code written in first (`inline_triton_common`).
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass, field
from pathlib import Path

# The shared Triton helpers a starter imports (kernels/triton_common.py): a file that must stand alone gets
# their text instead of the import (`inline_triton_common`).
TRITON_COMMON = "autokernel.kernels.triton_common"

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Part:
    """One source to inline. `prefix` renames its clashing names (None: its names are kept, as the
    problem's `Model` and `get_inputs` must be); `rename` names always renamed; `strip_try` keeps a
    try statement's body and drops its handlers (only for code whose handlers cannot run there)."""

    label: str
    source: str
    prefix: str | None = None
    rename: tuple[str, ...] = ()
    strip_try: bool = False
    future: bool = True  # whether its `from __future__` names apply to the whole file (else they are dropped)
    names: dict[str, str] = field(default_factory=dict)  # filled by `combine`: old name -> name in the file


def _binding(node: ast.stmt, alias: ast.alias | None = None) -> str:
    """What a top-level statement binds a name to, as far as two sources can agree on it: the same
    import binds the same thing; anything else is a definition of its own."""
    if isinstance(node, ast.Import):
        return f"import {alias.name}"
    if isinstance(node, ast.ImportFrom):
        return f"from {'.' * node.level}{node.module} import {alias.name}"
    return f"def {id(node)}"


def top_level_names(tree: ast.Module) -> dict[str, str]:
    """{name: binding} of every name a module's top level binds (inside top-level if/try/with/for too)."""
    names: dict[str, str] = {}
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, _binding(node))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    names.setdefault(a.asname or a.name.split(".")[0], _binding(node, a))
        else:
            for sub in _scope_children([node]):
                if sub is not node and isinstance(sub, (ast.stmt, ast.ExceptHandler)):
                    continue
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.setdefault(sub.id, _binding(node))
            todo[:0] = [c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.ExceptHandler))]
    return names


def _scope_children(nodes):
    """The nodes of one scope: nested function, class, lambda and comprehension bodies left out."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(node.decorator_list)
            continue
        if isinstance(node, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _local_names(node) -> set[str]:
    """The names local to a function, lambda, class body or comprehension (minus `global` ones)."""
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        names |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        body = [g.target for g in node.generators]
    elif isinstance(node, ast.Lambda):
        body = [node.body]
    else:
        body = node.body
    declared = set()
    for child in _scope_children(body):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            names.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in child.names}
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
        elif isinstance(child, ast.Nonlocal):
            names |= set(child.names)
        elif isinstance(child, ast.Global):
            declared |= set(child.names)
    return names - declared


class _Rewrite(ast.NodeTransformer):
    """Renames references to the module's own globals, drops docstrings, optionally unwraps try."""

    def __init__(self, mapping: dict[str, str], strip_try: bool):
        self.mapping, self.strip_try = mapping, strip_try
        self.scopes: list[tuple[bool, set[str]]] = []  # (is a class body, its local names)

    def _global(self, name: str) -> bool:
        for depth, (is_class, names) in enumerate(reversed(self.scopes)):
            if is_class and depth > 0:  # a class body's names are not seen from its methods
                continue
            if name in names:
                return False
        return True

    def _new(self, name: str) -> str:
        return self.mapping.get(name, name) if self._global(name) else name

    def visit_Name(self, node):
        node.id = self._new(node.id)
        return node

    def visit_Global(self, node):
        node.names = [self.mapping.get(n, n) for n in node.names]
        return node

    def _body(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:] or [ast.Expr(ast.Constant(...))]
        return body

    def visit_Module(self, node):
        node.body = self._body(node)
        return self.generic_visit(node)

    def _import(self, node):
        for a in node.names:
            bound = a.asname or a.name.split(".")[0]
            if bound in self.mapping and self._global(bound):
                if a.asname is None and "." in a.name:
                    raise ValueError(f"cannot rename the package bound by `import {a.name}`")
                a.asname = self.mapping[bound]
        return node

    visit_Import = visit_ImportFrom = _import

    def _function(self, node):
        outer = self.scopes == []
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        if isinstance(node, ast.ClassDef):
            node.bases = [self.visit(b) for b in node.bases]
            node.keywords = [self.visit(k) for k in node.keywords]
        else:
            node.args = self.visit(node.args)  # defaults and annotations: evaluated where the def is
            if node.returns is not None:
                node.returns = self.visit(node.returns)
        if outer:
            node.name = self.mapping.get(node.name, node.name)
        node.body = self._body(node)
        self.scopes.append((isinstance(node, ast.ClassDef), _local_names(node)))
        node.body = [r for stmt in node.body for r in _as_list(self.visit(stmt))]
        self.scopes.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _function

    def visit_Lambda(self, node):
        node.args = self.visit(node.args)
        self.scopes.append((False, _local_names(node)))
        node.body = self.visit(node.body)
        self.scopes.pop()
        return node

    def _comprehension(self, node):
        self.scopes.append((False, _local_names(node)))
        node = self.generic_visit(node)
        self.scopes.pop()
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Try(self, node):
        if not self.strip_try:
            return self.generic_visit(node)
        return [r for stmt in node.body + node.orelse + node.finalbody for r in _as_list(self.visit(stmt))]


def _as_list(result):
    return result if isinstance(result, list) else [result]


def _future(tree: ast.Module) -> tuple[list[str], ast.Module]:
    """The `from __future__` names of a module, and the module without those lines."""
    names = [a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__" for a in n.names]
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    return names, tree


def combine(parts: list[Part]) -> tuple[list[str], list[str]]:
    """(the `from __future__` names the parts ask for, one rewritten source per part), each part's
    `names` filled with where its top-level names went. Parts without a prefix keep their names and
    claim them first; a prefixed part renames a name another part binds differently, and its `rename`
    names always. SyntaxError for a source that does not parse."""
    trees = [ast.parse(p.source, filename=p.label) for p in parts]
    futures: list[str] = []
    taken: dict[str, str] = {}
    for p, tree in zip(parts, trees):
        if p.prefix is None:
            taken.update(top_level_names(tree))
    texts = []
    for p, tree in zip(parts, trees):
        names, tree = _future(tree)
        if p.future:
            futures += [n for n in names if n not in futures]
        bound = top_level_names(tree)
        mapping: dict[str, str] = {}
        if p.prefix is not None:
            for name, binding in bound.items():
                if name in p.rename or (name in taken and taken[name] != binding):
                    new = f"{p.prefix}{name}"
                    while new in taken or new in bound:
                        new = "_" + new
                    mapping[name] = new
            for name, binding in bound.items():
                taken[mapping.get(name, name)] = binding
        p.names = {name: mapping.get(name, name) for name in bound}
        tree = ast.fix_missing_locations(_Rewrite(mapping, p.strip_try).visit(tree))
        texts.append(ast.unparse(tree))
    return futures, texts


def inline_triton_common(source: str) -> str:
    """`source` with its top-level `from autokernel.kernels.triton_common import ...` replaced by that module's
    code (docstrings left out), so it needs no autokernel: the first such import gets the code, each a line
    `alias = name` for a name it imports under another. A helper whose name the source binds to something
    else of its own is renamed in the inlined code, so the source's names mean what they meant."""
    if TRITON_COMMON not in source:  # the cheap test before any parsing
        return source
    tree = ast.parse(source)
    hits = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module == TRITON_COMMON]
    if not hits:
        return source
    from autokernel.kernels import triton_common

    shared = ast.parse(Path(triton_common.__file__).read_text())
    theirs = top_level_names(shared)
    ours = top_level_names(ast.Module(body=[n for n in tree.body if n not in hits], type_ignores=[]))
    mapping: dict[str, str] = {}
    for name, binding in theirs.items():
        if name in ours and ours[name] != binding:
            new = f"_triton_common_{name}"
            while new in ours or new in theirs:
                new = "_" + new
            mapping[name] = new
    code = ast.unparse(ast.fix_missing_locations(_Rewrite(mapping, strip_try=False).visit(shared))) + "\n"
    lines = io.StringIO(source, newline="").readlines()  # split where ast counts lines, endings kept
    for node in reversed(hits):  # from the last up, so the earlier imports' line numbers still hold
        aliases = [(a.asname or a.name, mapping.get(a.name, a.name)) for a in node.names if a.name != "*"]
        block = (code if node is hits[0] else "") + "".join(f"{new} = {old}\n" for new, old in aliases if new != old)
        lines[node.lineno - 1:node.end_lineno] = [block]
    return "".join(lines)
