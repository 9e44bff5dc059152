"""Every code name README.md and docs/*.md print in code font exists.

A rename that misses a doc leaves a name a reader can not find; this test
finds it.  An inline code span (fenced and indented blocks are commands and
output, not names) is read as a code name by its shape, and checked so:

- a dotted name from one of the project's packages (``hosts.ps.aggregate``,
  ``esa.job.ps_shard``): the module, then each attribute defined in it: a
  class's methods and fields and what its methods set on ``self``;
- a dotted name from a module's last part (``plan.device_entries``): the
  same, from any module of the project of that name;
- a path of the repository (``hosts/net/payload.py``, ``mininet/``), or a
  source file shortened to its end (``net/payload.py``, ``wire.py``);
- a CamelCase name, with members (``Aggregator.handle``): a class of the
  project, or a name of the P4 program;
- an UPPER_CASE name: a constant or enum member the code defines, or an
  environment variable or key it reads;
- a call (``allreduce(tensor, timeout)``) or a snake_case name with an
  underscore (``ps_shard``): a name the code or the P4 program defines, or a
  key it reads.

What the Python of a fenced block imports from the project is checked the
same way.  Spans of other shapes (commands, options, values, output) are
no names.
``NOT_CODE`` lists the few spans of these shapes that name something else.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = (
    "esa",
    "controller",
    "hosts",
    "refswitch",
    "runner",
    "sim",
    "testbed",
    "bench",
    "examples",
    "tests",
)
SKIP_DIRS = {".venv", "build", "results", ".git", "__pycache__", ".mypy_cache", ".ruff_cache"}
SOURCE = (".py", ".p4", ".proto", ".md", ".txtpb", ".svg", ".sh", ".toml")
"""Extensions of the files the repository holds."""
WRITTEN = {"png", "svg", "log", "pid", "lock", "csv", "pcap", "json", "yml", "gz", "txt", "npy"}
"""Extensions of what a run writes (``jct.png``, ``s1.log``): no code names."""

NOT_CODE = {
    r"RegisterEntry": "P4Runtime's message",
    r"esa\.admin\.v1\.Admin": "the gRPC service controller/api/admin.proto declares",
    r"esa_job_\w+_total": "a Prometheus counter of the controller, named from an event",
    r"scrape_interval|exported_job": "Prometheus' words",
    r"docs/performance\.md": "a file of behavioral-model's tree",
    r"data/README\.md": "a file of Alibaba's cluster-trace tree",
}
"""Spans (regular expressions) shaped like code names that name something
else, each with what it names."""

SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
CAMEL = re.compile(r"[A-Z][a-z0-9]\w*(?:\.[A-Za-z_]\w*)*")
UPPER = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*|[A-Z]{2,}[0-9]*")
CALL = re.compile(r"([A-Za-z_][\w.]*)\(.*\)")
SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
PATH = re.compile(r"[\w.-]*/[\w./-]*|[\w-]+(?:\.[\w-]+)*\.[a-z0-9]+")


@dataclass
class Module:
    names: set[str] = field(default_factory=set)
    """What the module defines or imports at its top level."""
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


@dataclass
class Code:
    modules: dict[str, Module]
    classes: dict[str, list[tuple[Module, ast.ClassDef]]]
    words: set[str]
    """Every identifier of the Python code and the P4 program, and every
    short string literal of the Python code (keys, variables it reads)."""
    files: list[str]
    """The repository's files and folders, relative to its root."""


def members(cls: ast.ClassDef) -> set[str]:
    """The names a class defines: its methods, class-level names and fields,
    and what its methods set on ``self``."""
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    for inner in ast.walk(cls):
        if (
            isinstance(inner, ast.Attribute)
            and isinstance(inner.ctx, ast.Store)
            and isinstance(inner.value, ast.Name)
            and inner.value.id == "self"
        ):
            out.add(inner.attr)
    return out


def top_names(tree: ast.Module) -> Module:
    mod = Module()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mod.names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            mod.names.add(node.name)
            mod.classes[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        mod.names.add(n.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            mod.names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            mod.names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return mod


def repo_files() -> list[str]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if not SKIP_DIRS.intersection(rel.parts):
            out.append(rel.as_posix() + ("/" if path.is_dir() else ""))
    return out


@cache
def code() -> Code:
    modules: dict[str, Module] = {}
    classes: defaultdict[str, list[tuple[Module, ast.ClassDef]]] = defaultdict(list)
    words: set[str] = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue  # its examples of names that do not exist
            tree = ast.parse(path.read_text())
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts).removesuffix(".__init__")
            modules[name] = mod = top_names(tree)
            for cls in mod.classes.values():
                classes[cls.name].append((mod, cls))
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    words.add(node.id)
                elif isinstance(node, ast.Attribute):
                    words.add(node.attr)
                elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                    words.add(node.arg)
                elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                    words.add(node.name)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words.update(re.findall(r"[A-Za-z_]\w*", node.value))
    for path in [*(ROOT / "p4src").rglob("*.p4"), *(ROOT / "controller").rglob("*.proto")]:
        words.update(re.findall(r"[A-Za-z_]\w*", path.read_text()))
    return Code(modules, classes, words, repo_files())


def class_has(name: str, member: str) -> bool:
    """Whether a class ``name`` of the project, or a base of it, defines ``member``."""
    for _, cls in code().classes.get(name, []):
        if member in members(cls):
            return True
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        if any(b != name and class_has(b, member) for b in bases):
            return True
    return False


def in_module(mod: Module, rest: list[str]) -> bool:
    """Whether ``rest`` (``Class.member...``) is defined in module ``mod``."""
    if not rest:
        return True
    head, *tail = rest
    if head not in mod.names:
        return False
    if not tail:
        return True
    if head in mod.classes:
        return class_has(head, tail[0]) and all(t in code().words for t in tail[1:])
    return all(t in code().words for t in tail)


def dotted_exists(parts: list[str]) -> bool:
    """A dotted name from a package root: its longest module prefix, then the rest."""
    for i in range(len(parts), 0, -1):
        mod = code().modules.get(".".join(parts[:i]))
        if mod is not None:
            return in_module(mod, parts[i:]) or ".".join(parts[: i + 1]) in code().modules
    return False


def path_exists(span: str) -> bool | None:
    """A path from the repository's root, or a source file or folder by the
    end of its path; None: what a run writes, or a pattern."""
    if not PATH.fullmatch(span) or any(ch in span for ch in "{}*<>"):
        return None
    first = span.split("/")[0]
    if "/" in span and (ROOT / first).is_dir() and first not in SKIP_DIRS:
        return (ROOT / span).exists()
    if first in SKIP_DIRS or not span.endswith(SOURCE):
        return None
    return any(f == span or f.endswith("/" + span) for f in code().files)


def exists(span: str) -> bool | None:
    """Whether the code name ``span`` exists; None: ``span`` is no code name."""
    c = code()
    if span.startswith("-") or any(re.fullmatch(k, span) for k in NOT_CODE):
        return None
    if m := CALL.fullmatch(span):
        return exists(m.group(1)) is not False
    if " " in span:
        return None
    if "/" in span or span.endswith(SOURCE):
        return path_exists(span)
    if "." in span and span.rsplit(".", 1)[1] in WRITTEN:
        return None
    parts = span.split(".")
    if DOTTED.fullmatch(span):
        if parts[0] in PACKAGES:
            return dotted_exists(parts)
        if CAMEL.fullmatch(span):
            return class_has(parts[0], parts[1]) or (
                parts[0] not in c.classes and all(p in c.words for p in parts)
            )
        if importlib.util.find_spec(parts[0]) is not None:
            return None
        same = [m for name, m in c.modules.items() if name.split(".")[-1] == parts[0]]
        if same:
            return any(in_module(m, parts[1:]) for m in same)
        return all(p in c.words for p in parts)
    if CAMEL.fullmatch(span) or UPPER.fullmatch(span) or SNAKE.fullmatch(span):
        return span in c.words
    return None


def spans(doc: Path) -> list[tuple[int, str]]:
    """The inline code spans of ``doc`` with their line numbers, outside
    fenced and indented blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and not line.lstrip().startswith(("-", "|"))):
            continue
        out.extend((n, m.group(1)) for m in SPAN.finditer(line))
    return out


IMPORT = re.compile(r"\s*(?:from\s+([\w.]+)\s+import\s+([\w, ]+)|import\s+([\w.]+))")


def block_imports(doc: Path) -> list[tuple[int, str]]:
    """What the Python in ``doc``'s fenced blocks imports from the project,
    as dotted names (``from a import b, c``: ``a.b`` and ``a.c``)."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced and (m := IMPORT.fullmatch(line.split("#")[0].rstrip())):
            module, names, alone = m.groups()
            dotted = [alone] if alone else [f"{module}.{x.strip()}" for x in names.split(",")]
            out.extend((n, d) for d in dotted if d.split(".")[0] in PACKAGES)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_code_name_a_doc_prints_exists(doc: Path) -> None:
    missing = [f"{doc.name}:{n}: `{s}`" for n, s in spans(doc) if exists(s) is False]
    imports = [f"{doc.name}:{n}: import {d}" for n, d in block_imports(doc) if not exists(d)]
    assert missing + imports == []


@pytest.mark.parametrize(
    ("span", "found"),
    [
        ("hosts.ps.aggregate.Aggregator.handle", True),
        ("hosts.ps.aggregate.Aggregator.no_such_step", False),
        ("hosts.aggregate", False),
        ("hosts.torch_hook.register", False),
        ("plan.device_entries", True),
        ("plan.no_such_function", False),
        ("hosts/net/payload.py", True),
        ("net/payload.py", True),
        ("hosts/payload.py", False),
        ("Aggregator.handle", True),
        ("ParameterServer.handle", False),
        ("Worker.counters", True),
        ("MAX_RTO", True),
        ("MAX_NO_SUCH_RTO", False),
        ("ps_shard", True),
        ("allreduce(tensor, timeout)", True),
        ("esa-ctl admit", None),
        ("--schemes", None),
        ("jct.png", None),
        ("results/run/jobs.csv", None),
        ("mininet/scenarios/ample.json", True),
        ("mininet/scenarios/none.json", False),
        ("torch.distributed", None),
        ("RegisterEntry", None),
        ("logs/", None),
    ],
)
def test_what_is_read_as_a_code_name_and_how_it_is_found(span: str, found: bool | None) -> None:
    assert exists(span) is found
