"""The modules of hosts/ import one another without a cycle (TYPE_CHECKING imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

HOSTS = Path(__file__).resolve().parent.parent / "hosts"


def imports() -> dict[str, set[str]]:
    """Module -> the modules of hosts/ it imports."""
    mods = {p.stem for p in HOSTS.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for p in HOSTS.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "hosts":
                deps |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hosts."):
                deps.add((node.module or "").split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("hosts.")}
        graph[p.stem] = deps - {p.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per back edge of a depth-first search."""
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                found.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return found


def test_cycles_are_found() -> None:
    graph = {"announce": {"calls"}, "calls": {"worker"}, "worker": {"announce", "calls"}}
    assert cycles(graph) == [
        ["announce", "calls", "worker", "announce"],
        ["calls", "worker", "calls"],
    ]


def test_hosts_modules_import_no_cycle() -> None:
    graph = imports()
    assert {"ps", "worker", "announce", "calls"} <= set(graph)
    assert cycles(graph) == []
