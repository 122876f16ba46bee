"""Every relative link of README.md and docs/*.md resolves: the file, and the #anchor in it.

Anchors follow GitHub's rule for headings: the heading's text (inline code and
links reduced to their text) lowercased, punctuation dropped, spaces to '-', and
'-1', '-2', ... after a repeated one. Links inside code blocks and spans are
not links; links to other sites are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """The text without fenced code blocks."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links to their text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' (repeats numbered) and explicit HTML ones."""
    found: set[str] = set(_HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(prose(text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """Every link target of a page outside code, in order."""
    body = _CODE_SPAN.sub("", prose(text))
    return _LINK.findall(body) + _REFERENCE.findall(body)


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """'page: target (why)' for every relative link of `page` that does not resolve."""
    found = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # another site, mail
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        name = f"{page.relative_to(root)}: {target}"
        if not where.exists():
            found.append(f"{name} (no such file)")
        elif root.resolve() not in [where, *where.parents]:
            found.append(f"{name} (outside the repository)")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
            found.append(f"{name} (no such heading)")
    return found


def test_slugs_follow_github():
    assert slug("Reading `ops.parquet`: the columns (v1.5)") == "reading-opsparquet-the-columns-v15"
    assert slug("The [API](api.md) & more") == "the-api--more"
    assert slug("Steps_and phases") == "steps_and-phases"
    page = '# Usage\n## Usage\n```\n# not a heading\n```\n<a name="here"></a>\n'
    assert anchors(page) == {"usage", "usage-1", "here"}


def test_broken_finds_missing_files_and_anchors(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# The B page\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/b.md#the-b-page) [self](#top) [gone](b.md) [bad](docs/b.md#nope)\n"
        "# Top\n`[code](x.md)` [web](https://example.com/x.md) ![img](docs/b.md)\n"
        "```\n[fenced](y.md)\n```\n[ref]: docs/c.md\n"
    )
    assert broken(page, tmp_path) == [
        "README.md: b.md (no such file)",
        "README.md: docs/b.md#nope (no such heading)",
        "README.md: docs/c.md (no such file)",
    ]


def test_every_relative_link_of_the_docs_resolves():
    assert [line for page in PAGES for line in broken(page)] == []
