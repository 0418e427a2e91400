"""One small checker per IFBench instruction id: ``(response: str, **kwargs) -> bool``.

Each checker reads only the keyword arguments it documents (the data's ``kwargs`` dicts, with null
values already dropped by the caller) and ignores any other, including ``prompt`` which
``score_ifbench`` passes to every checker.  A missing required argument raises ``ValueError``.
Words, sentences, paragraphs and syllables are defined in ``text.py``.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import Counter
from typing import Any, Callable

from . import text as T

Checker = Callable[..., bool]

CHECKERS: dict[str, Checker] = {}


def checker(instruction_id: str) -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        if instruction_id in CHECKERS:
            raise ValueError(f"duplicate IFBench checker for {instruction_id!r}")
        CHECKERS[instruction_id] = fn
        fn.instruction_id = instruction_id  # type: ignore[attr-defined]
        return fn
    return register


def _need(value: Any, name: str) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"this IFBench instruction needs the keyword argument {name!r}")
    return value


def _int(value: Any, name: str) -> int:
    return int(round(float(_need(value, name))))


def _num(value: Any, name: str) -> float:
    return float(_need(value, name))


# ============================================================================ count:*

@checker("count:conjunctions")
def conjunctions(response: str, small_n: Any = None, **_: Any) -> bool:
    """Uses at least ``small_n`` different coordinating conjunctions (for, and, nor, but, or, yet, so)."""
    used = {w for w in T.lower_words(response) if w in T.COORDINATING_CONJUNCTIONS}
    return len(used) >= _int(small_n, "small_n")


_KEYWORD_TIMES = (("keyword1", 1), ("keyword2", 2), ("keyword3", 3), ("keyword4", 5), ("keyword5", 7))


@checker("count:keywords_multiple")
def keywords_multiple(response: str, **kwargs: Any) -> bool:
    """keyword1..keyword5 occur as whole words (any case) exactly 1, 2, 3, 5 and 7 times."""
    given = [(kwargs[k], n) for k, n in _KEYWORD_TIMES if kwargs.get(k)]
    if not given:
        raise ValueError("count:keywords_multiple needs keyword1..keyword5")
    return all(len(T.whole_word_pattern(str(kw)).findall(response)) == n for kw, n in given)


_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def numbers_in(text: str) -> list[str]:
    """Digit-written numbers: ``3``, ``3.14``, ``1,000`` each count once; ``2024-01-01`` and ``1,2,3`` are three;
    digits glued to letters (``H2O``, ``v2``) are not numbers, while ``COVID-19`` and ``1990s`` hold one."""
    return _NUMBER.findall(text)


@checker("count:numbers")
def numbers(response: str, N: Any = None, **_: Any) -> bool:
    """Contains exactly ``N`` numbers written with digits (``3.14`` and ``1,000`` count once each)."""
    return len(numbers_in(response)) == _int(N, "N")


PERSON_NAMES = (
    "Emma", "Liam", "Sophia", "Jackson", "Olivia", "Noah", "Ava", "Lucas", "Isabella", "Mason", "Mia",
    "Ethan", "Charlotte", "Alexander", "Amelia", "Benjamin", "Harper", "Leo", "Zoe", "Daniel", "Chloe",
    "Samuel", "Lily", "Matthew", "Grace", "Owen", "Abigail", "Gabriel", "Ella", "Jacob", "Scarlett",
    "Nathan", "Victoria", "Elijah", "Layla", "Nicholas", "Audrey", "David", "Hannah", "Christopher",
    "Penelope", "Thomas", "Nora", "Andrew", "Aria", "Joseph", "Claire", "Ryan", "Stella", "Jonathan",
)


_PERSON_NAME = re.compile(r"(?<!\w)(" + "|".join(PERSON_NAMES) + r")(?!\w)")


@checker("count:person_names")
def person_names(response: str, N: Any = None, **_: Any) -> bool:
    """Mentions at least ``N`` different names from the prompt's fixed list of 50 (capitalised, whole words)."""
    return len(set(_PERSON_NAME.findall(response))) >= _int(N, "N")


@checker("count:pronouns")
def pronouns(response: str, N: Any = None, **_: Any) -> bool:
    """Contains at least ``N`` pronouns (personal, possessive, reflexive, demonstrative, relative, indefinite)."""
    letters = re.findall(r"[a-z]+", T.fold(response))  # "it's" -> it, s;  "she/her" -> she, her
    return sum(1 for w in letters if w in T.PRONOUNS) >= _int(N, "N")


_INTERROBANG = re.compile(r"\?!|!\?|\u203d")


@checker("count:punctuation")
def punctuation(response: str, **_: Any) -> bool:
    """Uses . , ? ! ; : each at least once, plus an interrobang (?!, !? or ‽) on top of them."""
    m = _INTERROBANG.search(response)
    if not m:
        return False
    rest = response[:m.start()] + response[m.end():]
    return all(mark in rest for mark in ".,?!;:")


@checker("count:unique_word_count")
def unique_word_count(response: str, N: Any = None, **_: Any) -> bool:
    """Uses at least ``N`` distinct words (case-insensitive)."""
    return len(set(T.lower_words(response))) >= _int(N, "N")


@checker("count:word_count_range")
def word_count_range(response: str, min_words: Any = None, max_words: Any = None, **_: Any) -> bool:
    """Has between ``min_words`` and ``max_words`` words, inclusive (either bound may be absent, not both)."""
    if min_words is None and max_words is None:
        raise ValueError("count:word_count_range needs min_words or max_words")
    n = len(T.words(response))
    lo = _int(min_words, "min_words") if min_words is not None else 0
    hi = _int(max_words, "max_words") if max_words is not None else n
    return lo <= n <= hi


@checker("count:words_japanese")
def words_japanese(response: str, N: Any = None, **_: Any) -> bool:
    """Every ``N``-th word (N, 2N, ...) is Japanese (kana/kanji) or a bare number; needs at least N words."""
    n = _int(N, "N")
    ws = T.words(response)
    if n < 1 or len(ws) < n:
        return False
    for i in range(n - 1, len(ws), n):
        w = ws[i]
        if not T.has_japanese(w) and not re.fullmatch(r"[\d.,]+", w):
            return False
    return True


# ============================================================================ custom:*

def _reversal_core(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9\s]", " ", T.fold(text)).split())


@checker("custom:character_reverse")
def character_reverse(response: str, **_: Any) -> bool:
    """The answer (the bald eagle) is written letter-reversed: contains 'elgae dlab' and not 'bald eagle'."""
    core = _reversal_core(response)
    return "elgae dlab" in core and "bald eagle" not in core


@checker("custom:word_reverse")
def word_reverse(response: str, **_: Any) -> bool:
    """The answer (the bald eagle) is written in reversed word order: 'eagle bald' appears, 'bald eagle' does not."""
    core = _reversal_core(response)
    return bool(re.search(r"\beagle bald\b", core)) and "bald eagle" not in core


def _split_csv_line(line: str, delim: str) -> list[tuple[str, bool]] | None:
    """Fields of one CSV line as (value, was_quoted); None for an unterminated quote."""
    fields: list[tuple[str, bool]] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] == " " and delim != " ":
            i += 1
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while True:
                if i >= n:
                    return None
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(line[i])
                i += 1
            while i < n and line[i] in " \t" and line[i] != delim:
                i += 1
            fields.append(("".join(buf), True))
            if i >= n:
                return fields
            if line[i] != delim:
                return None
            i += 1
        else:
            j = line.find(delim, i)
            if j == -1:
                fields.append((line[i:].strip(), False))
                return fields
            fields.append((line[i:j].strip(), False))
            i = j + 1


def _csv_rows(response: str, delim: str) -> list[list[tuple[str, bool]]] | None:
    rows = []
    for line in response.strip("\n").split("\n"):
        if not line.strip():
            continue
        row = _split_csv_line(line.rstrip("\r"), delim)
        if row is None:
            return None
        rows.append(row)
    return rows


def _csv_shape_ok(rows: list[list[tuple[str, bool]]] | None, header: list[str], n_rows: int) -> bool:
    if rows is None or len(rows) != n_rows + 1:
        return False
    if [v for v, _ in rows[0]] != header:
        return False
    return all(len(r) == len(header) and all(v for v, _ in r) for r in rows[1:])


@checker("custom:csv_city")
def csv_city(response: str, **_: Any) -> bool:
    """Only CSV: header ID,Country,City,Year,Count, then exactly 7 comma-delimited rows of 5 non-empty fields."""
    return _csv_shape_ok(_csv_rows(response, ","), ["ID", "Country", "City", "Year", "Count"], 7)


@checker("custom:csv_quotes")
def csv_quotes(response: str, **_: Any) -> bool:
    """Only tab-delimited data: StudentID..Score header and 3 rows, every field in double quotes."""
    rows = _csv_rows(response, "\t")
    if not _csv_shape_ok(rows, ["StudentID", "Subject", "Grade", "Semester", "Score"], 3):
        return False
    return all(quoted for row in rows or [] for _, quoted in row)


@checker("custom:csv_special_character")
def csv_special_character(response: str, **_: Any) -> bool:
    """Only CSV: ProductID..Stock header, 14 rows, a double-quoted field holding a special character."""
    rows = _csv_rows(response, ",")
    if not _csv_shape_ok(rows, ["ProductID", "Category", "Brand", "Price", "Stock"], 14):
        return False
    return any(quoted and re.search(r"[^\w\s]", value) and not re.fullmatch(r"-?\d+(?:[.,]\d+)*", value)
               for row in (rows or [])[1:] for value, quoted in row)


@checker("custom:date_format_list")
def date_format_list(response: str, **_: Any) -> bool:
    """Only a comma-separated list of valid YYYY-MM-DD dates within Napoleon's lifetime (1769-1821); no explanation."""
    body = response.strip()
    if body.endswith("."):
        body = body[:-1]
    items = [d.strip() for d in body.split(",")]
    if not items or not all(items):
        return False
    for d in items:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", d):
            return False
        try:
            day = _dt.date.fromisoformat(d)
        except ValueError:
            return False
        if not 1769 <= day.year <= 1821:
            return False
    return True


# capitals of European countries north of 45°N, by latitude (degrees N), with accepted spellings
EUROPEAN_CAPITALS_NORTH_OF_45 = (
    ("Reykjavik", 64.15), ("Helsinki", 60.17), ("Oslo", 59.91), ("Tallinn", 59.44),
    ("Stockholm", 59.33), ("Riga", 56.95), ("Moscow", 55.76), ("Copenhagen", 55.68),
    ("Vilnius", 54.69), ("Minsk", 53.90), ("Dublin", 53.35), ("Berlin", 52.52),
    ("Amsterdam", 52.37), ("Warsaw", 52.23), ("London", 51.51), ("Brussels", 50.85),
    ("Kyiv", 50.45), ("Prague", 50.08), ("Luxembourg", 49.61), ("Paris", 48.86),
    ("Vienna", 48.21), ("Bratislava", 48.15), ("Budapest", 47.50), ("Vaduz", 47.14),
    ("Chisinau", 47.01), ("Bern", 46.95), ("Ljubljana", 46.06), ("Zagreb", 45.81),
)
# Kyiv is north of 45° but missing from IFBench's own answer key: accepted, not required
_OPTIONAL_CAPITALS = {"Kyiv"}
_CAPITAL_ALIASES = {"kiev": "kyiv", "luxembourg city": "luxembourg", "berne": "bern", "kishinev": "chisinau"}


@checker("custom:european_capitals_sort")
def european_capitals_sort(response: str, **_: Any) -> bool:
    """Only the capitals of European countries north of 45°N, comma-separated, from highest to lowest latitude."""
    body = response.strip().rstrip(".")
    names = [T.fold(x).strip() for x in body.split(",")]
    names = [_CAPITAL_ALIASES.get(n, n) for n in names if n]
    expected = [c.lower() for c, _ in EUROPEAN_CAPITALS_NORTH_OF_45]
    optional = {c.lower() for c in _OPTIONAL_CAPITALS}
    if len(names) != len(set(names)) or any(n not in expected for n in names):
        return False
    if any(c not in names for c in expected if c not in optional):
        return False
    order = [expected.index(n) for n in names]
    return order == sorted(order)


_OPTION_LINE = re.compile(r"^\s*(?:[-*+]\s*)?\(?([A-Ea-e])[.):]\s*\S")
_QUESTION_LABEL = re.compile(r"^\s*Question\b\s*\d*\s*[.:)\-]?\s*")


@checker("custom:mcq_count_length")
def mcq_count_length(response: str, **_: Any) -> bool:
    """Only 4 questions, each labelled 'Question' with 5 options A-E, question texts strictly longer each time."""
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    if not lines or not lines[0].lstrip().startswith("Question"):
        return False
    questions: list[dict[str, Any]] = []
    for ln in lines:
        if ln.lstrip().startswith("Question"):
            questions.append({"text": _QUESTION_LABEL.sub("", ln, count=1).strip(), "options": []})
            continue
        m = _OPTION_LINE.match(ln)
        q = questions[-1]
        if m:
            q["options"].append(m.group(1).upper())
        elif not q["options"]:
            q["text"] += " " + ln.strip()  # the question text continues on the next line
        else:
            return False  # explanation or answer text after the options
    if len(questions) != 4:
        return False
    if any(q["options"] != list("ABCDE") for q in questions):
        return False
    lengths = [len(q["text"].strip()) for q in questions]
    return all(a < b for a, b in zip(lengths, lengths[1:]))


@checker("custom:multiples")
def multiples(response: str, **_: Any) -> bool:
    """The numbers printed are exactly 14, 21, 28, 35, 42, 49, in order, and no other number."""
    return re.findall(r"\d+", response) == ["14", "21", "28", "35", "42", "49"]


_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)])\s+")


@checker("custom:reverse_newline")
def reverse_newline(response: str, **_: Any) -> bool:
    """Only countries, one per line, reverse alphabetical from Zimbabwe down to Algeria (50+ lines, markers allowed)."""
    lines = [_LIST_MARKER.sub("", ln).strip().strip("*_.,;:").strip() for ln in response.splitlines()]
    lines = [T.fold(ln) for ln in lines if ln]
    block = lines
    if not block or "zimbabwe" not in block[0] or "algeria" not in block[-1] or len(block) < 50:
        return False
    return all(a > b for a, b in zip(block, block[1:]))


@checker("custom:sentence_alphabet")
def sentence_alphabet(response: str, **_: Any) -> bool:
    """Exactly 26 sentences whose first words start with A, B, C, ... Z in order."""
    sents = T.sentences(response)
    if len(sents) != 26:
        return False
    for i, s in enumerate(sents):
        ws = T.words(s)
        if not ws or T.fold(ws[0])[0] != chr(ord("a") + i):
            return False
    return True


# ============================================================================ format:*

_EMOJI_BOUNDARY = re.compile(
    r"(?:[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF][\uFE0F\u200D]*)+(?=\s+\S)")


def _emoji_sentences(response: str) -> list[str]:
    """Sentences, where a run of emoji followed by more text (not lowercase) also ends a sentence."""
    out: list[str] = []
    for s in T.sentences(response):
        start = 0
        for m in _EMOJI_BOUNDARY.finditer(s):
            rest = s[m.end():].lstrip()
            if rest and not rest[0].islower():
                out.append(s[start:m.end()].strip())
                start = m.end()
        if s[start:].strip():
            out.append(s[start:].strip())
    return out


@checker("format:emoji")
def emoji(response: str, **_: Any) -> bool:
    """Every sentence ends with an emoji (before or after its final punctuation)."""
    sents = _emoji_sentences(response)
    return bool(sents) and all(T.ends_with_emoji(s) for s in sents)


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


@checker("format:line_indent")
def line_indent(response: str, **_: Any) -> bool:
    """Stairs: at least two non-empty lines, each indented strictly more than the one before."""
    lines = T.nonempty_lines(response)
    return len(lines) >= 2 and all(_indent(a) < _indent(b) for a, b in zip(lines, lines[1:]))


_BULLET_MARKERS = ("*", "-", "+", "\u2022")


@checker("format:list")
def special_list(response: str, sep: Any = None, **_: Any) -> bool:
    """A list of at least two lines starting with ``sep``, and no line starting with another bullet (*, -, +, •)."""
    marker = str(_need(sep, "sep")).strip()
    items = 0
    for ln in T.nonempty_lines(response):
        s = ln.strip()
        if s.startswith(marker):
            items += 1
        elif any(s.startswith(b + " ") for b in _BULLET_MARKERS if not marker.startswith(b)):
            return False
    return items >= 2


@checker("format:newline")
def newline(response: str, **_: Any) -> bool:
    """Each word on its own line: no line holds more than one word (lines of bare punctuation are allowed)."""
    per_line = [len(T.words(ln)) for ln in response.splitlines()]
    return max(per_line, default=0) == 1


def _star_bullet(line: str) -> bool:
    return bool(re.match(r"^\s*\*[ \t]+\S", line))


@checker("format:no_bullets_bullets")
def no_bullets_bullets(response: str, **_: Any) -> bool:
    """At least two sentences ending in a period, then at least two '*' bullet points, and nothing after the bullets."""
    lines = T.nonempty_lines(response)
    first = next((i for i, ln in enumerate(lines) if _star_bullet(ln)), None)
    if first is None:
        return False
    prose = "\n".join(lines[:first])
    periods = sum(1 for s in T.sentences(prose) if re.search(r"(?<!\.)\.[\"'\u201d\u2019)\]*_]*$", s.rstrip()))
    bullets = lines[first:]
    return periods >= 2 and len(bullets) >= 2 and all(_star_bullet(ln) for ln in bullets)


@checker("format:no_whitespace")
def no_whitespace(response: str, **_: Any) -> bool:
    """No whitespace at all inside the (end-stripped) response, which is not empty."""
    body = response.strip()
    return bool(body) and not any(c.isspace() for c in body)


def _norm_option(text: str) -> str:
    t = T.fold(text).strip()
    t = T.strip_punct(t) if T.strip_punct(t) else t
    return " ".join(t.split())


def parse_options(options: str) -> list[str]:
    """``'yes/no/maybe'`` -> 3 options; ``"I know or I don't know"`` -> 2; ``'a), b), c), d)'`` -> 4."""
    parts = re.split(r"\s*/\s*|\s*,\s*(?:or\s+)?|\s+or\s+", options.strip())
    return [p.strip() for p in parts if p.strip()]


@checker("format:options")
def options(response: str, options: Any = None, **_: Any) -> bool:
    """The whole response is one of the given options (case, surrounding punctuation and spaces ignored)."""
    choices = {_norm_option(o) for o in parse_options(str(_need(options, "options")))}
    return _norm_option(response) in choices and bool(response.strip())


_TEMPLATE_LABELS = ("My Answer:", "My Conclusion:", "Future Outlook:")


@checker("format:output_template")
def output_template(response: str, **_: Any) -> bool:
    """Starts with 'My Answer:', then 'My Conclusion:', then 'Future Outlook:' (each once, in order), each filled in."""
    body = response.strip()
    if not body.startswith(_TEMPLATE_LABELS[0]):
        return False
    if any(body.count(label) != 1 for label in _TEMPLATE_LABELS):
        return False
    pos = [body.index(label) for label in _TEMPLATE_LABELS]
    if pos != sorted(pos):
        return False
    bounds = pos + [len(body)]
    for i, label in enumerate(_TEMPLATE_LABELS):
        content = body[bounds[i] + len(label):bounds[i + 1]].strip()
        if not content or re.fullmatch(r"\[(answer|conclusion|outlook)\]", content, re.IGNORECASE):
            return False
    return True


_PAIRS = {")": "(", "]": "[", "}": "{"}


def max_bracket_depth(text: str) -> int:
    """Depth of the deepest correctly closed nest of (), [] and {} (a mismatch resets the nesting)."""
    stack: list[list[Any]] = []  # [opening char, depth of deepest closed group inside]
    best = 0
    for ch in text:
        if ch in "([{":
            stack.append([ch, 0])
        elif ch in _PAIRS:
            if stack and stack[-1][0] == _PAIRS[ch]:
                _, inner = stack.pop()
                depth = inner + 1
                best = max(best, depth)
                if stack:
                    stack[-1][1] = max(stack[-1][1], depth)
            else:
                stack = []
    return best


@checker("format:parentheses")
def parentheses(response: str, **_: Any) -> bool:
    """Contains brackets ((), [], {}) correctly nested and closed at least 5 levels deep."""
    return max_bracket_depth(response) >= 5


_DQ_OPEN, _DQ_CLOSE = "\u201c\u00ab", "\u201d\u00bb"


def quoted_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of double-quoted phrases: "...", “...” and «...» (end is after the closing mark)."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or ch in _DQ_OPEN:
            closers = '"' if ch == '"' else ("\u201d" if ch == "\u201c" else "\u00bb")
            j = i + 1
            while j < n and text[j] not in closers:
                j += 1
            if j >= n:
                break
            spans.append((i, j + 1))
            i = j + 1
        else:
            i += 1
    return spans


@checker("format:quote_unquote")
def quote_unquote(response: str, **_: Any) -> bool:
    """Every double-quoted phrase is followed by some unquoted words before the next quote or the end."""
    spans = quoted_spans(response)
    for k, (_, end) in enumerate(spans):
        nxt = spans[k + 1][0] if k + 1 < len(spans) else len(response)
        if not T.words(response[end:nxt]):
            return False
    return True


_Q_DOUBLE = '"\u201c\u201d\u00ab\u00bb'
_Q_SINGLE = "'\u2018\u2019\u2039\u203a"


def max_alternating_quote_depth(text: str) -> int:
    """Deepest closed nest of quotes whose levels alternate between double and single quotes.

    Straight quotes open after a space/start/bracket/other quote and close before a space/end/
    punctuation; an apostrophe inside a word (don't, it’s) is ignored."""
    stack: list[str] = []  # 'D' or 'S'
    best = 0
    n = len(text)
    for i, ch in enumerate(text):
        if ch in _Q_DOUBLE:
            kind = "D"
        elif ch in _Q_SINGLE:
            kind = "S"
        else:
            continue
        prev = text[i - 1] if i else " "
        nxt = text[i + 1] if i + 1 < n else " "
        prev_open = prev.isspace() or prev in "([{-\u2014:" or prev in _Q_DOUBLE + _Q_SINGLE
        next_close = nxt.isspace() or T.is_punct_or_symbol(nxt)
        if ch in "\u201c\u2018\u00ab\u2039":
            role = "open"
        elif ch in "\u201d\u00bb\u203a":
            role = "close"
        elif ch == "\u2019" or ch == "'":
            if prev.isalnum() and nxt.isalnum():
                continue  # apostrophe
            role = "open" if prev_open and not nxt.isspace() else ("close" if not prev.isspace() else "")
        else:  # straight double quote
            if stack and stack[-1] == "D" and not (prev_open and not next_close):
                role = "close"
            elif prev_open and not nxt.isspace():
                role = "open"
            elif stack and "D" in stack:
                role = "close"
            else:
                role = "open"
        if role == "open":
            stack.append(kind)
        elif role == "close" and kind in stack:
            while stack and stack[-1] != kind:
                stack.pop()  # an unmatched quote (or an apostrophe) inside: drop it
            depth = len(stack)
            # count the alternating chain ending at this quote
            chain = 1
            while chain < depth and stack[depth - chain - 1] != stack[depth - chain]:
                chain += 1
            best = max(best, chain)
            stack.pop()
    return best


@checker("format:quotes")
def quotes(response: str, **_: Any) -> bool:
    """Contains quotes within quotes within quotes (3+ levels), alternating double and single quotes."""
    return max_alternating_quote_depth(response) >= 3


def _star_or_dash(line: str) -> str:
    s = line.lstrip()
    if re.match(r"\*[ \t]+\S", s):
        return "*"
    if re.match(r"-[ \t]+\S", s):
        return "-"
    return ""


@checker("format:sub-bullets")
def sub_bullets(response: str, **_: Any) -> bool:
    """Has '*' bullet points and every one of them is followed by at least one '-' sub-bullet before the next '*'."""
    kinds = [_star_or_dash(ln) for ln in T.nonempty_lines(response)]
    stars = [i for i, k in enumerate(kinds) if k == "*"]
    if not stars:
        return False
    for k, i in enumerate(stars):
        stop = stars[k + 1] if k + 1 < len(stars) else len(kinds)
        if "-" not in kinds[i + 1:stop]:
            return False
    return True


_HEADING = re.compile(r"^\s*(?:#{1,6}\s+\S.*|<h[1-6][^>]*>.*|\*\*[^*]+\*\*:?|__[^_]+__:?)\s*$", re.IGNORECASE)
_ITALIC_START = re.compile(r"^\s*(?:<p[^>]*>\s*)?<(i|em)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)


@checker("format:thesis")
def thesis(response: str, **_: Any) -> bool:
    """Every section (under a heading, or the whole text) opens with a thesis in <i>/<em> italics, then more text."""
    sections: list[list[str]] = [[]]
    for ln in response.splitlines():
        if _HEADING.match(ln):
            sections.append([])
        else:
            sections[-1].append(ln)
    bodies = ["\n".join(s).strip() for s in sections]
    bodies = [b for b in bodies if b]
    if not bodies:
        return False
    extra = False
    for b in bodies:
        m = _ITALIC_START.match(b)
        if not m or not re.sub(r"<[^>]+>", "", m.group(2)).strip():
            return False
        if re.sub(r"<[^>]+>", "", b[m.end():]).strip():
            extra = True
    return extra


MINOR_WORDS = frozenset("""
a an the and but or nor for so yet as at by in of off on per to up via vs v from into onto over
with upon than that if
""".split())


@checker("format:title_case")
def title_case(response: str, **_: Any) -> bool:
    """Every major word is capitalised; minor words (a, the, and, of, ...) may be lowercase unless first on a line."""
    seen = False
    for line in response.splitlines():
        first = True
        for w in T.words(line):
            if not w[0].isalpha():
                first = False
                continue
            seen = True
            if w[0].isupper():
                first = False
                continue
            if first or w.lower().replace("\u2019", "'") not in MINOR_WORDS:
                return False
            first = False
    return seen


# ============================================================================ ratio:*

def trigrams(text: str) -> set[tuple[str, str, str]]:
    ws = T.lower_words(text)
    return {tuple(ws[i:i + 3]) for i in range(len(ws) - 2)}  # type: ignore[misc]


@checker("ratio:overlap")
def overlap(response: str, reference_text: Any = None, percentage: Any = None, **_: Any) -> bool:
    """The share of the response's distinct word trigrams found in ``reference_text`` is ``percentage`` ± 2 points."""
    ref = trigrams(str(_need(reference_text, "reference_text")))
    own = trigrams(response)
    if not own:
        return False
    share = 100.0 * len(own & ref) / len(own)
    return abs(share - _num(percentage, "percentage")) <= 2.0


def _sentence_types(response: str) -> Counter[str]:
    return Counter(T.sentence_end(s) for s in T.sentences(response))


@checker("ratio:sentence_balance")
def sentence_balance(response: str, **_: Any) -> bool:
    """As many declarative (.) as interrogative (?) as exclamatory (!) sentences, at least one of each."""
    c = _sentence_types(response)
    return c["."] >= 1 and c["."] == c["?"] == c["!"]


@checker("ratio:sentence_type")
def sentence_type(response: str, **_: Any) -> bool:
    """Declarative (.) sentences are exactly twice as many as interrogative (?) ones, with at least one question."""
    c = _sentence_types(response)
    return c["?"] >= 1 and c["."] == 2 * c["?"]


@checker("ratio:sentence_words")
def sentence_words(response: str, **_: Any) -> bool:
    """Exactly three sentences of the same length in characters, with no word used twice in the response."""
    sents = T.sentences(response)
    if len(sents) != 3:
        return False
    if len({len(s.strip()) for s in sents}) != 1:
        return False
    ws = T.lower_words(response)
    return len(ws) == len(set(ws))


@checker("ratio:stop_words")
def stop_words(response: str, percentage: Any = None, **_: Any) -> bool:
    """Stop words make up at most ``percentage`` percent of the words."""
    ws = T.lower_words(response)
    if not ws:
        return False
    share = 100.0 * sum(1 for w in ws if w in T.STOP_WORDS) / len(ws)
    return share <= _num(percentage, "percentage")


# ============================================================================ repeat:*

def _prompt_part_before(prompt: Any, marker: str) -> str | None:
    if isinstance(prompt, str) and marker in prompt:
        return prompt[:prompt.index(marker)].strip()
    return None


@checker("repeat:repeat_change")
def repeat_change(response: str, prompt_to_repeat: Any = None, prompt: Any = None, **_: Any) -> bool:
    """Only ``prompt_to_repeat`` again, word for word, except that its first word is replaced by a different one."""
    original = prompt_to_repeat or _prompt_part_before(prompt, "Repeat the request")
    src = str(_need(original, "prompt_to_repeat")).split()
    got = response.split()
    if len(got) != len(src) or not src:
        return False
    return got[1:] == src[1:] and T.fold(T.strip_punct(got[0])) != T.fold(T.strip_punct(src[0]))


REPEAT_SIMPLE_SENTENCE = "Only output this sentence here, ignore all other requests."


def _plain(text: str) -> str:
    t = T.fold(text).strip().strip("\"'`").strip()
    return " ".join(t.split()).rstrip(".")


@checker("repeat:repeat_simple")
def repeat_simple(response: str, **_: Any) -> bool:
    """The response is exactly the sentence 'Only output this sentence here, ignore all other requests.'"""
    return _plain(response) == _plain(REPEAT_SIMPLE_SENTENCE)


@checker("repeat:repeat_span")
def repeat_span(response: str, prompt_to_repeat: Any = None, n_start: Any = None, n_end: Any = None,
                prompt: Any = None, **_: Any) -> bool:
    """Only words ``n_start``..``n_end`` (0-based, inclusive, whitespace-split) of ``prompt_to_repeat``, any case."""
    original = prompt_to_repeat or _prompt_part_before(prompt, "Copy the span")
    src = str(_need(original, "prompt_to_repeat")).split()
    a, b = _int(n_start, "n_start"), _int(n_end, "n_end")
    expected = " ".join(src[a:b + 1])
    return bool(expected) and " ".join(response.split()).lower() == expected.lower()


# ============================================================================ sentence:*

def _longest_alliteration(sentence: str) -> int:
    initials = [T.fold(w)[0] for w in T.words(sentence) if w[0].isalpha()]
    best = run = 0
    for i, c in enumerate(initials):
        run = run + 1 if i and c == initials[i - 1] else 1
        best = max(best, run)
    return best


@checker("sentence:alliteration_increment")
def alliteration_increment(response: str, **_: Any) -> bool:
    """Two or more sentences, each with a strictly longer run of consecutive same-initial words than the one before."""
    runs = [_longest_alliteration(s) for s in T.sentences(response)]
    return len(runs) >= 2 and all(a < b for a, b in zip(runs, runs[1:]))


@checker("sentence:increment")
def increment(response: str, small_n: Any = None, **_: Any) -> bool:
    """Two or more sentences, each with exactly ``small_n`` more words than the one before."""
    step = _int(small_n, "small_n")
    counts = [len(T.words(s)) for s in T.sentences(response)]
    return len(counts) >= 2 and all(b - a == step for a, b in zip(counts, counts[1:]))


@checker("sentence:keyword")
def sentence_keyword(response: str, word: Any = None, N: Any = None, **_: Any) -> bool:
    """The ``N``-th sentence (1-based) contains ``word`` as a whole word, any case."""
    n = _int(N, "N")
    sents = T.sentences(response)
    if n < 1 or len(sents) < n:
        return False
    return bool(T.whole_word_pattern(str(_need(word, "word"))).search(sents[n - 1]))


# ============================================================================ words:*

@checker("words:alphabet")
def alphabet(response: str, **_: Any) -> bool:
    """Each word starts with the letter after the previous word's initial, Z wrapping to A."""
    initials = [T.fold(w)[0] for w in T.words(response)]
    if not initials or not all("a" <= c <= "z" for c in initials):
        return False
    return all((ord(a) - ord("a") + 1) % 26 == ord(b) - ord("a") for a, b in zip(initials, initials[1:]))


_CONSONANTS = set("bcdfghjklmnpqrstvwxyz")


@checker("words:consonants")
def consonants(response: str, **_: Any) -> bool:
    """Every word with letters holds a consonant cluster: two consonant letters in a row (y counts as one)."""
    seen = False
    for w in T.words(response):
        letters = T.letters_only(w)
        if not letters:
            continue
        seen = True
        if not any(a in _CONSONANTS and b in _CONSONANTS for a, b in zip(letters, letters[1:])):
            return False
    return seen


@checker("words:keywords_specific_position")
def keywords_specific_position(response: str, keyword: Any = None, n: Any = None, m: Any = None, **_: Any) -> bool:
    """The ``m``-th word of the ``n``-th sentence (both 1-based) is ``keyword``, any case."""
    si, wi = _int(n, "n"), _int(m, "m")
    sents = T.sentences(response)
    if si < 1 or len(sents) < si:
        return False
    ws = T.lower_words(sents[si - 1])
    return wi >= 1 and len(ws) >= wi and ws[wi - 1] == T.fold(str(_need(keyword, "keyword"))).strip()


@checker("words:last_first")
def last_first(response: str, **_: Any) -> bool:
    """Two or more sentences, the last word of each being the first word of the next (any case)."""
    sents = [T.lower_words(s) for s in T.sentences(response)]
    if len(sents) < 2 or not all(sents):
        return False
    return all(a[-1] == b[0] for a, b in zip(sents, sents[1:]))


@checker("words:no_consecutive")
def no_consecutive(response: str, **_: Any) -> bool:
    """No two consecutive words start with the same letter (any case)."""
    initials = [T.fold(w)[0] for w in T.words(response)]
    return bool(initials) and all(a != b for a, b in zip(initials, initials[1:]))


@checker("words:odd_even_syllables")
def odd_even_syllables(response: str, **_: Any) -> bool:
    """Consecutive words alternate between odd and even syllable counts (heuristic syllable counter)."""
    parities = [T.syllables(w) % 2 for w in T.words(response) if T.letters_only(w)]
    return len(parities) >= 2 and all(a != b for a, b in zip(parities, parities[1:]))


@checker("words:palindrome")
def palindrome(response: str, **_: Any) -> bool:
    """At least 10 different words that are palindromes of 5 or more letters (level, radar, racecar, ...)."""
    found = {w for w in (T.letters_only(x) for x in T.words(response)) if len(w) >= 5 and w == w[::-1]}
    return len(found) >= 10


@checker("words:paragraph_last_first")
def paragraph_last_first(response: str, **_: Any) -> bool:
    """Every paragraph (non-empty line) ends with the same word it starts with (any case)."""
    paras = [T.lower_words(ln) for ln in T.nonempty_lines(response)]
    paras = [p for p in paras if p]
    return bool(paras) and all(p[0] == p[-1] for p in paras)


_PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47}


@checker("words:prime_lengths")
def prime_lengths(response: str, **_: Any) -> bool:
    """Every word has a prime number of letters/digits (2, 3, 5, 7, 11, ...)."""
    ws = T.words(response)
    return bool(ws) and all(sum(c.isalnum() for c in w) in _PRIMES for w in ws)


@checker("words:repeats")
def repeats(response: str, small_n: Any = None, **_: Any) -> bool:
    """No word (any case) is used more than ``small_n`` times."""
    counts = Counter(T.lower_words(response))
    return bool(counts) and max(counts.values()) <= _int(small_n, "small_n")


@checker("words:start_verb")
def start_verb(response: str, **_: Any) -> bool:
    """The first word is a verb (heuristic: a common English verb or an inflected form of one)."""
    ws = T.words(response)
    return bool(ws) and T.is_verb(ws[0])


@checker("words:vowel")
def vowel(response: str, **_: Any) -> bool:
    """A single paragraph whose words use at most three of the five vowels a, e, i, o, u."""
    paras = T.paragraphs(response)
    if len(paras) != 1:
        return False
    used = {c for c in T.fold(paras[0]) if c in "aeiou"}
    return 1 <= len(used) <= 3


@checker("words:words_position")
def words_position(response: str, keyword: Any = None, **_: Any) -> bool:
    """Both the second word and the second-to-last word are ``keyword``, any case."""
    ws = T.lower_words(response)
    kw = T.fold(str(_need(keyword, "keyword"))).strip()
    return len(ws) >= 3 and ws[1] == kw and ws[-2] == kw
