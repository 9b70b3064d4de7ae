"""The repository stands on its own: the contract lives in `docs/`, and every pointer into it
resolves. A clone has nothing outside the repository, so a citation of a document it does not
contain (a product spec, reference notes, their section numbers) leaves the reader stranded."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
THIS_FILE = Path(__file__).resolve()
TEXT_SUFFIXES = {".py", ".md", ".js", ".html", ".css", ".sh", ".toml", ".txt", ".json", ".yml"}

# Citations of documents that live outside the repository.
FOREIGN_CITATIONS = re.compile(
    r"shared/SPEC|\bSPEC\b|reference/|reference §|§|pi-bash-tool|streaming-runner-and-policies"
)
# `docs/api.md#the-text-block` in code, comments and the README.
DOCS_POINTER = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+))?")
# `[text](policy.md#rules)` or `[text](#rules)` inside docs/.
MARKDOWN_LINK = re.compile(r"\]\(([\w-]+\.md)?(?:#([\w-]+))?\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)


def _repository_files(folder: str) -> list[Path]:
    """The folder's files that belong to the repository: tracked or not yet added, but never
    what git ignores (a virtualenv `make bench` creates under bench/ is not our text)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", folder],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        return sorted((ROOT / folder).rglob("*"))
    return sorted(ROOT / name for name in listed.decode().split("\0") if name)


def _checked_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("app", "tests", "bench", "docs"):
        files.extend(
            path
            for path in _repository_files(folder)
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts
        )
    return [path for path in files if path.resolve() != THIS_FILE]


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces → hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors() -> dict[str, set[str]]:
    return {
        path.name: {_anchor(heading) for heading in HEADING.findall(path.read_text("utf-8"))}
        for path in DOCS.glob("*.md")
    }


def test_the_docs_exist_with_an_index() -> None:
    assert {"README.md", "api.md", "policy.md", "streaming.md", "operations.md"} <= set(_anchors())


def test_no_file_cites_a_document_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _checked_files()
        for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1)
        if FOREIGN_CITATIONS.search(line)
    ]
    assert offenders == [], "describe the behaviour or point into docs/ instead:\n" + "\n".join(
        offenders
    )


def test_every_pointer_into_docs_names_an_existing_section() -> None:
    anchors = _anchors()
    broken = []
    for path in _checked_files():
        text = path.read_text("utf-8", errors="replace")
        pointers = DOCS_POINTER.findall(text)
        if path.parent == DOCS:
            pointers += [(name or path.name, frag) for name, frag in MARKDOWN_LINK.findall(text)]
        for name, fragment in pointers:
            if name not in anchors or (fragment and fragment not in anchors[name]):
                broken.append(f"{path.relative_to(ROOT)}: docs/{name}#{fragment}")
    assert broken == [], "no such document or section:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Modes: foreground, job, auto-background", "modes-foreground-job-auto-background"),
        ("The `text` block", "the-text-block"),
        ("Reading, listing, waiting, cancelling", "reading-listing-waiting-cancelling"),
    ],
)
def test_anchors_follow_github_s_rule(heading: str, anchor: str) -> None:
    assert _anchor(heading) == anchor
