"""Snippets of search hits, made from the stored text around the first
matching word (asking FTS5 for them would run the query's matching again)."""

from __future__ import annotations

import re
import unicodedata

#: words of context a snippet shows around the match
SNIPPET_TOKENS = 16

_WORD = re.compile(r"\w+")
_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})


def _fold(word: str) -> str:
    """A word as the index's tokenizer compares it: case and diacritics folded."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def query_terms(query: str) -> list[tuple[str, bool]]:
    """The words of an FTS5 query, folded, each with whether it is a prefix (``pre*``)."""
    terms = []
    for match in re.finditer(r"(\w+)(\*?)", query):
        if match.group(1) not in _OPERATORS:
            terms.append((_fold(match.group(1)), bool(match.group(2))))
    return terms


def snippet(body: str, terms: list[tuple[str, bool]], width: int = SNIPPET_TOKENS) -> str:
    """About ``width`` words of ``body`` around its first matching word, matched
    words marked ``**so**`` (made here from the stored text: asking FTS5 for
    snippets would run the query's matching again)."""
    def matches(word: str) -> bool:
        folded = _fold(word)
        return any(folded.startswith(t) if prefix else folded == t for t, prefix in terms)

    words = list(_WORD.finditer(body))
    first = next((i for i, w in enumerate(words) if matches(w.group())), 0)
    lo = max(0, min(first - width // 3, len(words) - width))
    window = words[lo:lo + width]
    if not window:
        return body[:200]
    out, at = [], window[0].start()
    for word in window:
        out.append(body[at:word.start()])
        out.append(f"**{word.group()}**" if matches(word.group()) else word.group())
        at = word.end()
    end = window[-1].end()
    text = "".join(out) + (body[end:] if lo + width >= len(words) else "")
    return ("…" if window[0].start() > 0 else "") + text.strip() + ("…" if lo + width < len(words) else "")
