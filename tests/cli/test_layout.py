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


#: words a name in fbnas/runs/ may not hold: the trainer there is the loop a search and a
#: retrain share, and theta, the latency budget and the lookup table are the search's
SEARCH_WORDS = {"theta", "budget", "lut", "table", "ms", "us"}
#: the one exception: the config names the data split a search trains theta on
#: (data.theta_fraction), and a run's loaders make the splits
SPLIT_NAMES = {"theta_fraction"}


def names_in(path: Path) -> set[str]:
    """Every identifier ``path`` defines, uses, imports or passes as a keyword."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.update(n for n in (*node.name.split("."), node.asname) if n)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
    return found


def test_the_shared_training_loop_names_nothing_of_the_search():
    import re

    offending = []
    for path in sorted((PACKAGE / "runs").rglob("*.py")):
        for name in names_in(path) - SPLIT_NAMES:
            words = {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)}
            if words & SEARCH_WORDS:
                offending.append(f"{path.relative_to(PACKAGE)}: {name}")
    assert not offending, offending


def test_the_development_guide_names_every_module():
    """docs/development.md's table of modules is how a newcomer finds where a change
    belongs; a module missing from it is a room nobody is told about."""
    import re

    guide = (PACKAGE.parent / "docs" / "development.md").read_text()
    named = set(re.findall(r"`([a-z0-9_/]+\.py)`", guide))
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" or p.parent == PACKAGE]
    missing = [m for m in missing if m not in named]
    assert not missing, f"docs/development.md does not name {missing}"
