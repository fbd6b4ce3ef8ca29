"""The package's shape, read from the source alone: few modules at the root, no import cycle
between modules (imports inside functions count too), and almost no private names imported
across modules (docs/development.md, "Where code goes")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sweeper"
MAX_ROOT_MODULES = 8
MAX_PRIVATE_IMPORTS = 5


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base.pop()
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:`` (never run, so never a cycle)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(n.lineno for n in ast.walk(inner) if hasattr(n, "lineno"))
    return lines


def imports(module: str) -> tuple[set[str], list[str]]:
    """The sweeper modules ``module`` imports, and the private names it imports from others."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    targets: set[str] = set()
    private: list[str] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            source = _imported_from(module, node)
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in MODULES:
                    targets.add(full)
                    continue
                if source in MODULES:
                    targets.add(source)
                    private_name = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private_name and source != module:
                        private.append(f"{module} imports {alias.name} from {source}")
    targets.discard(module)
    return targets, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_few_modules_at_the_root() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules directly in sweeper/: {root}"


def test_no_import_cycle_between_modules() -> None:
    graph = {module: imports(module)[0] for module in MODULES}
    assert cycles(graph) == []


def test_private_names_stay_in_their_module() -> None:
    private = [line for module in MODULES for line in imports(module)[1]]
    assert len(private) <= MAX_PRIVATE_IMPORTS, "\n".join(private)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"c"}}, [["a", "b"]]),
    ],
)
def test_the_cycle_check_finds_cycles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert cycles(graph) == expected


def test_the_import_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    # The check would pass vacuously if it missed the imports that once broke a loop by hiding in
    # a function body: findings.analyze() imported its rule modules that way.
    source = "def f():\n    from sweeper.findings import _words\n    from sweeper.store import _x\n"
    tree = ast.parse(source)
    names = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [_imported_from("sweeper.units", n) for n in names] == [
        "sweeper.findings",
        "sweeper.store",
    ]
    assert "sweeper.findings.analyze" in MODULES
    targets, _ = imports("sweeper.findings.analyze")
    assert {"sweeper.findings.scaling", "sweeper.findings.cause"} <= targets
