"""IFBench checkers: one passing and one failing hand-written response per instruction id in the data,
registry coverage of the data file, scoring every row, and strict vs loose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandboxlite.eval.score import Score
from sandboxlite.eval.scoring.ifbench import CHECKERS, check, loose_variants, score_ifbench, supported_ids
from sandboxlite.eval.scoring.ifbench import text as T


def _data_file() -> Path:
    root = os.environ.get("SANDBOXLITE_EVAL_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "eval-data"
    return base / "instruct_follow" / "IFBench_test.jsonl"


def _rows() -> list[dict]:
    path = _data_file()
    if not path.is_file():
        pytest.fail(f"IFBench data not found at {path} (set SANDBOXLITE_EVAL_DATA)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- fixtures for the longer examples ----------------------------------------------------------

CSV_CITY = "ID,Country,City,Year,Count\n" + "\n".join(
    f"{i},France,Paris,{2000 + i},{10 * i}" for i in range(1, 8))
CSV_QUOTES = '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n' + "\n".join(
    f'"{i}"\t"Math"\t"A"\t"Fall"\t"9{i}"' for i in range(1, 4))
CSV_SPECIAL_ROWS = [f"{i},Toys,Acme,9.99,{i * 3}" for i in range(1, 14)] + ['14,"Home & Garden",Acme,19.99,4']
CSV_SPECIAL = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(CSV_SPECIAL_ROWS)
CSV_SPECIAL_PLAIN = CSV_SPECIAL.replace('"Home & Garden"', "Garden")

CAPITALS = ("Reykjavik, Helsinki, Oslo, Tallinn, Stockholm, Riga, Moscow, Copenhagen, Vilnius, Minsk, "
            "Dublin, Berlin, Amsterdam, Warsaw, London, Brussels, Prague, Luxembourg, Paris, Vienna, "
            "Bratislava, Budapest, Vaduz, Chisinau, Bern, Ljubljana, Zagreb")
CAPITALS_WITH_KYIV = CAPITALS.replace("Brussels, Prague", "Brussels, Kyiv, Prague").replace("Reykjavik", "Reykjavík")


def _mcq(lengthen: bool = True, explanation: bool = False) -> str:
    stems = ["Who painted Guernica?",
             "Which movement did Marcel Duchamp join?",
             "Which artist is best known for the drip painting technique?",
             "Which famous 20th-century artist co-founded Cubism together with Georges Braque?"]
    if not lengthen:
        stems[3] = "Who?"
    parts = []
    for i, stem in enumerate(stems, 1):
        parts.append(f"Question {i}: {stem}")
        parts += [f"{letter}) Option {letter}" for letter in "ABCDE"]
        if explanation and i == 2:
            parts.append("Explanation: Duchamp was a Dadaist.")
    return "\n".join(parts)


AFRICA = sorted([
    "Algeria", "Angola", "Benin", "Botswana", "Burkina Faso", "Burundi", "Cabo Verde", "Cameroon",
    "Central African Republic", "Chad", "Comoros", "Democratic Republic of the Congo", "Djibouti",
    "Egypt", "Equatorial Guinea", "Eritrea", "Eswatini", "Ethiopia", "Gabon", "Gambia", "Ghana",
    "Guinea", "Guinea-Bissau", "Ivory Coast", "Kenya", "Lesotho", "Liberia", "Libya", "Madagascar",
    "Malawi", "Mali", "Mauritania", "Mauritius", "Morocco", "Mozambique", "Namibia", "Niger",
    "Nigeria", "Republic of the Congo", "Rwanda", "São Tomé and Príncipe", "Senegal", "Seychelles",
    "Sierra Leone", "Somalia", "South Africa", "South Sudan", "Sudan", "Tanzania", "Togo", "Tunisia",
    "Uganda", "Zambia", "Zimbabwe"], key=T.fold, reverse=True)
AFRICA_OK = "\n".join(AFRICA)
AFRICA_BAD = "\n".join(AFRICA[:10] + [AFRICA[11], AFRICA[10]] + AFRICA[12:])

ALPHABET_STORY = " ".join(f"{w} went on." for w in (
    "Anna Ben Cara Dan Eve Finn Gus Hal Ivy Jo Kai Lu Mo Ned Oz Pia Quin Ray Sal Tom Uma Vic Wes Xia "
    "Yan Zed").split())
ALPHABET_STORY_SHORT = ALPHABET_STORY.rsplit(" Zed", 1)[0]

REPEAT_PROMPT = "Write a python program to implement a simple JPEG compression algorithm without any errors."
SPAN_PROMPT = ("explain the context, code and theory behind the paper Identifying Candidate Spaces for "
               "Advert Implantation.")
KEYWORDS = {"keyword1": "door", "keyword2": "bread", "keyword3": "blue", "keyword4": "lamp", "keyword5": "river"}
KEYWORD_TEXT = "door " + "bread " * 2 + "blue " * 3 + "lamp " * 5 + "river " * 7
PALINDROMES = "level radar civic kayak refer rotor madam racecar stats tenet"


# id -> (kwargs, passing response, failing response)
CASES: dict[str, tuple[dict, str, str]] = {
    "count:conjunctions": ({"small_n": 3.0}, "I came and saw, but I left, so it ended.",
                           "I came and saw and left."),
    "count:keywords_multiple": (KEYWORDS, KEYWORD_TEXT, KEYWORD_TEXT.replace("river ", "rivers ", 1)),
    "count:numbers": ({"N": 2.0}, "In 1990 there were 3.5 million people.", "In 1990, 2000 and 2010."),
    "count:person_names": ({"N": 3.0}, "Emma met Liam and Sophia.", "Emma met Liam and grace."),
    "count:pronouns": ({"N": 7.0}, "I told you that she and he would bring their tools to us.",
                       "The cat sat on the mat near the door."),
    "count:punctuation": ({}, "Wait, what?! Yes: it works; truly. Really? Wow!",
                          "Wait, what?! Yes: it works. Really? Wow!"),
    "count:unique_word_count": ({"N": 5.0}, "One two three four five.", "One one two two three."),
    "count:word_count_range": ({"min_words": 4.0, "max_words": 6.0}, "This has exactly five words.",
                               "Too short."),
    "count:words_japanese": ({"N": 3.0}, "I like 寿司 and eat ラーメン", "I like sushi and eat ラーメン"),
    "custom:character_reverse": ({}, ".SU eht fo lobmys lanoitan eht si elgae dlab ehT",
                                 "The bald eagle is the national symbol of the US."),
    "custom:word_reverse": ({}, "US the of symbol national the is eagle bald The.",
                            "The bald eagle is the national symbol of the US."),
    "custom:csv_city": ({}, CSV_CITY, CSV_CITY.rsplit("\n", 1)[0]),
    "custom:csv_quotes": ({}, CSV_QUOTES, CSV_QUOTES.replace('"Math"', "Math")),
    "custom:csv_special_character": ({}, CSV_SPECIAL, CSV_SPECIAL_PLAIN),
    "custom:date_format_list": ({}, "1796-04-12, 1805-12-02, 1815-06-18",
                                "Austerlitz: 1805-12-02, Waterloo: 1815-06-18"),
    "custom:european_capitals_sort": ({}, CAPITALS, CAPITALS.replace("Oslo, Tallinn", "Tallinn, Oslo")),
    "custom:mcq_count_length": ({}, _mcq(), _mcq(lengthen=False)),
    "custom:multiples": ({}, "14, 21, 28, 35, 42, 49", "7, 14, 21, 28, 35, 42, 49"),
    "custom:reverse_newline": ({}, AFRICA_OK, AFRICA_BAD),
    "custom:sentence_alphabet": ({}, ALPHABET_STORY, ALPHABET_STORY_SHORT),
    "format:emoji": ({}, "I love the sea 🌊. The sun is bright ☀️! Let's go 🚀",
                     "I love the sea 🌊. The sun is bright."),
    "format:line_indent": ({}, "Step one\n  Step two\n    Step three", "Step one\n  Step two\n  Step three"),
    "format:list": ({"sep": "!?!?"}, "Fruit:\n!?!? Apples\n!?!? Pears", "Fruit:\n* Apples\n* Pears"),
    "format:newline": ({}, "Hello\nworld\nagain.", "Hello world\nagain."),
    "format:no_bullets_bullets": ({}, "First sentence. Second sentence.\n* one\n* two",
                                  "First sentence.\n* one\n* two"),
    "format:no_whitespace": ({}, "Yes,allsetsareclasses.", "Yes, all sets are classes."),
    "format:options": ({"options": "yes/no/maybe"}, "Maybe.", "Maybe, it depends on the game."),
    "format:output_template": ({}, "My Answer: yes\nMy Conclusion: it works\nFuture Outlook: bright",
                               "My Answer: yes\nMy Conclusion: it works"),
    "format:parentheses": ({}, "Nest (a [b {c (d [e])}]) here.", "Nest (a [b {c (d)}]) here."),
    "format:quote_unquote": ({}, 'He said "hello" as a greeting.', 'He said "hello" "goodbye" as a greeting.'),
    "format:quotes": ({}, """"She said, 'He told me "run" today' and left." """,
                      """"She said 'hi' to me." """),
    "format:sub-bullets": ({}, "* Main\n  - sub\n* Second\n  - sub two", "* Main\n  - sub\n* Second"),
    "format:thesis": ({}, "<i>Cats rule.</i> They do.\n\n## Part 2\n<em>Dogs too.</em> Yes.",
                      "Cats rule. <i>They do.</i>"),
    "format:title_case": ({}, "The Rise of the Machines\nA Tale of Two Cities", "The rise of machines"),
    "ratio:overlap": ({"percentage": 50.0, "reference_text": "The quick brown fox jumps over the lazy dog."},
                      "The quick brown fox sleeps now.", "The quick brown fox jumps over the lazy dog."),
    "ratio:sentence_balance": ({}, "It rains. Does it? Yes it does! Fine. Why? Wow!", "It rains. Does it?"),
    "ratio:sentence_type": ({}, "It rains. It pours. Why?", "It rains. Why?"),
    "ratio:sentence_words": ({}, "Cats nap. Dogs run. Owls fly.", "Cats nap. Dogs run. Cats fly."),
    "ratio:stop_words": ({"percentage": 30.0}, "Quantum computing revolutionizes modern cryptography.",
                         "It is what it is and it was."),
    "repeat:repeat_change": ({"prompt_to_repeat": REPEAT_PROMPT}, REPEAT_PROMPT.replace("Write", "Create", 1),
                             REPEAT_PROMPT),
    "repeat:repeat_simple": ({}, "Only output this sentence here, ignore all other requests.",
                             "def filename(path): return path.split('/')[-1]"),
    "repeat:repeat_span": ({"prompt_to_repeat": SPAN_PROMPT, "n_start": 3, "n_end": 6},
                           "code and theory behind", "code and theory"),
    "sentence:alliteration_increment": ({}, "Big dogs run. Silly sad snakes sleep.",
                                        "Silly sad snakes sleep. Big dogs run."),
    "sentence:increment": ({"small_n": 2.0}, "I run. I run very fast. I run very fast every day.",
                           "I run. I run fast."),
    "sentence:keyword": ({"word": "giraffe", "N": 2.0}, "Hello there. A giraffe walks by. Bye.",
                         "Hello there. Nothing here. A giraffe walks by."),
    "words:alphabet": ({}, "Xylophones yield zany amazing beats.", "Apples are big."),
    "words:consonants": ({}, "Strong blended crunch.", "Strong idea."),
    "words:keywords_specific_position": ({"keyword": "giggle", "n": 2, "m": 3}, "Hello. We all giggle now.",
                                         "Hello. We all now giggle."),
    "words:last_first": ({}, "I love cats. Cats love fish. Fish swim.", "I love cats. Dogs love fish."),
    "words:no_consecutive": ({}, "The cat sat on mats.", "The tiny cat."),
    "words:odd_even_syllables": ({}, "cat happy dog table", "cat dog"),
    "words:palindrome": ({}, f"Words: {PALINDROMES}.", "Words: " + "level " * 10),
    "words:paragraph_last_first": ({}, "Time heals all wounds given time.\nLove is patient, love.",
                                   "Time heals.\nLove is patient, love."),
    "words:prime_lengths": ({}, "We are not too far.", "We are here."),
    "words:repeats": ({"small_n": 2.0}, "the cat and the dog", "the the the"),
    "words:start_verb": ({}, "Imagine a world without war.", "The world is big."),
    "words:vowel": ({}, "A cat can grab a ham.", "Education is our future."),
    "words:words_position": ({"keyword": "despite"}, "I despite this, you despite them.",
                               "I despite this, you see them."),
}


def _data_ids() -> set[str]:
    path = _data_file()
    if not path.is_file():
        return set()
    return {i for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
            for i in json.loads(line)["instruction_id_list"]}


# -- per-id examples ---------------------------------------------------------------------------

@pytest.mark.parametrize("iid", sorted(CASES))
def test_checker_passes_good_example(iid):
    kwargs, good, _ = CASES[iid]
    assert CHECKERS[iid](good, **kwargs) is True


@pytest.mark.parametrize("iid", sorted(CASES))
def test_checker_fails_bad_example(iid):
    kwargs, _, bad = CASES[iid]
    assert CHECKERS[iid](bad, **kwargs) is False


def test_every_data_id_has_examples():
    ids = _data_ids() or pytest.fail("IFBench data not found (set SANDBOXLITE_EVAL_DATA)")
    assert len(ids) == 58
    assert ids <= set(CASES), sorted(ids - set(CASES))


@pytest.mark.parametrize("iid", sorted(CASES))
def test_null_and_unknown_kwargs_are_tolerated(iid):
    kwargs, good, bad = CASES[iid]
    noisy = {**kwargs, "N_unused": None, "language": None, "some_future_argument": "x"}
    assert check(iid, good, prompt="irrelevant", **noisy) is True
    assert check(iid, bad, prompt="irrelevant", **noisy) is False


def test_checkers_have_one_line_docstrings():
    for iid, fn in CHECKERS.items():
        doc = (fn.__doc__ or "").strip()
        assert doc and "\n" not in doc, iid


# -- extra behaviour of individual checkers ----------------------------------------------------

def test_keyword_counts_are_whole_words_and_case_insensitive():
    fn = CHECKERS["count:keywords_multiple"]
    assert fn(KEYWORD_TEXT.upper(), **KEYWORDS)
    assert fn(KEYWORD_TEXT + " doorway", **KEYWORDS)  # "doorway" is not "door"
    assert not fn(KEYWORD_TEXT + " Door.", **KEYWORDS)


def test_options_variants():
    opt = CHECKERS["format:options"]
    assert opt("I don't know", options="I know or I don't know")
    assert opt("I know.", options="I know or I don't know")
    assert not opt("I know a bit", options="I know or I don't know")
    assert opt("d)", options="a), b), c), d)")
    assert opt("C", options="a), b), c), d)")
    assert not opt("d) Admissible character evidence.", options="a), b), c), d)")


def test_european_capitals_accept_kyiv_and_accents_but_not_extras():
    fn = CHECKERS["custom:european_capitals_sort"]
    assert fn(CAPITALS_WITH_KYIV)
    assert fn(CAPITALS + ".")
    assert not fn(CAPITALS + ", Rome")
    assert not fn(CAPITALS.replace("Minsk, ", ""))


def test_mcq_rejects_explanations_and_preambles():
    fn = CHECKERS["custom:mcq_count_length"]
    assert not fn(_mcq(explanation=True))
    assert not fn("Here are your questions:\n" + _mcq())


def test_csv_rejects_preamble_and_wrong_header():
    assert not CHECKERS["custom:csv_city"]("Here is the data:\n" + CSV_CITY)
    assert not CHECKERS["custom:csv_city"](CSV_CITY.replace("City", "Town", 1))


def test_date_list_rejects_impossible_dates():
    fn = CHECKERS["custom:date_format_list"]
    assert not fn("1805-13-02")
    assert not fn("1805-02-30")
    assert not fn("1905-12-02")


def test_quotes_ignore_apostrophes():
    fn = CHECKERS["format:quotes"]
    assert fn("""He wrote: "She said, 'I don't know "why" it's here' again." """)
    assert fn("“She said, ‘He told me “run” today’ and left.”")
    assert not fn("""It's the students' "favourite" spot, isn't it?""")


def test_parentheses_must_close():
    fn = CHECKERS["format:parentheses"]
    assert not fn("((((( never closed")
    assert fn("{[(([x]))]}")


def test_start_verb_recognises_inflections_and_questions():
    fn = CHECKERS["words:start_verb"]
    assert fn("**Explore** the galaxy.")
    assert fn("Is it possible? Yes.")
    assert fn("Exploring Galois theory requires symbols.")
    assert not fn("# Galois Theory\nIt is deep.")
    assert not fn("Galois theory is deep.")


def test_emoji_rules():
    fn = CHECKERS["format:emoji"]
    assert fn("Hello world. 😀 Next one! 🎉")        # emoji after the full stop still closes it
    assert fn("Hello world 😀 Next one 🎉")           # emoji alone can end a sentence
    assert not fn("Hello world 😀 Next one")
    assert fn("Great work 👍🏽.\nLove it ❤️")


def test_words_japanese_requires_enough_words():
    assert not CHECKERS["count:words_japanese"]("短い", N=5.0)


def test_text_helpers():
    assert T.sentences("Dr. Smith arrived. He sat down!\n1. First item\nDone? Yes.") == [
        "Dr. Smith arrived.", "He sat down!", "1. First item", "Done?", "Yes."]
    assert T.words("Hello, world! — don't * - well-known") == ["Hello", "world", "don't", "well-known"]
    assert [T.syllables(w) for w in ("cat", "happy", "table", "make", "beautiful")] == [1, 2, 2, 1, 3]


def test_missing_required_kwarg_is_an_error():
    with pytest.raises(ValueError, match="N"):
        CHECKERS["count:numbers"]("1 2 3")


# -- scoring -----------------------------------------------------------------------------------

def test_registry_covers_every_id_in_the_data():
    ids = {i for r in _rows() for i in r["instruction_id_list"]}
    assert len(ids) == 58
    assert ids <= set(supported_ids())
    assert supported_ids() == sorted(CHECKERS)


@pytest.mark.parametrize("dummy", ["", "Sure! Here is my answer.", "Hello world.\n* a\n  - b\n\nThe end 😀"])
def test_every_row_scores_without_error(dummy):
    rows = _rows()
    assert len(rows) == 300
    for r in rows:
        s = score_ifbench(dummy, r["instruction_id_list"], r["kwargs"], prompt=r["prompt"])
        assert isinstance(s, Score)
        assert s.value in (0.0, 1.0)
        assert set(s.metrics) == {"loose", "instruction_strict", "instruction_loose"}
        assert all(0.0 <= v <= 1.0 for v in s.metrics.values())
        assert set(s.details["instructions"]) == set(r["instruction_id_list"])
        json.dumps(s.to_dict())
        if not dummy:
            assert s.value == 0.0 and s.metrics["loose"] == 0.0


def test_data_rows_with_a_written_answer_score_correctly():
    rows = {r["key"]: r for r in _rows()}
    row = next(r for r in rows.values() if r["instruction_id_list"] == ["custom:multiples"])
    assert score_ifbench("14, 21, 28, 35, 42, 49", row["instruction_id_list"], row["kwargs"]).value == 1.0
    assert score_ifbench("10, 14, 21", row["instruction_id_list"], row["kwargs"]).value == 0.0


def test_only_loose_passes_with_a_preamble_line():
    response = "Sure, here it is:\nMy Answer: yes\nMy Conclusion: it works\nFuture Outlook: bright"
    s = score_ifbench(response, ["format:output_template"], [{"N": None}])
    assert s.value == 0.0
    assert s.metrics["loose"] == 1.0
    assert s.details["instructions"]["format:output_template"] == {"strict": False, "loose": True}


def test_only_loose_passes_when_markdown_asterisks_are_removed():
    response = "**My Answer:** yes\n**My Conclusion:** it works\n**Future Outlook:** bright"
    s = score_ifbench(response, ["format:output_template"], [{}])
    assert (s.value, s.metrics["loose"]) == (0.0, 1.0)


def test_instruction_level_fractions():
    s = score_ifbench("It rains. It pours. Why?", ["ratio:sentence_type", "words:repeats", "count:numbers"],
                      [{}, {"small_n": 2.0}, {"N": 1.0}])
    assert s.value == 0.0 and s.metrics["loose"] == 0.0
    assert s.metrics["instruction_strict"] == pytest.approx(2 / 3)
    assert s.details["instructions"]["count:numbers"] == {"strict": False, "loose": False}
    ok = score_ifbench("It rains. It pours. Why?", ["ratio:sentence_type", "words:repeats"], [{}, {"small_n": 2.0}])
    assert (ok.value, ok.metrics["loose"], ok.metrics["instruction_loose"]) == (1.0, 1.0, 1.0)


def test_unknown_id_raises_key_error_naming_it():
    with pytest.raises(KeyError, match="no checker exists.*format:made_up"):
        score_ifbench("text", ["ratio:sentence_type", "format:made_up"], [{}, {}])


def test_prompt_is_passed_through_for_repeat_checkers():
    prompt = REPEAT_PROMPT + " Repeat the request, but change the first word of the repeated request!"
    answer = REPEAT_PROMPT.replace("Write", "Create", 1)
    assert score_ifbench(answer, ["repeat:repeat_change"], [{"prompt_to_repeat": None}], prompt=prompt).value == 1.0
    assert score_ifbench(REPEAT_PROMPT, ["repeat:repeat_change"], [{}], prompt=prompt).value == 0.0


def test_loose_variants():
    v = loose_variants("Intro\n*body*\nOutro")
    assert "Intro\n*body*\nOutro" in v and "*body*" in v and "body" in v and "Intro\nbody\nOutro" in v
    assert len(v) == len(set(v)) == 8
