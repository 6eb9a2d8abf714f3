"""The house rules of ``src/threadline``, checked by reading the source with :mod:`ast`.

No import circle between modules, unique module names outside ``api/``, and no module past
the size a reader takes in one sitting (except the frozen migrations and the wire models).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "src" / "threadline"

#: Modules allowed past MAX_LINES: the append-only migrations and the pydantic wire models.
LONG_MODULES = {"threadline.storage.schema", "threadline.api.models"}
MAX_LINES = 620


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``name`` imports when it is loaded.

    ``from pkg import sub`` counts as importing ``pkg.sub`` when ``sub`` is a module, and as
    importing ``pkg`` (its ``__init__``) otherwise. Imports under ``if TYPE_CHECKING:`` and
    inside functions count too: a circle that only type checkers or late imports walk is still
    a circle a reader has to untangle.
    """
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names if alias.name in modules)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(child, package)
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        found.add(target)
                    elif base in modules:
                        found.add(base)
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    if node.level > 1:
        parts = parts[: -(node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
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
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def test_no_import_circle() -> None:
    assert find_cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_module_names_are_unique_outside_api() -> None:
    names = Counter(
        path.name
        for name, path in all_modules().items()
        if path.name != "__init__.py" and not name.startswith("threadline.api.")
    )
    assert sorted(name for name, count in names.items() if count > 1) == []


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    too_long = {
        name: lines
        for name, path in all_modules().items()
        if name not in LONG_MODULES
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}


FOUNDATIONS = {
    "abandonment", "clock", "config", "environment", "errors", "fetching", "ids", "pause",
}

#: What each part of the package may import besides itself (docs/architecture.md says why).
MAY_IMPORT: dict[str, set[str]] = {
    **{name: FOUNDATIONS for name in FOUNDATIONS},
    "storage": FOUNDATIONS,
    "scheduling": FOUNDATIONS | {"storage"},
    "threads": FOUNDATIONS | {"scheduling", "storage"},
    "delivery": FOUNDATIONS | {"threads"},
    "access": FOUNDATIONS | {"threads"},
    "schedules": FOUNDATIONS | {"scheduling"},
    "maintenance": FOUNDATIONS | {"delivery", "schedules", "scheduling", "storage", "threads"},
    "api": FOUNDATIONS | {"access", "scheduling", "storage", "threads"},
    "client": {"api", "errors"},
    # The Pydantic AI engine: a Turn's steps, approvals, streams and outbound port, nothing more.
    "pydantic_ai": FOUNDATIONS | {"threads"},
}


def part_of(module: str) -> str:
    """``threadline.maintenance.lanes`` -> ``maintenance``; the package root is ``threadline``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "threadline"


def test_packages_import_only_downward() -> None:
    reaching_up = sorted(
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        for target in targets
        if part_of(name) in MAY_IMPORT
        and part_of(target) != part_of(name)
        and part_of(target) not in MAY_IMPORT[part_of(name)]
    )
    assert reaching_up == []


def test_nothing_below_the_object_imports_the_test_kit_the_client_or_an_engine_adapter(
) -> None:
    importers = sorted(
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        for target in targets
        if part_of(target) in {"testing", "client", "pydantic_ai"}
        and part_of(name) != part_of(target)
    )
    assert importers == []
