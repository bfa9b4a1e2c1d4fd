"""The package reads as the chain: each subpackage imports only from those before it.

arch (what a network is) -> latency (what it costs) -> data (what a run reads) -> runs
(how a network trains) -> search (the supernet and theta) -> cli on top. data needs no
network and no table, but the trainer reads it, so it sits between latency and runs. The
shared top-level modules (errors, io, resources, progress, machine) import no subpackage;
config reads search spaces (arch). An import that ran the other way would tie a lower step to
a higher one: a table could not be profiled without the trainer, or a data folder checked
without the training loop, for example.
"""

import ast
from pathlib import Path

import fbnas

PACKAGE = Path(fbnas.__file__).parent
ORDER = ["arch", "latency", "data", "runs", "search"]
# top-level modules and the subpackages each may import
TOP = {"errors": [], "io": [], "resources": [], "progress": [], "machine": [], "config": ["arch"],
       "__init__": ["arch"], "__main__": [], "cli": ORDER}


SHARED = {"errors", "io", "resources", "progress", "machine"}


def imports_of(path: Path) -> set[str]:
    """The fbnas subpackages or top-level modules ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "fbnas" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_module_sits_in_a_subpackage_of_the_chain_or_is_shared():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == set(TOP), f"top-level modules: {sorted(top)}"
    subs = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subs == set(ORDER)


def test_no_import_runs_up_the_chain():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            allowed = set(TOP[path.stem])
        else:
            allowed = set(ORDER[:ORDER.index(rel.parts[0]) + 1])
        for target in imports_of(path) & set(ORDER):
            if target not in allowed:
                upward.append(f"{rel} imports fbnas.{target}")
        if len(rel.parts) == 1 and path.stem in SHARED:
            # the shared modules import nothing above them either
            assert imports_of(path) <= SHARED, rel
    assert not upward, upward


def test_data_imports_no_other_subpackage():
    # the chain would let data import arch and latency; it needs neither, and keeping it so
    # lets a data set be read and checked without a network or a table
    allowed = SHARED | {"data"}
    for path in (PACKAGE / "data").rglob("*.py"):
        others = imports_of(path) - allowed
        assert not others, f"{path.relative_to(PACKAGE)} imports {sorted(others)}"
