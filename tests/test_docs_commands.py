"""Every command the docs print runs as printed, after `make setup` and
`source .venv/bin/activate` (README.md, Quick start).

Which lines are commands, read from README.md and docs/*.md:

- fenced blocks marked ``sh``, ``bash``, ``shell`` or ``console``, or not
  marked, and indented (4-space) blocks; blocks marked anything else
  (``text``, ``python``, ``json``, ...) are not shell;
- in a block with prompts, only the prompt lines: ``$ CMD`` (a shell) and
  ``mininet> CMD`` (Mininet's prompt: its commands, the run's ``esa``,
  ``job`` and ``scenario``, or ``HOST CMD``, a shell command on a host);
- in a block without prompts, every line, unless the block's first line is
  output: it starts with a digit, ``***``, ``...`` or a table character,
  has a word ending in ``:`` outside quotes (``esa-ctl: error: ...``), or
  has columns (two spaces inside it, comments aside); such a block is
  output, and it is better marked ``text``.

Of each command (a line joined with its ``\\`` continuations, split at
``;``, ``&&``, ``||``, ``|`` and ``&``, comments and here-documents left
out) the program is the first word after ``sudo``, ``env``, ``VAR=value``
assignments and shell keywords (``until``, ``do``, ...); ``ip netns exec
NS CMD`` checks ``ip`` and ``CMD``. The program must be a shell builtin, on
PATH or in ``.venv/bin`` (an activated virtualenv), a path in the
repository, or a prerequisite the user installs (``PREREQUISITES``);
``make X`` needs a target ``X`` in the Makefile, ``python -m M`` an
importable ``M``, ``python FILE``, ``torchrun FILE`` and ``pytest FILE``
an existing ``FILE``.

In README.md and docs/results.md inline code that starts with ``make``,
``python``, ``torchrun``, ``.venv/`` or ``esa-`` is checked the same way,
and every relative link must name a file that exists. Every entry point of
pyproject.toml answers ``--help`` with status 0.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OWN_DOCS = [ROOT / "README.md", ROOT / "docs" / "results.md"]
"""Docs whose inline code and links are checked too."""
SCRIPTS = {e.name for e in distribution("esa-ina").entry_points if e.group == "console_scripts"}
"""The console scripts pyproject.toml installs: inline code starting with one
is a command; other words such as the policy ``esa-equal`` are not."""

SHELL_INFO = {"", "sh", "bash", "shell", "console"}

PREREQUISITES = {
    "simple_switch_grpc": "BMv2",
    "simple_switch_CLI": "BMv2",
    "p4c": "p4c",
    "p4c-bm2-ss": "p4c",
    "mn": "Mininet",
    "sudo": "root",
    "ip": "iproute2",
    "tc": "iproute2",
    "nft": "nftables",
    "tcpdump": "tcpdump",
    "tshark": "Wireshark",
}
"""Programs the docs use that are not this project's: installed by the user
(README.md, Prerequisites) or by `make setup` from Debian, with a word on
where they come from."""

EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(doc, command line as extracted) -> why it is not checked. Empty: every
command line found is checked."""

BUILTINS = {
    ".",
    ":",
    "[",
    "cd",
    "echo",
    "exit",
    "export",
    "false",
    "kill",
    "pwd",
    "read",
    "set",
    "source",
    "test",
    "trap",
    "true",
    "unset",
    "wait",
}
KEYWORDS_THEN_COMMAND = {"until", "while", "if", "then", "else", "elif", "do", "!", "time"}
KEYWORDS_ALONE = {"done", "fi", "esac", "{", "}"}
KEYWORDS_SKIP = {"for", "case", "select", "function"}
WRAPPERS = {"nohup", "exec", "command"}
SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
MININET_HOST = re.compile(r"^[a-z]+[0-9]+$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^`\s]*)")


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str
    mininet: bool = False
    """typed at Mininet's prompt (``mininet>``), not in a shell"""

    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


# --- reading the docs -------------------------------------------------------


def blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number of the first body line, info string, body lines) of every
    fenced block and every indented code block of a Markdown text."""
    lines = text.splitlines()
    found: list[tuple[int, str, list[str]]] = []
    i = 0
    prev_text = ""
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            indent, fence, info = m.group(1), m.group(2), m.group(3).lower()
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
                body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
                j += 1
            found.append((i + 2, info, body))
            i, prev_text = j + 1, ""
            continue
        if (
            line.startswith("    ")
            and line.strip()
            and i > 0
            and not lines[i - 1].strip()
            and not _list_or_indented(prev_text)
        ):
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            found.append((start + 1, "", body))
            continue
        if line.strip():
            prev_text = line
        i += 1
    return found


def _list_or_indented(line: str) -> bool:
    """A Markdown line after which an indented line continues a list item."""
    return bool(re.match(r"^(\s+|[-*+]\s|\d+[.)]\s)", line))


def strip_comment(line: str) -> str:
    """``line`` without its shell comment (a ``#`` outside quotes that starts a word)."""
    quote = ""
    for k, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def looks_like_output(line: str) -> bool:
    """Whether a line of a block without prompts is output, not a command."""
    code = strip_comment(line).strip()
    if not code:
        return False
    if code.startswith(("***", "...")) or code[0].isdigit() or code[0] in "|{[(<>=+-":
        return True
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", code)
    return bool(re.search(r"[^\s:]:(\s|$)", unquoted) or re.search(r"\S {2,}\S", unquoted))


def logical_lines(body: list[str], first: int) -> list[tuple[int, str]]:
    """Lines joined with their backslash continuations, with line numbers."""
    out: list[tuple[int, str]] = []
    k = 0
    while k < len(body):
        start, text = k, body[k]
        while text.rstrip().endswith("\\") and k + 1 < len(body):
            k += 1
            text = text.rstrip()[:-1].rstrip() + " " + body[k].strip()
        out.append((first + start, text))
        k += 1
    return out


def heredoc_end(text: str) -> str | None:
    """The delimiter of a here-document ``text`` starts, or None."""
    m = re.search(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1", strip_comment(text))
    return m.group(2) if m and "<<<" not in text else None


def commands_of(doc: Path) -> list[Command]:
    """Every command line of ``doc``'s shell blocks (module docstring)."""
    return commands_in(doc.relative_to(ROOT).as_posix(), doc.read_text())


def commands_in(name: str, text: str) -> list[Command]:
    """Every command line of the shell blocks of Markdown ``text``."""
    found: list[Command] = []
    for first, info, body in blocks(text):
        if info not in SHELL_INFO:
            continue
        lines = logical_lines(body, first)
        prompted = [(n, t.lstrip()) for n, t in lines if t.lstrip().startswith(("$ ", "mininet> "))]
        if prompted:
            for n, t in prompted:
                if t.startswith("$ "):
                    found.append(Command(name, n, t[2:].strip()))
                else:
                    found.append(Command(name, n, t[len("mininet> ") :].strip(), mininet=True))
            continue
        significant = [(n, t) for n, t in lines if strip_comment(t).strip()]
        if not significant or looks_like_output(significant[0][1]):
            continue
        until: str | None = None
        for n, t in significant:
            if until is not None:
                if t.strip() == until:
                    until = None
                continue
            found.append(Command(name, n, strip_comment(t).strip()))
            until = heredoc_end(t)
    return found


def inline_commands(doc: Path) -> list[Command]:
    """Inline code of ``doc`` (outside fenced blocks, perhaps across a line
    break) that names one of this project's commands."""
    name = doc.relative_to(ROOT).as_posix()
    lines = doc.read_text().splitlines()
    in_fence = False
    for k, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            lines[k] = ""
        elif in_fence:
            lines[k] = ""
    text = "\n".join(lines)
    found: list[Command] = []
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = " ".join(m.group(1).split())
        word = span.split(" ")[0]
        if word in {"make", "python", "python3", "torchrun"} | SCRIPTS or word.startswith(".venv/"):
            found.append(Command(name, text.count("\n", 0, m.start()) + 1, span))
    return found


# --- judging a command -------------------------------------------------------


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    targets: set[str] = set()
    for m in re.finditer(r"^([A-Za-z0-9_.%/$() -]+?)\s*::?(?!=)", text, re.M):
        targets.update(m.group(1).split())
    return targets


def mininet_prompt_commands() -> set[str]:
    """Commands of the run's Mininet prompt: its own and Mininet's."""
    sources = [ROOT / "runner" / "prompt.py"]
    spec = importlib.util.find_spec("mininet.cli") if importlib.util.find_spec("mininet") else None
    if spec is not None and spec.origin:
        sources.append(Path(spec.origin))
    return {m for src in sources for m in re.findall(r"def do_(\w+)", src.read_text())}


def split(text: str) -> list[list[str]]:
    """The simple commands of a shell line, each a list of words."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()")
    lex.whitespace_split = True
    lex.commenters = ""
    parts: list[list[str]] = [[]]
    for tok in lex:
        if tok in SEPARATORS:
            parts.append([])
        else:
            parts[-1].append(tok)
    return [p for p in parts if p]


def without_redirections(words: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in {">", ">>", "<", "<<", ">&", "<&", "&>", "<<<", "(", ")"}:
            skip = w not in {"(", ")"}
        elif out and out[-1].isdigit() and w.startswith((">", "<")):
            out.pop()
            skip = True
        else:
            out.append(w)
    return out


def program_problem(words: list[str], make_targets: set[str]) -> list[str]:
    """What is wrong with one simple command (empty: nothing)."""
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return []
    prog, args = words[0], words[1:]
    if prog.startswith("$PWD/"):
        prog = prog[len("$PWD/") :]
    if prog in KEYWORDS_ALONE:
        return []
    if prog in KEYWORDS_SKIP:
        return []
    if prog in KEYWORDS_THEN_COMMAND or prog in WRAPPERS:
        return program_problem(args, make_targets)
    if prog == "sudo" and args and not args[0].startswith("-"):
        return program_problem(args, make_targets)
    if prog == "env":
        rest = [a for a in args if not a.startswith("-")]
        return program_problem(rest, make_targets)
    if prog == "ip" and args[:2] == ["netns", "exec"] and len(args) > 3:
        return program_problem(["ip"], make_targets) + program_problem(args[3:], make_targets)
    if prog in BUILTINS:
        if prog in {".", "source"} and args and not (ROOT / args[0]).exists():
            return [f"{args[0]}: no such file in the repository"]
        return []
    problems = found_problem(prog)
    if problems:
        return problems
    base = Path(prog).name
    if base == "make":
        wanted = [a for a in args if not a.startswith("-") and not ASSIGNMENT.match(a)]
        return [
            f"make {t}: no target {t!r} in the Makefile" for t in wanted if t not in make_targets
        ]
    if re.fullmatch(r"python(3(\.\d+)?)?", base):
        return python_problem(args)
    if base in {"torchrun", "pytest", "py.test"}:
        files = [a.split("::")[0] for a in args if a.endswith(".py") or ".py::" in a]
        return [f"{f}: no such file in the repository" for f in files if not (ROOT / f).exists()]
    return []


def found_problem(prog: str) -> list[str]:
    """Why ``prog`` can not be found after set-up (empty: it can)."""
    if "/" in prog:
        return [] if (ROOT / prog).exists() else [f"{prog}: no such file in the repository"]
    if shutil.which(prog) or (VENV_BIN / prog).exists() or prog in PREREQUISITES:
        return []
    return [f"{prog}: not on PATH, not in .venv/bin, not a listed prerequisite"]


def python_problem(args: list[str]) -> list[str]:
    if args[:1] == ["-m"] and len(args) > 1:
        try:
            found = importlib.util.find_spec(args[1]) is not None
        except ImportError:  # a parent package that is not there
            found = False
        return [] if found else [f"python -m {args[1]}: no module {args[1]!r}"]
    if args and not args[0].startswith("-") and not (ROOT / args[0]).exists():
        return [f"python {args[0]}: no such file in the repository"]
    return []


def problems_of(cmd: Command, make_targets: set[str], prompt: set[str]) -> list[str]:
    if (cmd.doc, cmd.text) in EXCEPTIONS:
        return []
    text = cmd.text
    if cmd.mininet:
        first, _, rest = text.partition(" ")
        if MININET_HOST.match(first) and first not in prompt:
            text = rest
        elif first in prompt:
            return []
        else:
            return [f"{first}: not a command of the run's Mininet prompt"]
    problems: list[str] = []
    for words in split(text):
        problems += program_problem(without_redirections(words), make_targets)
    return problems


# --- the tests ---------------------------------------------------------------


@pytest.fixture(scope="module")
def make_targets() -> set[str]:
    return makefile_targets()


@pytest.fixture(scope="module")
def prompt() -> set[str]:
    return mininet_prompt_commands()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_doc_command_exists(doc: Path, make_targets: set[str], prompt: set[str]) -> None:
    commands = commands_of(doc)
    if doc in OWN_DOCS:
        commands += inline_commands(doc)
    wrong = [
        f"{c.where()}\n    {p}" for c in commands for p in problems_of(c, make_targets, prompt)
    ]
    assert not wrong, "commands the docs print that can not run:\n" + "\n".join(wrong)


def test_the_extraction_finds_the_quick_start() -> None:
    """The rule reads README.md's quick start as commands and its output as output."""
    commands = {c.text for c in commands_of(ROOT / "README.md")}
    for expected in ("make setup", "source .venv/bin/activate", "make run", "make test"):
        assert expected in commands
    assert not any(t.startswith(("===", "scheme ", "average JCT")) for t in commands)


def test_the_extraction_rule() -> None:
    text = "\n".join(
        [
            "```sh",
            'make run RUN_ARGS="--pcap"   # a comment: with a colon',
            "sudo FOO=1 esa-ctl jobs | tee x && echo done",
            "cat > /tmp/t.json <<'END'",
            '{"hosts": {}}',
            "END",
            "ip netns exec demo esa-refswitch --iface 1@s1-eth1 \\",
            "    --pool 64 &",
            "```",
            "",
            "```",
            "esa-ctl: error: refused",
            "```",
            "",
            "```text",
            "nonexistent-program --flag",
            "```",
            "",
            "```console",
            "$ .venv/bin/python -m hosts.net.pcap_dump x.pcap",
            "820 frames, 806 ESA packets",
            "mininet> h1 esa-ctl stats",
            "```",
            "",
            "Text:",
            "",
            "    esa-ps --job 1:2",
        ]
    )
    found = commands_in("example.md", text)
    assert [c.text for c in found] == [
        'make run RUN_ARGS="--pcap"',
        "sudo FOO=1 esa-ctl jobs | tee x && echo done",
        "cat > /tmp/t.json <<'END'",
        "ip netns exec demo esa-refswitch --iface 1@s1-eth1 --pool 64 &",
        ".venv/bin/python -m hosts.net.pcap_dump x.pcap",
        "h1 esa-ctl stats",
        "esa-ps --job 1:2",
    ]
    assert [c.mininet for c in found] == [False] * 5 + [True, False]
    targets = {"run"}
    assert program_problem(["make", "run", "RUN_ARGS=x"], targets) == []
    assert program_problem(["make", "nope"], targets) == [
        "make nope: no target 'nope' in the Makefile"
    ]
    assert program_problem(["python", "-m", "no_such_module_here"], targets)
    assert program_problem(["python", "-m", "no_such_package_here.module"], targets)
    assert program_problem(["no-such-program-here"], targets)
    assert program_problem(["sudo", "-s"], targets) == []
    assert program_problem(["env", "A=1", "$PWD/.venv/bin/no-such-program"], targets)
    assert program_problem(["ip", "netns", "exec", "ns", "no-such-program-here"], targets)


@pytest.mark.parametrize("doc", OWN_DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_name_files_that_exist(doc: Path) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", doc.read_text())
    local = [link.split("#")[0] for link in links if not re.match(r"^[a-z]+:", link)]
    missing = [p for p in local if p and not (doc.parent / p).exists()]
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"


def entry_points() -> list[str]:
    """The console scripts of pyproject.toml's [project.scripts]."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert m, "pyproject.toml has no [project.scripts]"
    return re.findall(r"^([A-Za-z0-9_.-]+)\s*=", m.group(1), re.M)


@pytest.mark.parametrize("script", entry_points())
def test_entry_point_answers_help(script: str) -> None:
    exe = VENV_BIN / script
    assert exe.exists(), f"{exe} is missing: make setup installs it"
    done = subprocess.run(
        [str(exe), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert done.returncode == 0, f"{script} --help: status {done.returncode}\n{done.stderr}"
    assert "usage" in done.stdout.lower()
