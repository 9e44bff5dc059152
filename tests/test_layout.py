"""The layout docs/architecture.md states: floors, no circle, no shadowed names."""

from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from runner.paths import ROOT

FLOORS = {
    "esa": 1,
    "controller": 2,
    "hosts": 2,
    "refswitch": 2,
    "runner": 4,
    "sim": 5,
    "testbed": 5,
}
"""Each package's floor: it imports only from lower floors and its own."""
INNER_FLOORS = {
    "controller": {"errors": 0, "device": 1, "world": 2, "api": 3, "__main__": 4},
    "hosts": {
        "net": 1,
        "timing": 1,
        "agreement": 2,
        "worker": 3,
        "ps": 3,
        "torch": 4,
        "programs": 4,
    },
}
"""Floors inside a package, by its subpackage or module: each imports only
from lower ones of its package, so two on one floor never import each
other (docs/architecture.md)."""
PRODUCT = ("esa", "controller", "hosts", "refswitch", "runner", "sim")
ONLY = {"sim": {"runner": "runner.scenario"}}
"""Where a package may import only one module of a lower package: the
simulator reads the scenario files ``make run`` reads, through the run's
one reader, and nothing else of the run."""
SAME_IDEA = {
    "errors.py": "each package's errors, its users' one place to catch them",
    "priority.py": "sim.priority applies controller.world.priority's rules to simulated jobs",
    "main.py": "a program's entry point (esa-refswitch, make run)",
    "__main__.py": "python -m of a package",
}
"""Module and class names two product modules share, with the reason they
are the same idea."""


def modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports: ``from a import b`` names
    module ``a.b`` where that is a module, else ``a``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out.update(subs or {node.module})
    return out & known


def graph() -> dict[str, set[str]]:
    known = {n for p in FLOORS for n, _ in modules(p)}
    return {n: imports(path, known) - {n} for p in FLOORS for n, path in modules(p)}


def test_no_import_runs_up_a_floor_and_the_product_never_imports_the_test_beds() -> None:
    wrong = []
    for name, deps in graph().items():
        top = name.split(".")[0]
        for dep in deps:
            other = dep.split(".")[0]
            up = FLOORS[other] > FLOORS[top] or (FLOORS[other] == FLOORS[top] and other != top)
            only = ONLY.get(top, {}).get(other)
            narrow = only is not None and dep != only
            if up or narrow or (top in PRODUCT and other == "testbed"):
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


def test_no_import_runs_up_a_floor_inside_a_package() -> None:
    wrong = []
    for name, deps in graph().items():
        top, *rest = name.split(".")
        floors = INNER_FLOORS.get(top)
        if floors is None or not rest:
            continue
        for dep in deps:
            other, *inner = dep.split(".")
            if other != top or not inner or inner[0] == rest[0]:
                continue
            if floors[inner[0]] >= floors[rest[0]]:
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


def test_every_module_of_a_package_with_inner_floors_has_one() -> None:
    for package, floors in INNER_FLOORS.items():
        for name, _ in modules(package):
            parts = name.split(".")
            assert len(parts) == 1 or parts[1] in floors, f"{name} has no floor"


def test_no_import_circle() -> None:
    g = graph()
    state: dict[str, int] = {}
    circles = []

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for d in sorted(g[n]):
            if state.get(d) == 1:
                circles.append(" -> ".join([*path[path.index(d) :], d]))
            elif d not in state:
                visit(d, [*path, d])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert circles == []


def test_no_two_product_modules_or_classes_share_a_name_for_different_ideas() -> None:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for package in PRODUCT:
        for name, path in modules(package):
            if path.name != "__init__.py":
                where[path.name].append(name)
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(name)
    shared = {k: v for k, v in where.items() if len(v) > 1 and k not in SAME_IDEA}
    assert shared == {}


def test_no_top_level_folder_shadows_a_library_the_code_imports() -> None:
    """A folder named like an installed library (``mininet/``) holds data
    only: no Python, so it is no package and never imported in its place."""
    for folder in ROOT.iterdir():
        if not folder.is_dir() or not folder.name.isidentifier():
            continue
        spec = importlib.util.find_spec(folder.name)
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin is not None and ROOT not in origin.parents:
            assert not list(folder.rglob("*.py")), f"{folder.name}/ shadows {origin}"
