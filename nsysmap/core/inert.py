"""Names from a profile shown as data, never as markup or control: one function per renderer.

Kernel, range, module, operator and device names are whatever the profile
holds: `<svg onload=...>`, a `|` and a newline, an escape sequence that
retitles a terminal. Every renderer shows them through this module:

* `visible(text)`: control characters (C0, DEL, C1), format characters (bidi
  controls, zero-width characters, the byte-order mark), line and paragraph
  separators and lone surrogates written as escapes (`\\x1b`, `\\n`,
  `\\u202e`); every other character as it is, a backslash included. Every
  function below starts with it; the terminal texts (`terminal_text`) use it alone.
* `markdown_code(text)`: a CommonMark code span whose fence is longer than any
  run of backticks in the name, padded where the name starts or ends with one.
* `markdown_text(text)`: prose of nsysmap's own that may quote a name (a note,
  an error message): its code spans kept, every character outside them that
  could start markup backslash-escaped.
* `markdown_cell(text)`: a table cell: every `|` escaped (GFM tables split on
  unescaped pipes, inside code spans too).
* `plotly_text(text)`: a label, legend entry or hover text of a Plotly chart:
  `&`, `<` and `>` as entities, which Plotly shows as the characters.

A name too long for its line or cell is cut (`clipped`, or a renderer's own
cut); `distinct_cuts` gives the rows of one table that would read alike once
cut, their names being different, labels that show where the names differ.

answers.json is data and keeps every name as the profile wrote it (JSON-escaped);
these functions only change how a renderer shows one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

# Categories shown escaped: controls, format characters, line and paragraph
# separators, surrogates (unpaired, from a JSON trace's \ud800).
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")
_BACKTICKS = re.compile(r"`+")
# Characters of prose that can start inline markup (emphasis, links, raw HTML,
# entities, autolinks, tables), escaped outside code spans; '_' unless between two
# letters or digits (where it cannot emphasise), ':' only in '://', '.' only after
# 'www' (GFM's bare-URL autolinks).
_MARKUP = re.compile(r"[\\*~\[\]<>&|@]|(?<![^\W_])_|_(?![^\W_])|:(?=//)|(?<=www)\.")
# Line-start constructs: headings, quotes, list items (`-`, `+`, `1.`, `1)`),
# thematic breaks, setext underlines.
_LINE_START = re.compile(r"^(\s*\d*)([#>+=.)-])")
# Where a cut name's head may end and its window begin: after a space, else after any
# character that is no letter, digit or underscore (a dot, a bracket, a quote).
_SPACE = re.compile(r"\s")
_NON_WORD = re.compile(r"\W")
# Rows still alike once shown where they depart from their nearest text are shown where
# they depart from each other, at most this many times in all; then numbered.
_ROUNDS = 3


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _HIDDEN:
        return char
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def clipped(text: str, width: int) -> str:
    """`text` cut to `width` characters, its last an ellipsis where it was cut (a name
    shown in a line or a cell; answers.json keeps it whole)."""
    return f"{text[: width - 1]}…" if len(text) > width else text


def distinct_cuts(texts: Sequence[str], labels: Sequence[str], width: int) -> list[str]:
    """`labels` (each of `texts` as cut to at most `width` characters), except where rows
    read alike and their texts differ: each of those shows where its text departs from
    the nearest of the others (then, of rows still alike, from the nearest of those):
    its head (a quarter of `width` at most, ended at a space), `…`, then the text from a
    little before that point (its tail when the text ends there), `…` where still cut.
    Texts alike even there (a path that repeats itself, each one level deeper) are
    numbered ` [1]`, ` [2]`, ... from the shortest; no two different texts then share a
    label unless a text itself ends like such a number."""
    out = list(labels)
    at: dict[int, int] = {}  # where a row's text departs from the nearest other's
    for _ in range(_ROUNDS):  # rows alike again are told apart among themselves
        for rows in _alike(texts, out):
            order = sorted({texts[i] for i in rows})
            for i in rows:
                k = order.index(texts[i])
                near = [order[j] for j in (k - 1, k + 1) if 0 <= j < len(order)]
                at[i] = max(_common(texts[i], other) for other in near)
                out[i] = _window(texts[i], at[i], width)
    alike = [i for rows in _alike(texts, out) for i in rows]
    order = sorted({texts[i] for i in alike}, key=lambda text: (len(text), text))
    for i in alike:
        tag = f" [{order.index(texts[i]) + 1}]"
        room = width - len(tag)
        out[i] = (_window(texts[i], at[i], room) if i in at else clipped(out[i], room)) + tag
    return out


def _alike(texts: Sequence[str], labels: Sequence[str]) -> list[list[int]]:
    """The rows of each label that two or more different texts share."""
    rows: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        rows.setdefault(label, []).append(i)
    return [found for found in rows.values() if len({texts[i] for i in found}) > 1]


def _common(a: str, b: str) -> int:
    """How many characters `a` and `b` begin with alike (compared a block at a time: a
    kernel's name may be megabytes long)."""
    n, at, block = min(len(a), len(b)), 0, 64
    while at < n and a[at : at + block] == b[at : at + block]:
        at, block = at + block, min(2 * block, 1 << 16)
    while at < n and a[at] == b[at]:
        at += 1
    return min(at, n)


def _word_start(text: str, k: int) -> bool:
    """Whether a word of letters, or a bracket or quote, starts at `k` (`site` of
    `python3.10/site`, `torch` of `function: torch::`, `(Linear)`)."""
    starts = text[k].isalpha() or text[k] in "([{<'\""
    return starts and _NON_WORD.match(text, k - 1) is not None


def _window(text: str, at: int, width: int) -> str:
    """`text` in at most `width` characters, its character `at` (or its end) shown."""
    if len(text) <= width:
        return text
    quarter = width // 4
    head = text[:quarter]
    ends = [m.end() for m in _SPACE.finditer(head)] or [m.end() for m in _NON_WORD.finditer(head)]
    head = head[: ends[-1]] if ends else head
    room = width - len(head) - 1
    start = min(at - quarter, len(text) - room)  # a little before `at`, or the tail whole
    if start <= len(head):  # `at` within the plain cut
        return clipped(text, width)
    start = next((k for k in range(start, at) if _word_start(text, k)), start)
    return f"{head}…{clipped(text[start:], room)}"


def visible(text: object) -> str:
    """`text` with every control, format and separator character written as an escape."""
    value = str(text)
    if not _NOT_PRINTABLE_ASCII.search(value):
        return value
    return _NOT_PRINTABLE_ASCII.sub(lambda m: _escape(m.group()), value)


def terminal_text(text: object) -> str:
    """A name as a terminal shows it: nothing that moves the cursor, recolours or retitles."""
    return visible(text)


def markdown_code(text: object) -> str:
    """A name as a CommonMark code span: shown character for character, never markup."""
    value = visible(text)
    if not value:  # no empty code span exists: one space, shown as one
        return "` `"
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * (longest + 1)
    spaced = value.startswith(" ") and value.endswith(" ") and value.strip(" ")
    pad = " " if value[0] == "`" or value[-1] == "`" or spaced else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def markdown_cell(text: object) -> str:
    """A Markdown table cell: every pipe escaped, so that a name never splits the row."""
    return str(text).replace("|", "\\|")


def markdown_text(text: object) -> str:
    """Prose that may quote a name: code spans kept as they are, markup escaped elsewhere."""
    value = visible(text)
    out: list[str] = []
    at = 0
    while (run := _BACKTICKS.search(value, at)) is not None:
        out.append(_MARKUP.sub(r"\\\g<0>", value[at : run.start()]))
        close = _closing(value, run)
        if close is None:  # no closing run: literal backticks
            out.append("\\`" * len(run.group()))
            at = run.end()
        else:
            out.append(value[run.start() : close])
            at = close
    out.append(_MARKUP.sub(r"\\\g<0>", value[at:]))
    return _LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), "".join(out), count=1)


def _closing(value: str, opening: re.Match[str]) -> int | None:
    """Where the code span opened by `opening` ends: after the next backtick run of the
    same length (CommonMark's rule); None when there is none."""
    for run in _BACKTICKS.finditer(value, opening.end()):
        if len(run.group()) == len(opening.group()):
            return run.end()
    return None


def plotly_text(text: object) -> str:
    """A name as Plotly shows it in a label, legend or hover text: as text, not markup."""
    value = visible(text)
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plotly_texts(texts: Iterable[object]) -> list[str]:
    """`plotly_text` of each."""
    return [plotly_text(t) for t in texts]
