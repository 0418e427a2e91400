"""The one answer normaliser (``sandboxlite.eval.normalize``): a table per mode, and its callers."""

from __future__ import annotations

import pytest

from sandboxlite.eval.custom import score_row
from sandboxlite.eval.normalize import MODES, Normalizer, normalize
from sandboxlite.eval.scoring import longctx
from sandboxlite.rl import rewards

SQUAD = [
    # acronyms collapse to their letters; no spurious single letters (the old "U.S.A." -> "u s")
    ("U.S.A.", "usa"),
    ("U.S.A", "usa"),
    ("the U.S.A. and the U.K.", "usa and uk"),
    ("e.g. apples", "eg apples"),
    ("i.e., pears", "ie pears"),
    ("D.A. Davidson", "da davidson"),
    ("x.y", "x y"),  # one dot is not an acronym
    # numbers with separators
    ("1,000", "1000"),
    ("$1,338,724", "1338724"),
    ("1,234,567.89", "1234567.89"),
    ("1\u00a0000", "1000"),  # no-break space
    ("1\u202f000\u202f000", "1000000"),  # narrow no-break space
    ("1 000", "1 000"),  # a plain space may separate two numbers
    ("1,2,3", "1 2 3"),
    ("12,34", "12 34"),
    ("Lee,Shebly", "lee shebly"),
    # decimals and negative numbers stay one token
    ("3.14", "3.14"),
    ("3.14.", "3.14"),
    ("$55.2 million", "55.2 million"),
    (".5", ".5"),
    ("v1.2", "v1.2"),
    ("-76%, -42%", "-76 -42"),
    ("\u221276", "-76"),  # the minus sign
    ("(-5)", "-5"),
    ("-1,234.5", "-1234.5"),
    ("2021-2025", "2021 2025"),
    ("Sydney - 4", "sydney 4"),
    # articles: dropped only where they stand as words
    ("The Cat sat on a mat.", "cat sat on mat"),
    ("  An   apple,\tthe\norange!  ", "apple orange"),
    ('"The Iconic"', "iconic"),
    ("**The** answer", "answer"),
    ("a b c d", "b c d"),
    ("A", "a"),  # nothing but an article: an answer letter
    ("The", "the"),
    ("Vitamin-A", "vitamin a"),
    ("A/B testing", "a b testing"),
    ("Brent A. Bracelin", "brent a bracelin"),
    ("Option A: yes", "option a yes"),
    # unicode
    ("Café", "café"),
    ("cafe\u0301", "café"),  # NFKC composes the accent
    ("１２３", "123"),  # full-width digits
    ("ＡＢＣ", "abc"),
    ("New\u00a0York", "new york"),
    ("Straße", "strasse"),
    # whitespace, quotes, trailing punctuation
    ("  hello\n\tworld  ", "hello world"),
    ("", ""),
    (None, ""),
    ("“Quoted” — text", "quoted text"),
    ("don’t", "dont"),
    ("McDonald's", "mcdonalds"),
    ("Paris.", "paris"),
    ("Paris!?", "paris"),
    ("Apple v. Samsung", "apple v samsung"),
    ("hi_there", "hi there"),
]

EXACT = [
    ("U.S.A.", "u.s.a"),
    ("e.g.", "e.g"),
    ("1,000", "1000"),
    ("1\u00a0000", "1000"),
    ("1 000", "1 000"),
    ("3.14", "3.14"),
    ("3.14.", "3.14"),
    ("-76%", "-76%"),
    ("\u221276", "-76"),
    ("A", "a"),
    ("The Cat", "the cat"),
    ("Café", "café"),
    ("cafe\u0301", "café"),
    ("１２３", "123"),
    ("  Paris,\n France ", "paris, france"),
    ('"Paris"', "paris"),
    ("“Paris”", "paris"),
    ("Paris!", "paris"),
    ("**Paris**", "paris"),
    ("$42$", "42"),
    ("\\boxed{42}", "42"),
    ("\\text{m}^2", "m^2"),
    ("Apple v. Samsung", "apple v. samsung"),
    ("...", ""),
    ("", ""),
]

REWARD = [
    ("42.", "42"),
    ("42...", "42..."),  # an ellipsis is not a trailing period
    ("$42$", "42"),
    ("\\boxed{42}", "42"),
    ("$\\boxed{42}$.", "42"),
    ("1,234,567", "1234567"),
    ("-1,234.5", "-1234.5"),
    ("1\u00a0000", "1000"),
    ("1 000", "1 000"),
    ("3.14", "3.14"),
    ("-3", "-3"),
    ("\u22123", "-3"),
    ("U.S.A.", "u.s.a"),
    ("A", "a"),
    ("The Cat", "the cat"),
    ("**42**", "**42**"),  # stricter than "exact"
    ("42!", "42!"),
    ("“42”", '"42"'),
    ("Café", "café"),
    ("１２３", "123"),
    ("  Hello   World. ", "hello world"),
    ("Paris, France", "paris, france"),
    ("line one\nline two", "line one line two"),
    ("", ""),
]

TABLE = [(text, mode, want) for mode, rows in (("squad", SQUAD), ("exact", EXACT), ("reward", REWARD))
         for text, want in rows]  # fmt: skip


@pytest.mark.parametrize("text, mode, expected", TABLE)
def test_normalize_table(text, mode, expected):
    assert normalize(text, mode) == expected


def test_every_mode_has_a_table():
    assert {m for _, m, _ in TABLE} == set(MODES)


def test_unknown_mode_and_custom_normalizer():
    with pytest.raises(ValueError, match="unknown normalisation mode"):
        normalize("x", "nope")
    assert Normalizer(casefold=False, punct=True)("U.S.A. Inc.") == "USA Inc"


def test_old_names_are_aliases():
    for text in ("U.S.A.", "The 1,000 cats.", "$\\boxed{3.14}$"):
        assert longctx.normalize_answer(text) == normalize(text, "squad")
        assert rewards.normalize_answer(text) == normalize(text, "reward")


def test_long_context_scores_acronyms_and_decimals():
    s = longctx.score_long_context("Answer: The U.S.A.", "USA")
    assert s.value == 1.0 and s.details["match"] == "exact" and s.metrics["rouge_l"] == 1.0
    assert longctx.score_long_context("Answer: in the U.S.", "US").value == 1.0
    assert longctx.score_long_context("Answer: $55.2 million", "2").value == 0.0  # not "55 2"
    assert longctx.score_long_context("Answer: it fell by -76%", "76%").value == 0.0
    assert longctx.score_long_context("Answer: 1338724", "$1,338,724").value == 1.0


def test_callers_use_their_mode():
    assert score_row("Answer: 1,042", {"answer": "1042", "scoring": "exact"}).value == 1.0
    assert score_row("Answer: “Paris”", {"answer": "Paris", "scoring": "exact"}).value == 1.0
    assert score_row("Answer: A", {"answer": "a", "scoring": "exact"}).value == 1.0
