"""Reading a text or Markdown file as a document: decoding, title, document order, glob
matching.

Shared by the file connector and the bulk loader so both turn the same file into the same
document version (:func:`file_version`).

Document order (``order_key``, which supersession follows) comes from, per
``--order-key-from``:

* ``front-matter`` (the default): a leading front matter block's ``order_key:`` or, failing
  that, ``date:`` (``---`` lines around ``key: value`` pairs); a file without one is ordered
  by its modification time;
* ``mtime``: the modification time (after a ``git clone`` every file has about the same
  one, and supersession between them falls to the documented tie-break);
* ``name``: the path relative to the folder, for files named by date or number.

Keys are compared as strings: ``1830`` < ``1842``, ``2024-06-30`` < ``2024-07-01``; a file
ordered by its mtime gets ``event_time`` in a fixed-width UTC form.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from tidegraph.connectors.errors import UndecodableSourceError
from tidegraph.schemas import DocumentVersion

TEXT_GLOBS = ("**/*.md", "**/*.markdown", "**/*.txt")
"""Files the file connector and the bulk loader pick up by default."""
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})

OrderFrom = Literal["front-matter", "mtime", "name"]
ORDER_SOURCES: tuple[str, ...] = get_args(OrderFrom)
ORDER_FIELDS = ("order_key", "date")
"""Front matter keys that give the order, the first present wins."""

_FRONT_MATTER_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:[ \t]*(.*?)[ \t]*$")
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def decode_text(data: bytes, path: str) -> str:
    """UTF-8 text (BOM dropped); raises :class:`UndecodableSourceError` for anything else.

    NUL bytes count as binary: no text format uses them and PostgreSQL text cannot hold them.
    """
    if b"\x00" in data:
        raise UndecodableSourceError(path, "contains NUL bytes, looks binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableSourceError(path, f"invalid UTF-8 at byte {exc.start}") from None
    return text.removeprefix("\ufeff")


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """The ``key: value`` pairs of a leading block fenced by ``---`` lines (quotes around a
    value dropped), and the text after it; no block, or an unclosed one: ``({}, text)``."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    fields: dict[str, str] = {}
    for number, line in enumerate(lines[1:], start=1):
        if line.rstrip() in ("---", "..."):
            return fields, "".join(lines[number + 1 :])
        match = _FRONT_MATTER_LINE.match(line.rstrip("\r\n"))
        if match:
            fields[match.group(1).lower()] = match.group(2).strip("\"'")
    return {}, text


def file_version(
    path: Path,
    doc_key: str,
    text: str,
    realm: str,
    *,
    mtime_ns: int,
    space: str,
    source: str,
    order_from: OrderFrom,
) -> DocumentVersion:
    """A file's text as an upsert: title from its heading, ``source_version`` from its mtime,
    ``order_key`` as ``order_from`` says (module docstring)."""
    fields, body = front_matter(text)
    order_key: str | None = None
    if order_from == "name":
        order_key = doc_key
    elif order_from == "front-matter":
        order_key = next((fields[f] for f in ORDER_FIELDS if fields.get(f)), None)
    return DocumentVersion.for_upsert(
        realm,
        doc_key,
        text,
        space=space,
        title=title_of(body, path),
        source=source,
        source_version=str(mtime_ns),
        order_key=order_key,
        event_time=datetime.fromtimestamp(mtime_ns / 1e9, UTC),
    )


def title_of(text: str, path: Path) -> str:
    """First Markdown heading for Markdown files, else the file name without its suffix."""
    if path.suffix.lower() in MARKDOWN_SUFFIXES:
        heading = first_heading(text)
        if heading:
            return heading
    return path.stem or path.name


def first_heading(text: str) -> str | None:
    """The first ATX (``# Title``) or setext (``Title`` over ``===``) heading, outside fences."""
    previous = ""
    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            previous = ""
            continue
        if fenced:
            continue
        match = _ATX_HEADING.match(line)
        if match:
            return match.group(1).strip()
        if previous and _SETEXT_UNDERLINE.match(line):
            return previous
        previous = stripped
    return None


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def matches(relative: str, globs: Iterable[str]) -> bool:
    """Whether a POSIX relative path matches any glob (``**/`` spans folders, ``*`` does not).

    Paths with a hidden component (``.git/``, ``.tidegraph/``, ``.notes.md``) never match.
    """
    if any(part.startswith(".") for part in relative.split("/")):
        return False
    return any(_glob_regex(g).fullmatch(relative) for g in globs)


def passed_over(root: Path, globs: Iterable[str]) -> Counter[str]:
    """Why :func:`walk` leaves files under ``root`` out, and how many: ``hidden`` (a hidden
    file or folder), ``symlink``, or the file's suffix (``.pdf``; ``no suffix``) when no
    glob takes it."""
    patterns = tuple(globs)
    why: Counter[str] = Counter()
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            why["symlink"] += 1
        elif not path.is_file():
            continue
        elif any(part.startswith(".") for part in relative.split("/")):
            why["hidden"] += 1
        elif not matches(relative, patterns):
            why[path.suffix.lower() or "no suffix"] += 1
    return why


def walk(root: Path, globs: Iterable[str]) -> Iterator[tuple[str, Path]]:
    """``(relative POSIX path, path)`` of every regular file under ``root`` matching ``globs``."""
    patterns = tuple(globs)
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        relative = path.relative_to(root).as_posix()
        if matches(relative, patterns):
            yield relative, path
