"""nsysmap.core.inert: each renderer's way of showing a name from a profile as data.

Markdown is checked by rendering it with markdown-it (CommonMark, raw HTML on as
by default, GFM tables on): a name in a code span comes back character for
character, prose comes back as the text it was, and neither makes an HTML
block, inline HTML, a link, an image, a heading or emphasis. Plotly's escapes
are checked against what plotly.js decodes (`&amp;`, `&lt;`, `&gt;`).
"""

from __future__ import annotations

import html
import re
from functools import cache

import pytest
from markdown_it import MarkdownIt

from nsysmap.core.inert import (
    markdown_cell,
    markdown_code,
    markdown_text,
    plotly_text,
    terminal_text,
    visible,
)
from tests.hostile_names import CONTROLS, NAMES

MARKUP_TOKENS = {"html_block", "html_inline", "link_open", "image", "heading_open", "em_open"}
MARKUP_TOKENS |= {"strong_open", "s_open", "blockquote_open", "bullet_list_open", "hr"}
MARKUP_TOKENS |= {"ordered_list_open", "code_block", "fence", "lheading"}
NAMED = [pytest.param(name, id=key) for key, name in NAMES.items()]
EDGES = ["", " ", "  x  ", "`", "``", "` x `", "a ` b", "x`", "`x", "\\", "\\`", "a\\|b", "|"]
EDGES += ["1. first", "- item", "# h", "> q", "===", "---", "+ p", "__init__", "snake_case"]
EDGES += ["www.pwned.invalid", "a@pwned.invalid", "&amp; &lt;", "\ud800", "\U000e0001 tag"]


@cache
def markdown() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def tokens(text: str) -> list:
    """Every token of `text` rendered, inline children included."""
    out = []
    for token in markdown().parse(text):
        out.append(token)
        out.extend(token.children or [])
    return out


def markup(text: str) -> set[str]:
    return {t.type for t in tokens(text)} & MARKUP_TOKENS


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_visible_leaves_no_control_character_and_is_idempotent(name):
    shown = visible(name)
    assert not set(shown) & CONTROLS
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in shown)
    assert visible(shown) == shown
    assert terminal_text(name) == shown


def test_visible_writes_escapes_and_keeps_everything_else():
    assert visible("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert visible("l1\nl2\r\t") == "l1\\nl2\\r\\t"
    assert visible("\u202eevil\u200b\ufeff") == "\\u202eevil\\u200b\\ufeff"
    assert visible("\x9b\x7f\U000e0001") == "\\x9b\\x7f\\U000e0001"
    kept = "void at::native::k<float>(int*) élan 日本 \\x1b ✓"
    assert visible(kept) == kept


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_a_code_span_shows_the_name_and_nothing_else(name):
    span = markdown_code(name)
    found = [t for t in tokens(span) if t.type == "code_inline"]
    assert [t.content for t in found] == [visible(name) or " "]
    assert not markup(span)


def row_cells(cell: str) -> list[str]:
    """The cells of a one-row table whose first cell is `cell` and second `1`, rendered."""
    rendered = markdown().render(f"| name | n |\n|---|---|\n| {markdown_cell(cell)} | 1 |\n")
    return re.findall(r"<td>(.*?)</td>", rendered, re.S)


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_a_code_span_in_a_table_cell_keeps_the_row_whole(name):
    cells = row_cells(markdown_code(name))
    assert len(cells) == 2 and cells[1] == "1"
    code = re.fullmatch(r"<code>(.*)</code>", cells[0], re.S)
    assert code is not None and html.unescape(code.group(1)) == (visible(name) or " ")


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_prose_quoting_a_name_renders_as_the_same_text(name):
    line = f"- The GPU {name!r} and {name} are not in the table of peaks."
    text = markdown_text(line)
    assert not markup(text) - {"bullet_list_open"}
    plain = markdown_text(f"{name} x")
    assert not markup(plain)
    inline = [t for t in tokens(plain) if t.type == "inline"]
    shown = "".join(c.content for t in inline for c in t.children if c.type != "softbreak")
    # backticks that pair up in a name open code spans (literal text too): compare the rest
    assert _letters(shown) == _letters(visible(f"{name} x"))


def _letters(text: str) -> str:
    return re.sub(r"[`\s]", "", text)


def test_prose_keeps_its_own_code_spans():
    text = "run `nsysmap run SCRIPT` or see `flops.parquet`; a <b>name</b> [x](y)"
    rendered = markdown().render(markdown_text(text))
    assert rendered.count("<code>") == 2
    assert "<code>flops.parquet</code>" in rendered
    assert "&lt;b&gt;name&lt;/b&gt; [x](y)" in rendered


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_prose_in_a_table_cell_keeps_the_row_whole(name):
    cells = row_cells(markdown_text(name))
    assert len(cells) == 2 and cells[1] == "1"
    shown = html.unescape(re.sub(r"</?code>", "", cells[0]))
    assert _letters(shown) == _letters(visible(name))


@pytest.mark.parametrize("name", [*NAMED, *EDGES])
def test_plotly_text_has_no_tag_and_decodes_to_the_name(name):
    shown = plotly_text(name)
    assert "<" not in shown and ">" not in shown
    # plotly.js decodes these entities (and numeric ones) when it draws a label
    decoded = re.sub(r"&(amp|lt|gt);", lambda m: {"amp": "&", "lt": "<", "gt": ">"}[m[1]], shown)
    assert decoded == visible(name)
