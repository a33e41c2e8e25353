"""The package's architecture: one role per package, imports only downward, no import cycle (lazy imports included)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "algosel"
#: Layers, bottom first: a module may import its own layer and the layers below, never above
#: (docs/architecture.md draws this).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("algosel.version", "algosel.problem", "algosel.resources", "algosel.files", "algosel.outputs",
     "algosel.candidates"),
    ("algosel.operands",),
    ("algosel.spaces",),
    ("algosel.records",),
    ("algosel.measure",),
    ("algosel.learn",),
    ("algosel.runtime",),
    ("algosel.study",),
    ("algosel", "algosel.cli", "algosel.hook", "algosel.__main__", "algosel.testing"),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every ``algosel`` module a file imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("algosel")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("algosel") and node.level == 0:
            found.add(node.module)
            # ``from algosel.spaces import gemm`` imports a module too
            found |= {f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")}
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    assert best is not None, f"{module} is in no layer of tests/test_architecture.py"
    return best[0]


def test_every_module_is_in_a_layer():
    for module in _graph():
        _layer(module)


def test_imports_only_go_downward():
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert not upward, "\n".join(upward)


def import_cycles(full: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a graph of modules (each module's imports; those outside the graph are left out): its
    strongly connected components of more than one module (Tarjan's), each sorted."""
    graph = {m: {t for t in ts if t in full} for m, ts in full.items()}
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle():
    cycles = import_cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import algosel.learn.selector\n", {"algosel.learn.selector"}),
        ("def f():\n    from algosel.spaces import gemm\n", {"algosel.spaces", "algosel.spaces.gemm"}),
    ],
)
def test_the_import_walker_sees_module_and_function_level_imports(tmp_path, source, expected):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert _imports(f) == expected


def test_a_cycle_would_be_caught():
    """The cycle check itself: two modules importing each other (lazily) form a component; a module importing
    itself or one outside the graph does not."""
    graph = {"algosel.a": {"algosel.b"}, "algosel.b": {"algosel.a", "algosel.c"}, "algosel.c": {"algosel.c", "os"}}
    assert import_cycles(graph) == [["algosel.a", "algosel.b"]]


#: The runtime's own layers, bottom first (docs/architecture.md, "The runtime"): a runtime module imports only its
#: row and the rows above it. Imports under ``if TYPE_CHECKING:`` are for annotations and do not count.
RUNTIME_LAYERS: tuple[tuple[str, ...], ...] = (
    ("decision",),
    ("cache", "rule"),
    ("policy",),
    ("stats", "device", "state", "trial", "autograd_thread", "native", "unseen", "fallbacks", "claims", "measured"),
    ("loading", "config", "aside"),
    ("routes", "plans", "candidates"),
    ("probation", "verify", "recurrence"),
    ("decisions", "blocks"),
    ("function", "parts"),
    ("call",),
    ("executor",),
    ("shared",),
    ("ops", "hook", "api", "doctor", "standins", "cache_text", "cache_training"),
)


def _runtime_imports(path: Path) -> set[str]:
    """The ``algosel.runtime`` modules a file imports, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped |= {id(n) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("algosel.runtime."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.module == "algosel.runtime":
            found |= {a.name for a in node.names}
    return found


def test_runtime_modules_import_only_downward():
    row = {name: i for i, names in enumerate(RUNTIME_LAYERS) for name in names}
    modules = sorted(p for p in (PACKAGE / "runtime").glob("*.py") if p.stem != "__init__")
    missing = [p.stem for p in modules if p.stem not in row]
    assert not missing, f"runtime modules in no row of RUNTIME_LAYERS: {missing}"
    upward = [f"runtime.{p.stem} (row {row[p.stem]}) imports runtime.{t} (row {row[t]})"
              for p in modules for t in _runtime_imports(p) if row[t] > row[p.stem]]  # fmt: skip
    assert not upward, "\n".join(upward)


def test_runtime_modules_stay_small():
    """One idea a module: none of the runtime's over ~400 lines."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "runtime").glob("*.py")}
    assert max(sizes.values()) <= 420, {n: s for n, s in sizes.items() if s > 420}


def test_importing_the_hook_loads_no_model_library():
    """``import algosel.hook`` loads neither LightGBM nor pandas: those come with the first model."""
    import subprocess

    code = "import sys, algosel.hook; print(sorted(m for m in ('lightgbm', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_long_test_files_are_scheduled_first():
    """tests/conftest.py's LONG_FILES exist (a renamed file would drop out of the order silently) and come first,
    in their order; the other files follow, most tests first, each file's tests together and in their order."""
    from types import SimpleNamespace

    from conftest import LONG_FILES, in_file_order

    assert all((Path(__file__).parent / name).is_file() for name in LONG_FILES), LONG_FILES
    tests = Path("tests")
    items = [SimpleNamespace(path=tests / name, i=i) for i, name in enumerate(
        ["test_a.py", "test_b.py", "test_b.py", LONG_FILES[1], "test_c.py", LONG_FILES[0], LONG_FILES[1]])]  # fmt: skip
    got = [(item.path.name, item.i) for item in in_file_order(items)]
    assert got == [(LONG_FILES[0], 5), (LONG_FILES[1], 3), (LONG_FILES[1], 6), ("test_b.py", 1), ("test_b.py", 2),
                   ("test_a.py", 0), ("test_c.py", 4)]  # fmt: skip
