"""Text helpers for the IFBench checkers: words, sentences, paragraphs, syllables, emoji.

Everything here is standard library only (no nltk: its data downloads are unreachable), so the
definitions are the project's own and deliberately simple; each is documented where it is made.

* A *word* is a whitespace-separated token (em/en dashes, the ellipsis character and HTML tags also
  separate tokens) with leading and trailing punctuation and symbols stripped, kept only if it still holds
  a letter or a digit.  Inner apostrophes and hyphens stay: ``don't`` and ``well-known`` are one
  word each; a lone ``*``, ``-`` or ``#`` is not a word.
* A *sentence* ends at a line break, or at ``.``, ``!``, ``?``, ``‽`` or ``…`` (plus any closing
  quotes/brackets) followed by whitespace and then something that is not a lowercase letter;
  common abbreviations (``Mr.``, ``e.g.``, ``U.S.``), single-letter initials and a list number at
  the start of a line (``1.``) do not end a sentence.  A piece without letters or digits (``---``,
  a lone emoji) is not a sentence: emoji go with the sentence before, the rest is dropped.
* A *paragraph* is a block of text separated from the next by a blank line; a *line* is one line.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# -- characters --------------------------------------------------------------------------------

_PUNCT_OR_SYMBOL = ("P", "S")


def is_punct_or_symbol(ch: str) -> bool:
    """True for Unicode punctuation (P*) and symbol (S*) characters, which include emoji."""
    return unicodedata.category(ch)[0] in _PUNCT_OR_SYMBOL


_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


def strip_punct(token: str) -> str:
    """``token`` without the characters that are neither letters nor digits (punctuation, symbols,
    emoji, invisible marks) at either end."""
    return _EDGES.sub("", token)


def fold(text: str) -> str:
    """Lowercase ASCII-ish form: accents removed (``São Tomé`` -> ``sao tome``), curly quotes straightened."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


# -- emoji (Unicode ranges; no third-party emoji table) ----------------------------------------

_EMOJI_RANGES = (
    (0x1F000, 0x1FAFF),  # mahjong/cards, enclosed alphanumerics, pictographs, emoticons, transport, ...
    (0x2600, 0x27BF),    # miscellaneous symbols and dingbats
    (0x2B00, 0x2BFF),    # arrows and stars such as ⭐ ⬆
    (0x2300, 0x23FF),    # technical: ⌚ ⏰ ⏳
    (0x2190, 0x21FF),    # arrows used as emoji (↔ ↩)
    (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299),
    (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122), (0x2139, 0x2139),
    (0x24C2, 0x24C2), (0x25AA, 0x25FE), (0x00A9, 0x00A9), (0x00AE, 0x00AE),
)
# joiners and modifiers that may trail an emoji: variation selectors, ZWJ, keycap, tags
_EMOJI_TRAIL = {0xFE0E, 0xFE0F, 0x200D, 0x20E3} | set(range(0xE0020, 0xE0080))


def is_emoji(ch: str) -> bool:
    """True when the single character ``ch`` is a pictographic emoji (by Unicode block)."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _EMOJI_RANGES)


def strip_emoji_trail(text: str) -> str:
    """``text`` without trailing variation selectors, zero-width joiners, keycaps and tag characters."""
    end = len(text)
    while end and ord(text[end - 1]) in _EMOJI_TRAIL:
        end -= 1
    return text[:end]


def ends_with_emoji(text: str) -> bool:
    """True when ``text`` (after whitespace, closing punctuation and emoji modifiers) ends in an emoji."""
    t = text.rstrip()
    while t:
        t = strip_emoji_trail(t).rstrip()
        if t and is_emoji(t[-1]):
            return True
        if t and (is_punct_or_symbol(t[-1])) and not is_emoji(t[-1]):
            t = t[:-1].rstrip()
            continue
        return False
    return False


# -- Japanese ----------------------------------------------------------------------------------

_JAPANESE = re.compile(r"[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u4e00-\u9fff\u3400-\u4dbf\uff66-\uff9f]")


def has_japanese(text: str) -> bool:
    """True when ``text`` holds Hiragana, Katakana or CJK ideographs (Kanji)."""
    return bool(_JAPANESE.search(text))


# -- words -------------------------------------------------------------------------------------

_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")


# from the first to the last letter/digit of a run of characters that are not separators
_WORD = re.compile(r"[^\W_](?:[^\s\u2014\u2013\u2026]*[^\W_])?")


def words(text: str) -> list[str]:
    """The words of ``text`` (see module docstring), punctuation stripped, case kept."""
    return _WORD.findall(_HTML_TAG.sub(" ", text))


def lower_words(text: str) -> list[str]:
    """``words(text)`` lowercased, with curly apostrophes straightened."""
    return [w.lower().replace("\u2019", "'") for w in words(text)]


def letters_only(word: str) -> str:
    """The letters of ``word``, accents folded, lowercased (``Don't`` -> ``dont``)."""
    return "".join(c for c in fold(word) if c.isalpha())


def whole_word_pattern(keyword: str) -> re.Pattern[str]:
    """Case-insensitive regex matching ``keyword`` as a whole word (not inside a longer word)."""
    return re.compile(r"(?<![\w])" + re.escape(keyword.strip()) + r"(?![\w])", re.IGNORECASE)


# -- sentences ---------------------------------------------------------------------------------

# abbreviations whose period does not end a sentence (words that often end one, like "no", are left out)
ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "e.g", "i.e", "cf", "approx", "fig",
    "figs", "inc", "ltd", "corp", "u.s", "u.k", "u.n", "a.m", "p.m", "capt", "sgt", "lt", "dept",
    "vol", "al", "jan", "feb", "apr", "jun", "jul", "aug", "sept", "oct", "nov", "dec",
}
_TERMINAL = ".!?\u203d\u2026"
_CLOSERS = "\"'\u201d\u2019)]}\u00bb*_"
# terminal punctuation run, optional closers, optional emoji run (the sentence's own), then whitespace
_BOUNDARY = re.compile(
    r"[" + re.escape(_TERMINAL) + r"]+[" + re.escape(_CLOSERS) + r"]*"
    r"(?:[ \t]*[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF\uFE0F\u200D]+)?(?=\s)"
)
_LIST_NUMBER = re.compile(r"^\s*(?:[-*+\u2022]\s*)?\(?\d{1,3}[.)]$")


def _is_abbreviation(before: str) -> bool:
    """``before`` is the text of the line up to (not including) a final period."""
    tail = before.split()[-1] if before.split() else ""
    tail = tail.lstrip("([{\"'\u201c\u2018*_")
    low = tail.lower()
    if low in ABBREVIATIONS:
        return True
    if len(tail) == 1 and tail.isalpha() and tail.isupper():  # an initial: "J. K. Rowling"
        return True
    return False


def _split_line(line: str) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(line):
        end = m.end()
        rest = line[end:].lstrip()
        if not rest:
            continue
        if rest[0].islower():
            continue
        chunk = line[start:end]
        punct = m.group(0)
        if punct.startswith(".") and len(punct.rstrip(_CLOSERS)) == 1:
            body = line[start:m.start()]
            if _is_abbreviation(body) or _LIST_NUMBER.match(line[start:m.start() + 1]):
                continue
        if chunk.strip():
            out.append(chunk.strip())
        start = end
    last = line[start:].strip()
    if last:
        out.append(last)
    return out


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, in order (see module docstring for the rule)."""
    out: list[str] = []
    for line in text.splitlines():
        for piece in _split_line(line) if line.strip() else []:
            if any(c.isalnum() for c in piece):
                out.append(piece)
            elif out and any(is_emoji(c) for c in piece):
                out[-1] += " " + piece  # an emoji (or emoji line) trailing the sentence before
    return out


def sentence_end(sentence: str) -> str:
    """The terminal mark of a sentence ('.', '?', '!') ignoring trailing quotes, brackets, emoji
    and markdown; '' when it ends otherwise.  An interrobang (``?!``, ``!?``, ``‽``) counts as '?'
    when ``?`` comes last and as '!' when ``!`` comes last; ``…`` counts as '.'."""
    t = sentence.rstrip()
    while t and (t[-1] in _CLOSERS or is_emoji(t[-1]) or ord(t[-1]) in _EMOJI_TRAIL or t[-1].isspace()):
        t = t[:-1]
    if not t:
        return ""
    ch = t[-1]
    if ch in ".\u2026":
        return "."
    if ch == "?":
        return "?"
    if ch == "!":
        return "!"
    if ch == "\u203d":
        return "?"
    return ""


# -- paragraphs and lines ----------------------------------------------------------------------

def paragraphs(text: str) -> list[str]:
    """Blocks separated by one or more blank lines, stripped, empty ones dropped."""
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def nonempty_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


# -- syllables (heuristic) ---------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def syllables(word: str) -> int:
    """Estimated number of syllables of an English word: vowel groups, minus a silent final
    ``e``/``es``/``ed``, plus a few common hiatus patterns; at least 1 for any word with letters,
    0 for a token without letters."""
    w = letters_only(word)
    if not w:
        return 0
    if w.startswith("y"):
        w = "_" + w[1:]  # a leading y is a consonant
    groups = re.findall(r"[aeiouy]+", w)
    n = len(groups)
    if n > 1:
        if w.endswith("e") and not w.endswith(("ee", "ye", "oe")) and len(w) > 2 and w[-2] not in "aeiouy":
            if not (w.endswith("le") and len(w) > 3 and w[-3] not in "aeiouy"):
                n -= 1
        elif w.endswith("es") and len(w) > 3 and w[-3] not in "aeiouysxzhcg":
            n -= 1
        elif w.endswith("ed") and len(w) > 3 and w[-3] not in "aeiouytd":
            n -= 1
    n += len(re.findall(r"[aeiouy]ing$", w))
    n += len(re.findall(r"(?<![cgtsq])ia(?!n$)|(?<![tscxg])io|(?<![qg])ua(?!r)|eo(?!u)", w))
    n -= len(re.findall(r"eo(?=ple)", w))
    return max(1, n)


# -- word lists (written for this project) -----------------------------------------------------

STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being
below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't
down during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's
her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it
it's its itself just let's me more most mustn't my myself no nor not now of off on once only or
other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so
some such than that that's the their theirs them themselves then there there's these they they'd
they'll they're they've this those through to too under until up very was wasn't we we'd we'll
we're we've were weren't what what's when when's where where's which while who who's whom why
why's will with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
s t d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan
shouldn wasn weren won wouldn
""".split())

PRONOUNS = frozenset("""
i me we us you he him she her it they them thee thou
my mine our ours your yours his hers its their theirs thy thine
myself ourselves yourself yourselves himself herself itself themselves oneself
this that these those
who whom whose which what whoever whomever whatever whichever
anybody anyone anything everybody everyone everything nobody nothing somebody someone something
each either neither both all some any none
""".split())

COORDINATING_CONJUNCTIONS = ("and", "but", "for", "nor", "or", "so", "yet")

# Base forms of common English verbs, including auxiliaries and the verbs that typically open an
# imperative or a question.  Inflected forms are recognised by ``is_verb``.
VERBS = frozenset("""
be am is are was were been being do does did done have has had can could will would shall should
may might must let ought need dare
accept achieve acknowledge act adapt add address adjust admire adopt advance advise affect agree
aim align allocate allow alter analyse analyze answer anticipate apply appreciate approach arrange
ask assemble assess assign assist assume attach attempt attend avoid awaken balance bake become
begin behold believe belong bind blend boost break breathe bring browse build buy calculate call
calm capture care carry cast catch celebrate challenge change channel charge chart check cherish
choose circle clarify classify clean clear click climb close code collaborate collect combine come
commit communicate compare compile complete compose compute conceive concentrate conclude conduct
configure confirm connect conquer consider construct consult contact contemplate continue contrast
contribute control convert convince cook coordinate copy count craft create cross cultivate cut
dance decide declare decode decrease define delegate delete delve demonstrate deploy derive
describe design determine develop devise die dig direct discover discuss dismiss display dive
divide document draft drag draw dream drink drive drop earn ease eat edit educate elevate eliminate
embark embrace emphasize employ empower enable encourage end engage enhance enjoy enroll ensure
enter envision equip establish estimate evaluate examine exercise expand expect experience
experiment explain explore express extend extract face facilitate fall feed feel fetch fight
fill filter find finish fix flip focus fold follow forget forgive form formulate foster free gain
gather generate get give go grab grant greet grow guard guide handle hang happen harness hate head
hear help hide highlight hire hit hold hope identify ignite ignore illustrate imagine implement
import improve include incorporate increase indicate infer inform initialize innovate input
insert inspect inspire install integrate intend interpret introduce invent investigate invite
join judge jump keep kick kill know label lay lead lean learn leave lend leverage lift light like
limit link list listen live load locate look lose love maintain make manage map mark master match
measure meet memorize mention merge minimize mix model modify monitor motivate move multiply name
navigate negotiate nest note notice nurture obey observe obtain offer open operate optimize order
organize outline overcome own paint participate pass pause pay perform persuade pick picture pin
place plan plant play plot point ponder pour practice practise praise pray predict prefer prepare
present preserve press prevent print prioritize proceed process produce program promise promote
prompt protect prove provide publish pull pump purchase pursue push put question raise rank rate
reach read realize reason recall receive recognize recommend record recover reduce refer refine
reflect refresh reframe register reimagine reject relate relax release rely remain remember remind
remove render repeat rephrase replace reply report represent request require research reset
resolve respect respond rest restore restructure retain rethink retrieve return reveal review
revise rewrite ride rise rotate rule run save say scan schedule search secure see seek select
sell send separate serve set settle shape share shift shine show shut sign simplify sing sit
sketch skip sleep slice slow smile solve sort sound speak specify spend split spot start state
stay step stick stop store streamline strengthen stretch strike strive structure study submit
subtract succeed suggest summarize supply support suppose surround survive swap sweep switch
synthesize take talk taste teach tell test thank think throw tie track trade train transform
translate travel treat trust try turn type uncover underline understand undertake unite unlock
unveil update upgrade upload use utilize validate value venture verify view visit visualize vote
wait wake walk want warm wash watch wear weigh welcome win wish wonder work worry wrap write yield
""".split())

IRREGULAR_VERB_FORMS = frozenset("""
ate awoke awoken beat beaten became began begun bent bet bit bitten bled blew blown bore born
bought bound bred brought built burnt caught chose chosen clung came crept dealt did done drank
drunk drew drawn drove driven dug dwelt eaten fed fell fallen felt fled flew flown forbade forgot
forgotten forgave forgiven fought found froze frozen gave given got gotten went gone grew grown
had heard held hid hidden hung hurt kept knelt knew known laid led leapt left lent lay lain lit
lost made meant met paid proved proven quit ran rang rung rode ridden rose risen said sang sung
sank sunk sat saw seen sought sold sent shook shaken shone shot showed shown shrank shut slept
slid spoke spoken sped spent spun split spread sprang stood stole stolen stuck stung struck swore
sworn swept swam swum swung taught tore torn told thought threw thrown took taken understood
undertook woke woken wore worn won wound wrote written
isn't aren't wasn't weren't don't doesn't didn't haven't hasn't hadn't can't couldn't won't
wouldn't shouldn't mustn't shan't mightn't needn't let's
""".split())


def is_verb(word: str) -> bool:
    """Heuristic part-of-speech test: is ``word`` a (form of a) common English verb?

    A stand-in for a POS tagger: the word, or its base after undoing a regular -s/-es/-ies,
    -ed/-ied or -ing inflection (with a doubled consonant or a dropped ``e`` restored), must be in
    the project's verb list; irregular past forms and negative contractions are listed too.
    Words that are both nouns and verbs (``plan``, ``answer``) count as verbs."""
    w = fold(word).strip("'")
    if not w or not w.replace("'", "").isalpha():
        return False
    if w in VERBS or w in IRREGULAR_VERB_FORMS:
        return True
    candidates: list[str] = []
    if w.endswith("ing") and len(w) > 4:
        stem = w[:-3]
        candidates += [stem, stem + "e"]
        if len(stem) > 2 and stem[-1] == stem[-2]:
            candidates.append(stem[:-1])
        if stem.endswith("y"):
            candidates.append(stem[:-1] + "ie")
    if w.endswith("ied") or w.endswith("ies"):
        candidates.append(w[:-3] + "y")
    if w.endswith("ed") and len(w) > 3:
        stem = w[:-2]
        candidates += [stem, w[:-1]]
        if len(stem) > 2 and stem[-1] == stem[-2]:
            candidates.append(stem[:-1])
    if w.endswith("es") and len(w) > 3:
        candidates.append(w[:-2])
    if w.endswith("s") and len(w) > 2:
        candidates.append(w[:-1])
    return any(c in VERBS for c in candidates)
