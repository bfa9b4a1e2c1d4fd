"""The package reads as the chain: each subpackage imports only from those before it.

arch (what a network is) -> latency (what it costs) -> data (what a run reads) -> runs
(how a network trains) -> search (the supernet and theta) -> cli on top. data needs no
network and no table, but the trainer reads it, so it sits between latency and runs. The
shared top-level modules (errors, io, resources, progress, machine, check_rules) import no
subpackage; config reads search spaces (arch). An import that ran the other way would tie a
lower step to a higher one: a table could not be profiled without the trainer, or a data
folder checked without the training loop, for example.
"""

import ast
from pathlib import Path

import fbnas

PACKAGE = Path(fbnas.__file__).parent
ORDER = ["arch", "latency", "data", "runs", "search"]
# top-level modules and the subpackages each may import
TOP = {"errors": [], "io": [], "resources": [], "progress": [], "machine": [], "check_rules": [],
       "config": ["arch"],
       "__init__": ["arch"], "__main__": [], "cli": ORDER}


SHARED = {"errors", "io", "resources", "progress", "machine", "check_rules"}


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


#: the longest a function in fbnas/ may run, and one in cli.py, whose commands only parse,
#: load a config, call a command function and map its errors; and cli.py's own length.
#: A function's lines run from its ``def`` to its last line: decorators (click's options)
#: are declarations, not logic, and are not counted; the docstring is.
MAX_FUNCTION_LINES = 80
MAX_CLI_FUNCTION_LINES = 60
MAX_CLI_LINES = 600


def long_functions(path: Path, limit: int) -> list[str]:
    """'file:line name (N lines)' for every function or method in ``path`` over ``limit``
    lines, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} "
                             f"({lines} lines)")
    return found


def test_no_function_in_the_package_runs_over_80_lines():
    """A function that long does several jobs; split it into helpers named for them."""
    long = [f for path in sorted(PACKAGE.rglob("*.py"))
            for f in long_functions(path, MAX_FUNCTION_LINES)]
    assert not long, long


def test_the_command_line_is_short_and_its_commands_thin():
    """cli.py parses, calls the library and prints: logic there belongs to the module that
    owns it, where the command functions and the tests reach it without click."""
    cli = PACKAGE / "cli.py"
    lines = len(cli.read_text().splitlines())
    assert lines < MAX_CLI_LINES, f"fbnas/cli.py has {lines} lines"
    long = long_functions(cli, MAX_CLI_FUNCTION_LINES)
    assert not long, long


def module_of(path: Path) -> str:
    """The dotted name of the fbnas module at ``path`` (a package by its __init__.py)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each fbnas module and the fbnas modules it imports anywhere in it, inside functions
    too: an import put in a function to dodge a cycle at import time still ties the two
    modules together. ``from fbnas.a import b`` counts as importing fbnas.a.b where that is
    a module, else fbnas.a."""
    paths = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_finds_a_cycle_hidden_in_a_function():
    graph = {"fbnas.a": {"fbnas.b"}, "fbnas.b": {"fbnas.c"}, "fbnas.c": {"fbnas.a"},
             "fbnas.d": {"fbnas.a"}}
    assert cycles(graph) == [["fbnas.a", "fbnas.b", "fbnas.c"]]
    assert "fbnas.latency.lut" in import_graph()["fbnas.latency.fidelity"]


def test_no_import_cycle_among_the_package_modules():
    """Modules that import each other (at the top or inside a function) cannot be read,
    tested or moved one without the other, and the order they load in decides what works;
    what two of them share belongs to the module that owns it, or to a small one of its
    own."""
    found = cycles(import_graph())
    assert not found, f"fbnas modules that import each other: {found}"
