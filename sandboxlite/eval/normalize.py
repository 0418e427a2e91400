"""One answer normaliser for every rule-based scorer and reward: ``normalize(text, mode=...)``.

A :class:`Normalizer` is a set of named steps; the presets in ``MODES`` are what the callers use:

``"squad"`` (long-context and QED scoring, ``rouge_l``): SQuAD-style bag of words.
    NFKC, casefold, thousands separators dropped, dotted acronyms collapsed ("U.S.A." and
    "U.S.A" -> "usa", "e.g." -> "eg"), apostrophes inside a word dropped ("don't" -> "dont"),
    every other punctuation or symbol character to a space ("2021-2025" -> "2021 2025") except
    the decimal point of a number ("3.14"), a leading minus sign ("-76%" -> "-76") and a leading
    point (".5"); the articles a/an/the dropped where they stand as a word of their own
    (whitespace around them, maybe a quote, bracket or ``*`` before or a quote or ``*`` after),
    so "vitamin-A", "A/B", "A." and "A:" keep their letter, and an answer made of nothing but
    articles (a bare "A") is kept; whitespace collapsed to single spaces.

``"exact"`` (custom JSONL ``exact`` and ``contains`` scoring): one string, lightly cleaned.
    NFKC, thousands separators dropped, ``\\text{x}`` -> ``x``, a surrounding ``$...$`` or
    ``\\boxed{...}`` peeled, casefold, whitespace collapsed, and the characters `` .,;:!?"'`*$``
    stripped from both ends; inner punctuation and articles are kept ("Paris, France").

``"reward"`` (``sandboxlite.rl.rewards.exact_match``): like ``"exact"`` but only a single trailing
    period comes off the ends ("42." -> "42", an ellipsis "..." stays), so "**42**" or "42!" is
    not "42"; numbers are compared by value by the caller.

In every mode "unicode" also means: curly quotes to ASCII quotes (‘’ -> ', “” -> ") and the
minus sign U+2212 to "-"; thousands separators are a comma, a no-break space, a narrow no-break
space or a thin space between groups of three digits ("1,000", "1\\u00a0000" -> "1000"; a plain
space is not one: "5 100" may be two numbers); accents are kept ("café").
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["MODES", "Normalizer", "normalize"]

_FOLD = str.maketrans({"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"', "\u2212": "-"})
_SEP = ",\u00a0\u202f\u2009\uff0c"  # comma, no-break, narrow no-break, thin space, full-width comma
# 1-3 digits, then groups of three behind one consistent separator; not part of a longer digit run
_GROUPED = re.compile(rf"(?<![\d.])\d{{1,3}}([{_SEP}])\d{{3}}(?:\1\d{{3}})*(?!\d|[{_SEP}]\d)")
_SEPARATORS = re.compile(f"[{_SEP}]")
_TEXT = re.compile(r"\\text\{([^{}]*)\}")
_BOXED = re.compile(r"^\\boxed\{(.*)\}$", re.S)
_ACRONYM = re.compile(r"(?<![\w.])[^\W\d_](?:\.[^\W\d_]){1,}\.?(?!\w)")
_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")
_ARTICLE = re.compile(r"[\"'`*_(\[{]*(?:a|an|the)[\"'`*_]*")
_PUNCT = re.compile(r"[^\w\s]|_")


def _join_groups(s: str) -> str:
    return _GROUPED.sub(lambda m: _SEPARATORS.sub("", m.group()), s)


def _collapse_acronym(m: re.Match) -> str:
    found = m.group()
    return found.replace(".", "") if found.count(".") >= 2 else found  # "U.S." but not "x.y"


def _punct_to_space(s: str) -> str:
    def repl(m: re.Match) -> str:
        ch, i = m.group(), m.start()
        if ch != "_" and unicodedata.category(ch)[0] not in "PS":
            return ch  # a combining mark or the like: part of the word
        prev, nxt, after = s[i - 1 : i], s[i + 1 : i + 2], s[i + 2 : i + 3]
        word_before = prev.isalnum() or prev == "_"
        if ch == "." and nxt.isdigit() and (prev.isdigit() or not word_before):
            return ch  # 3.14, .5
        if ch == "-" and not word_before and (nxt.isdigit() or (nxt == "." and after.isdigit())):
            return ch  # -76, -.5 (but 2021-2025 splits)
        return " "

    return _PUNCT.sub(repl, s)


def _drop_articles(s: str) -> str:
    words = s.split()
    kept = [w for w in words if not _ARTICLE.fullmatch(w)]
    return " ".join(kept if kept else words)  # a bare "A" is an answer, not an article


@dataclass(frozen=True)
class Normalizer:
    """The steps of one normalisation, applied in this order (see the module docstring)."""

    numbers: bool = True  # drop thousands separators: "1,000" -> "1000"
    unicode: bool = True  # NFKC, curly quotes to ASCII, U+2212 to "-"
    latex: bool = False  # \text{x} -> x; peel a surrounding $...$ / \boxed{...}
    casefold: bool = True
    strip: str = ""  # characters stripped from both ends
    trailing_period: bool = False  # one trailing "." off (not an ellipsis)
    punct: bool = False  # punctuation to spaces, keeping numbers and acronyms whole
    articles: bool = False  # drop a/an/the standing as words

    def __call__(self, text: str | None) -> str:
        s = text or ""
        if self.numbers:
            s = _join_groups(s)  # before NFKC, which turns a no-break space into a space
        if self.unicode:
            s = unicodedata.normalize("NFKC", s).translate(_FOLD)
        if self.latex:
            s = _TEXT.sub(r"\1", s)
        if self.casefold:
            s = s.casefold()
        s = " ".join(s.split())
        for _ in range(3):  # peel $...$, \boxed{...}, end characters, in any nesting
            before = s
            if self.latex:
                if len(s) >= 2 and s[0] == s[-1] == "$":
                    s = s[1:-1].strip()
                m = _BOXED.match(s)
                if m:
                    s = m.group(1).strip()
            if self.trailing_period and s.endswith(".") and not s.endswith(".."):
                s = s[:-1].rstrip()
            if self.strip:
                s = s.strip(self.strip)
            if s == before:
                break
        if self.articles:
            s = _drop_articles(s)
        if self.punct:
            s = _ACRONYM.sub(_collapse_acronym, s)
            s = _APOSTROPHE.sub("", s)
            s = " ".join(_punct_to_space(s).split())
        return s


MODES: dict[str, Normalizer] = {
    "squad": Normalizer(punct=True, articles=True),
    "exact": Normalizer(latex=True, strip=" .,;:!?\"'`*$"),
    "reward": Normalizer(latex=True, trailing_period=True),
}


def normalize(text: str | None, mode: str = "squad") -> str:
    """``text`` normalised by the preset ``mode`` (``"squad"``, ``"exact"`` or ``"reward"``)."""
    try:
        normalizer = MODES[mode]
    except KeyError:
        raise ValueError(f"unknown normalisation mode {mode!r} (expected one of {', '.join(MODES)})") from None
    return normalizer(text)
