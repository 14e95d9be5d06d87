"""Every link of the documentation reaches something in the repository.

README.md and the pages under docs/ are read by people who cloned the repository, on
GitHub or in an editor: a link (or image) must be relative, must stay inside the
repository, must name a file or folder that exists, and a ``#fragment`` into a Markdown
file must name one of its headings as GitHub anchors them. No services are needed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent


def documentation(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


# -- reading Markdown --------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_INLINE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text] (one level of nested brackets, as in images)
    r"\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"  # (target
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"  # "optional title")
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)", re.MULTILINE)
_HTML = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
_HTML_ID = re.compile(r"<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` with fenced code blocks blanked (kept as empty lines, so line
    numbers still match) and HTML comments removed."""
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            out.append("")
        elif fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def path_mentions(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, path)`` of every code span in prose that names a relative path
    climbing out of the page's folder (``../…``): a file named to the reader."""
    for number, line in enumerate(prose_lines(text), start=1):
        for match in _CODE_SPAN.finditer(line):
            content = match.group(2).strip()
            if content.startswith("../") and " " not in content:
                yield number, content


def links(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, target)`` of every inline link and image, reference definition and
    HTML ``href``/``src``, outside code."""
    lines = prose_lines(text)
    for number, line in enumerate(lines, start=1):
        line = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for match in _INLINE.finditer(line):
            yield number, match.group(1).strip("<>")
        for match in _HTML.finditer(line):
            yield number, match.group(1)
    for match in _REFERENCE.finditer("\n".join(lines)):
        number = "\n".join(lines)[: match.start()].count("\n") + 1
        yield number, match.group(1).strip("<>")


def heading_texts(text: str) -> Iterator[str]:
    """The text of every ATX and setext heading, in order."""
    lines = prose_lines(text)
    previous = ""
    for line in lines:
        atx = _ATX.match(line)
        if atx:
            yield atx.group(2)
        elif _SETEXT.match(line) and previous.strip() and not _ATX.match(previous):
            if not previous.startswith((" " * 4, "\t", "-", "*", "+", ">", "|")):
                yield previous.strip()
        previous = line


def rendered(heading: str) -> str:
    """What GitHub shows of a heading's Markdown: code without backticks, link and image
    text without their targets, no emphasis markers, no HTML tags."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(2).strip())
        return f"\0{len(spans) - 1}\0"

    text = _CODE_SPAN.sub(keep, heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"\*+", "", text)
    text = re.sub(r"(?<![0-9A-Za-z])_+|_+(?![0-9A-Za-z])", "", text)
    return re.sub(r"\0(\d+)\0", lambda m: spans[int(m.group(1))], text).strip()


def slug(text: str) -> str:
    """GitHub's anchor for a heading's rendered text (github-slugger): lower case; every
    character that is not a letter, mark, number, connector (``_``), hyphen or space
    dropped; each space a hyphen."""
    kept = (
        c
        for c in text.lower()
        if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every fragment that reaches a place in the page: heading anchors (a repeated one
    gets ``-1``, ``-2`` …, as on GitHub) and explicit HTML ``id``/``name`` attributes."""
    found: set[str] = set()
    for heading in heading_texts(text):
        base = slug(rendered(heading))
        candidate, n = base, 0
        while candidate in found:
            n += 1
            candidate = f"{base}-{n}"
        found.add(candidate)
    found.update(_HTML_ID.findall("\n".join(prose_lines(text))))
    return found


# -- checking -----------------------------------------------------------------------------

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of ``page``, one line each, ``path:line: target: why``."""
    root = root.resolve()
    text = page.read_text(encoding="utf-8")
    shown = page.resolve().relative_to(root)
    found: list[str] = []
    for number, target in links(text):
        where = f"{shown}:{number}: {target or '(empty)'}"
        if not target:
            found.append(f"{where}: empty link")
            continue
        if _SCHEME.match(target) or target.startswith("//"):
            found.append(f"{where}: points outside the repository (use a relative link)")
            continue
        path_part, _, fragment = target.partition("#")
        path_part = unquote(path_part.partition("?")[0])
        if path_part.startswith(("/", "\\", "~")):
            found.append(f"{where}: an absolute path (use a path relative to {shown})")
            continue
        resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
        if not resolved.is_relative_to(root):
            found.append(f"{where}: points outside the repository")
            continue
        if not resolved.exists():
            found.append(f"{where}: no such file or folder")
            continue
        if fragment and resolved.is_file() and resolved.suffix.lower() in (".md", ".markdown"):
            wanted = unquote(fragment)
            if wanted not in anchors(resolved.read_text(encoding="utf-8")):
                name = resolved.relative_to(root)
                found.append(f"{where}: no heading of {name} has the anchor #{wanted}")
    for number, mention in path_mentions(text):
        if not (page.parent / mention).resolve().is_relative_to(root):
            found.append(f"{shown}:{number}: {mention}: names a file outside the repository")
    return found


@pytest.mark.parametrize("page", documentation(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_reach_the_repository(page: Path) -> None:
    assert not problems(page), "broken links:\n" + "\n".join(problems(page))


def test_the_documentation_is_found() -> None:
    pages = [p.relative_to(ROOT).as_posix() for p in documentation()]
    assert "README.md" in pages
    assert "docs/architecture.md" in pages and "docs/contract.md" in pages


# -- the checker itself, on pages written here ----------------------------------------------


def test_slugs_follow_github() -> None:
    cases = {
        "Local services: `tidegraph up`, `status`, `down`": (
            "local-services-tidegraph-up-status-down"
        ),
        "Functional predicates and how a relation was superseded": (
            "functional-predicates-and-how-a-relation-was-superseded"
        ),
        "Asking the model about the rest (`contradiction_model`)": (
            "asking-the-model-about-the-rest-contradiction_model"
        ),
        "Why Kafka 4.4.0": "why-kafka-440",
        "Valid time — belief time": "valid-time--belief-time",
        "The **bold** and _emphasised_ [link](x.md)": "the-bold-and-emphasised-link",
        "Café au lait": "café-au-lait",
    }
    for heading, anchor in cases.items():
        assert slug(rendered(heading)) == anchor, heading


def test_repeated_headings_are_numbered() -> None:
    text = "# Setup\n\n## Setup\n\nTitle\n-----\n\n```\n# not a heading\n```\n<a id='here'></a>\n"
    assert anchors(text) == {"setup", "setup-1", "title", "here"}


def test_every_kind_of_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Second part\n")
    (tmp_path / "outside.md").write_text("x")
    readme = tmp_path / "docs" / "index.md"
    readme.write_text(
        "# Index\n\n"
        "[fine](page.md) [fine too](page.md#second-part) [here](#index) ![img](page.md)\n"
        "[gone](missing.md)\n"
        "[bad anchor](page.md#third-part)\n"
        "[shared](../../shared/DESIGN.md)\n"
        "[absolute](/etc/passwd)\n"
        "[web](https://example.org/)\n"
        "![picture](none.png)\n"
        '<img src="none.svg">\n'
        "[ref]: ../nowhere.md\n"
        "`[in code](missing.md)`, `../../shared/CONTRACT.md`, `../page.md`\n"
        "```\n[in a block](missing.md)\n```\n"
    )
    found = problems(readme, tmp_path)
    assert [line.split(": ")[0] for line in found] == [
        "docs/index.md:4",
        "docs/index.md:5",
        "docs/index.md:6",
        "docs/index.md:7",
        "docs/index.md:8",
        "docs/index.md:9",
        "docs/index.md:10",
        "docs/index.md:11",
        "docs/index.md:12",
    ], found
    assert "no such file" in found[0] and "#third-part" in found[1]
    assert "outside the repository" in found[2] and "absolute" in found[3]
    assert "outside the repository" in found[4] and "names a file outside" in found[8]
