"""Every path the docs name exists: a repository path (results/..., scripts/..., docs/..., specviz/..., assets/...,
tests/..., data/...) in the tree, or, written COMMIT:PATH, in the repository's history at that commit (`git show
COMMIT:PATH` gives it); a journal entry (named DATE-COMMIT-...md) may name a path as it stood at its own commit;
every relative link of a Markdown file leads to a file or folder of the tree."""
import fnmatch
import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "assets").rglob("*.md")])
TOP = r"(?:results|scripts|docs|specviz|assets|tests|data|\.ci)"
PATH = re.compile(rf"(?<![\w/.:-])(?:([0-9a-f]{{7,40}}):)?({TOP}/[\w./*-]*[\w*/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")
JOURNAL = re.compile(r"\d{4}-\d{2}-\d{2}-([0-9a-f]{7,40})-")  # a benchmark run's entry: its date and commit
PLACEHOLDERS = {"PATH", "DIR", "FOLDER", "NAME", "KEY", "FILE", "COMMIT", "DATE", "SLUG", "N", "X"}


def placeholder(path: str) -> bool:
    """A path that names a kind of file rather than one (results/DIR/lessons.json, learn-KEY.png)."""
    return bool(PLACEHOLDERS & set(re.split(r"[-_./]", path)))


def named_paths(text: str) -> list[tuple[str | None, str]]:
    """(commit or None, path) of every repository path in a text; a name cut short with "..." (a link's text)
    and placeholders aside."""
    found = []
    for match in PATH.finditer(text):
        commit, path = match.groups()
        if text.startswith(("...", "-..."), match.end()) or placeholder(path):
            continue
        found.append((commit or None, path))
    return found


def links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, anchors aside."""
    targets = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#")[0])
    return [t for t in targets if t]


def in_tree(path: str) -> bool:
    if any(c in path for c in "*?"):
        return any(ROOT.glob(path.rstrip("/")))
    return (ROOT / path).exists()


@functools.cache
def history_files(commit: str) -> frozenset[str] | None:
    """The files of the tree at `commit`, or None where the clone does not hold it."""
    done = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], cwd=ROOT, capture_output=True, text=True)
    return frozenset(done.stdout.splitlines()) if done.returncode == 0 else None


def in_history(commit: str, path: str, files: frozenset[str]) -> bool:
    path = path.rstrip("/")
    return any(fnmatch.fnmatch(f, path) or f.startswith(path + "/") or fnmatch.fnmatch(f, path + "/*")
               for f in files)


def missing(doc: Path, text: str, history=history_files) -> list[str]:
    """What a doc names that is not where it says."""
    out = []
    entry = JOURNAL.match(doc.name)
    for commit, path in named_paths(text):
        if commit is None:
            if in_tree(path):
                continue
            if not entry:
                out.append(path)
                continue
            commit = entry.group(1)  # the entry's run: the path as it stood then (a tool retired since)
        files = history(commit)
        if files is None:
            out.append(f"{commit}:{path} (no such commit in this clone)")
        elif not in_history(commit, path, files):
            out.append(f"{commit}:{path}")
    for target in links(text):
        if not (doc.parent / target).exists():
            out.append(f"link {target}")
    return out


def full_history() -> bool:
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "false"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_path_a_doc_names_exists(doc):
    if not full_history():
        pytest.skip("this clone lacks the repository's history (a shallow clone, or no .git)")
    assert missing(doc, doc.read_text()) == []


def test_a_missing_path_or_history_path_is_caught():
    """The control: a path that is not in the tree, one that is not at the commit named, a commit the clone
    lacks and a broken link are each reported; what exists and placeholders are not. A journal entry's bare
    path is looked for at the entry's own commit too, and only there."""
    history = {"abc1234": frozenset({"results/old/run.json"})}.get
    text = ("`results/nowhere.json`, `abc1234:results/old/run.json`, `abc1234:results/old/other.json`, "
            "`fedcba9:results/x.json`, [gone](nowhere.md), [here](fast-path.md), `scripts/gpu_suite.py`, "
            "`results/DIR/lessons.json`, `docs/benchmarks/*.md`, [docs/benchmarks/2026-11-28-6426b33-...](x).")
    assert missing(ROOT / "docs" / "design.md", text, history) == [
        "results/nowhere.json", "abc1234:results/old/other.json", "fedcba9:results/x.json (no such commit in this "
                                                                  "clone)",
        "link nowhere.md", "link x"]
    entry = ROOT / "docs" / "benchmarks" / "2026-11-26-abc1234-a-run.md"
    assert missing(entry, "`results/old/run.json`, `results/old/other.json`",
                   history) == ["abc1234:results/old/other.json"]
    assert missing(ROOT / "docs" / "design.md", "`results/old/run.json`", history) == ["results/old/run.json"]
