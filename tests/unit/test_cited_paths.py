"""Every path the project names in its prose resolves inside the repository: a docstring or
comment in Python, a line of a Markdown document, a comment of the Makefile. A file renamed or
moved without its citations, or a document that lives outside the clone, fails here. Nor does
that prose cite one of our issues by its number ("issue N", "(#N)"): a clone has no tracker,
so the text says what the issue meant instead (`test_no_prose_cites_an_issue_by_number`).

The rules, kept simple on purpose:
- A path with a slash is checked when its first segment is a top-level folder of the repository
  (`proxy/`, `docs/`, `tests/`, ...) or one of proxy/'s rooms (`core/`, `services/`, ...). It
  resolves relative to the repository root, to the citing file's folder, or to `proxy/`; a
  dotted tail names something inside a module (`core/events/sse.feed` is `core/events/sse.py`).
- A bare file name ending in .py or .md resolves when some file of the repository has it.
- A Markdown link `[text](target)` that is not a URL resolves relative to its document.
- Paths with `*` or `...` are patterns, not citations, and are not checked.
The exceptions below say why each one is not a file of the repository.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache",
                ".pytest_cache", ".hypothesis", "fixtures", "results"}
# Documents about other projects: the paths they name are files of the OpenAI SDK, vLLM, Codex
# or the codebases the style guide learns from, not ours.
OUTSIDE_DOCS = {"docs/protocol.md", "docs/protocol-2026.md", "docs/style.md"}
ROOMS = {"core", "services", "store", "web", "settings", "simulator", "upstream", "telemetry",
         "process"}
EXCEPTIONS = {
    "bench/results/": "written by the benchmarks at run time (ignored by git)",
    "tests/artifacts/": "the console test's screenshots, written at run time (ignored by git)",
    "deploy/.env": "the operator writes it; compose reads it",
    "protocol.py": "vLLM's own module, named where the simulator copies its shapes",
    "serving_chat.py": "vLLM's own module, named where the simulator copies its shapes",
    "file.py": "the `function (file.py:LINE)` format of a py-spy frame",
    "web/file": "prose: 'web/file search'",
}
TOKEN = re.compile(r"(?<![\w./:@-])((?:[\w.-]+/)+[\w.*-]*|[\w-]+\.(?:py|md))(?![\w/-])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def repository_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        found += [Path(folder) / name for name in sorted(files)]
    return found


def sources(files: list[Path]) -> list[Path]:
    return [p for p in files if p.suffix in (".py", ".md") or p.name == "Makefile"]


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of what a reader reads: comments and docstrings of Python, every line of
    a document, comment lines of the Makefile."""
    text = path.read_text(errors="replace")
    if path.suffix == ".md":
        yield from enumerate(text.splitlines(), 1)
    elif path.name == "Makefile":
        yield from ((n, line) for n, line in enumerate(text.splitlines(), 1) if "#" in line)
    else:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and node.body:
                    yield node.body[0].lineno, doc


@functools.cache
def read_prose(path: Path) -> tuple[tuple[int, str], ...]:
    """`prose(path)` read once for both checks of the whole tree (tokenizing and parsing every
    module is most of their ~3 s each)."""
    return tuple(prose(path))


def _exists(candidate: Path) -> bool:
    if candidate.exists():
        return True
    # `module.attribute`: the module's file.
    stem, dot, _ = candidate.name.partition(".")
    return bool(dot) and candidate.with_name(stem + ".py").exists()


def resolves(token: str, cited_in: Path, names: set[str]) -> bool:
    if "/" not in token:
        return token in names
    bases = (ROOT, cited_in.parent, ROOT / "proxy")
    return any(_exists(base / token) for base in bases)


def cited(token: str, cited_in: Path) -> bool:
    """Whether a token is a path this test holds to resolving."""
    if "*" in token or "..." in token or token.startswith("."):
        return False
    if any(token == known or (known.endswith("/") and token.startswith(known))
           for known in EXCEPTIONS):
        return False
    if "/" not in token:
        return cited_in.relative_to(ROOT).as_posix() not in OUTSIDE_DOCS
    top = {p.name for p in ROOT.iterdir() if p.is_dir()}
    return token.split("/", 1)[0] in top | ROOMS


def _is_local_link(target: str) -> bool:
    return bool(target) and "://" not in target and not target.startswith("mailto:")


def unresolved(path: Path, lines: Iterator[tuple[int, str]], names: set[str]) -> list[str]:
    where = path.relative_to(ROOT)
    outside = where.as_posix() in OUTSIDE_DOCS
    missing = []
    for number, text in lines:
        for match in TOKEN.finditer(text):
            token = match.group(1).rstrip(".,;:)")
            if not outside and cited(token, path) and not resolves(token, path, names):
                missing.append(f"{where}:{number}: {token}")
        links = LINK.finditer(text) if path.suffix == ".md" else iter(())
        for match in links:
            target = match.group(1).split("#", 1)[0]
            if _is_local_link(target) and not (path.parent / target).exists():
                missing.append(f"{where}:{number}: link {target}")
    return missing


def test_every_path_named_in_prose_resolves() -> None:
    files = repository_files()
    names = {path.name for path in files}
    missing = [line for path in sources(files)
               for line in unresolved(path, iter(read_prose(path)), names)]
    assert missing == []


def test_a_renamed_module_and_a_document_outside_the_clone_are_caught() -> None:
    here = ROOT / "proxy" / "services" / "eventlog" / "log.py"
    lines = iter([(1, "stored events in pages (logread.py); see CONTRACT.md"),
                  (2, "the writer (services/eventlog/writer.py), services/eventlog/gone.py"),
                  (3, "inside a module: core/events/sse.feed; a pattern: tests/*/x.py")])
    names = {"writer.py", "log.py", "sse.py"}
    assert unresolved(here, lines, names) == [
        "proxy/services/eventlog/log.py:1: logread.py",
        "proxy/services/eventlog/log.py:1: CONTRACT.md",
        "proxy/services/eventlog/log.py:2: services/eventlog/gone.py",
    ]


def test_a_broken_link_in_a_document_is_caught() -> None:
    here = ROOT / "docs" / "README.md"
    lines = iter([(3, "[the guide](guide.md), [gone](gone.md#top), [web](https://x.org/a.md)")])
    assert unresolved(here, lines, {"guide.md"}) == ["docs/README.md:3: gone.md",
                                                     "docs/README.md:3: link gone.md"]


# -- no issue cited by its number -------------------------------------------------------------

# "issue N", "issues N and M", "Issue #N"; and a bare "#N" (not "##", not `&#39;`).
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues?\s+#?\d+\b")
BARE_NUMBER = re.compile(r"(?<![\w&#/])#\d+\b")
# An outside project's issue or pull request: the number follows the project's repository
# (`openai/codex #7782`), its name (`vllm #57999`, `LiteLLM: #22051`) or `PR`, possibly in a
# list (`PR #40418 and #38190`, `openai/codex PR #8767; issues #18677, #41662`). Those numbers
# are the named project's, and stay. So are the bare `#N` of the documents about other projects
# (OUTSIDE_DOCS), which cite dozens of them in tables by project.
_NUMBER = r"(?:(?:PRs?|[Ii]ssues?|RFC)\s+)?#?\d+"
_OURS = "|".join(re.escape(name) for name in
                  sorted({p.name for p in ROOT.iterdir() if p.is_dir()} | ROOMS))
_PROJECT = (rf"(?:\b(?!(?:{_OURS})/)[A-Za-z][\w.-]*/[A-Za-z][\w.-]*"
            r"|vLLM|vllm|LiteLLM|litellm|OGX|Codex-Manager)")
OUTSIDE_NUMBERS = re.compile(
    rf"(?:{_PROJECT}:?\s+{_NUMBER}|\bPRs?\s+#\d+|\bRFC\s+#\d+)"
    rf"(?:\s*(?:,|;|/|\+|\(\+?|and)\s*{_NUMBER})*")
# Documents the lead alone edits (they are merged from every branch): swept when merged.
NOT_YET_SWEPT: set[str] = set()


def issue_citations(path: Path, lines: Iterator[tuple[int, str]]) -> list[str]:
    where = path.relative_to(ROOT)
    bare_allowed = where.as_posix() in OUTSIDE_DOCS
    found = []
    for number, text in lines:
        outside = [m.span() for m in OUTSIDE_NUMBERS.finditer(text)]
        worded = list(ISSUE_NUMBER.finditer(text))
        taken = outside + [m.span() for m in worded]  # "Issue #N" is one citation, not two
        bare = [] if bare_allowed else [m for m in BARE_NUMBER.finditer(text)
                                        if not any(a <= m.start() < b for a, b in taken)]
        for match in sorted(worded + bare, key=lambda m: m.start()):
            if not any(start <= match.start() < end for start, end in outside):
                found.append(f"{where}:{number}: {match.group(0)}")
    return found


def test_no_prose_cites_an_issue_by_number() -> None:
    cited = [line for path in sources(repository_files())
             if path.relative_to(ROOT).as_posix() not in NOT_YET_SWEPT
             for line in issue_citations(path, iter(read_prose(path)))]
    assert cited == []


def test_our_issue_numbers_are_caught_and_an_outside_projects_are_not() -> None:
    here = ROOT / "proxy" / "store" / "keys.py"
    lines = iter([(1, "every id before issue 26 (issues 23 and 38); see #29; store/x issue 2"),
                  (2, "Issue #4 point 2, and vLLM runs 256 sequences (issue 25)"),
                  (3, "vllm #57999; PR #40418 and #38190; openai/codex PR #8767; issues #18677, "
                      "#41662; LiteLLM: #22051; BerriAI/litellm #26762 (PR #26750)"),
                  (4, "vllm-project/vllm PR #37938, #35874/#35905; PR #48454 (+#34738)"),
                  (5, "## 3.2 Known failure modes (issues); `&#39;`; color #b00020")])
    outside = ROOT / "docs" / "protocol-2026.md"
    assert issue_citations(outside, iter([(7, "GPTCache | #388, #379; but issue 29")])) == [
        "docs/protocol-2026.md:7: issue 29"]
    assert issue_citations(here, lines) == [
        "proxy/store/keys.py:1: issue 26",
        "proxy/store/keys.py:1: issues 23",
        "proxy/store/keys.py:1: #29",
        "proxy/store/keys.py:1: issue 2",
        "proxy/store/keys.py:2: Issue #4",
        "proxy/store/keys.py:2: issue 25",
    ]
