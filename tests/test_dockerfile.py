"""The Dockerfile parser (sandboxlite.build.dockerfile): pure functions, no sandbox, no network."""

from __future__ import annotations

import pytest

from sandboxlite.errors import BuildError
from sandboxlite.build.dockerfile import (
    KEYWORDS,
    SUPPORTED,
    Instruction,
    expand,
    pairs,
    parse,
    unquote,
    words,
)


def ins(line, keyword, text, flags=None, json=None, heredocs=(), escape="\\"):
    return Instruction(line, keyword, flags or {}, text, json, heredocs, escape)


def error(text: str, **kw) -> BuildError:
    with pytest.raises(BuildError) as e:
        parse(text, **kw)
    return e.value


# --- a realistic Dockerfile ------------------------------------------------------------------

HARBOR = r"""# syntax=docker/dockerfile:1.7
ARG PYTHON_VERSION=3.12
FROM python:${PYTHON_VERSION}-slim AS build
ARG DEBIAN_FRONTEND=noninteractive
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update && \
    # compilers for the wheels
    apt-get install -y --no-install-recommends gcc libffi-dev && \
    # keep the image small
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml ./
RUN pip wheel --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="harbor task" maintainer=ops
RUN useradd --create-home app
WORKDIR /app
COPY --from=build /wheels /wheels
COPY --chown=app:app src/ /app/
USER app
EXPOSE 8000/tcp
ENTRYPOINT ["python", "-m", "app"]
CMD --help
"""


def test_harbor_style_dockerfile():
    with pytest.raises(BuildError) as e:  # CMD --help: a leading -- word is a flag, as in docker
        parse(HARBOR)
    assert str(e.value).startswith("Dockerfile:25: unknown flag --help for CMD")

    got = parse(HARBOR.replace("CMD --help", 'CMD ["--help"]'))
    assert got == [
        ins(2, "ARG", "PYTHON_VERSION=3.12"),
        ins(3, "FROM", "python:${PYTHON_VERSION}-slim AS build"),
        ins(4, "ARG", "DEBIAN_FRONTEND=noninteractive"),
        ins(5, "ENV", "PIP_NO_CACHE_DIR=1     PYTHONDONTWRITEBYTECODE=1"),
        ins(7, "RUN", "apt-get update &&     apt-get install -y --no-install-recommends gcc libffi-dev &&     "
                    "rm -rf /var/lib/apt/lists/*"),
        ins(12, "WORKDIR", "/src"),
        ins(13, "COPY", "pyproject.toml ./"),
        ins(14, "RUN", "pip wheel --wheel-dir /wheels ."),
        ins(16, "FROM", "python:${PYTHON_VERSION}-slim"),
        ins(17, "LABEL", 'org.opencontainers.image.title="harbor task" maintainer=ops'),
        ins(18, "RUN", "useradd --create-home app"),
        ins(19, "WORKDIR", "/app"),
        ins(20, "COPY", "/wheels /wheels", flags={"from": "build"}),
        ins(21, "COPY", "src/ /app/", flags={"chown": "app:app"}),
        ins(22, "USER", "app"),
        ins(23, "EXPOSE", "8000/tcp"),
        ins(24, "ENTRYPOINT", '["python", "-m", "app"]', json=["python", "-m", "app"]),
        ins(25, "CMD", '["--help"]', json=["--help"]),
    ]
    # what the builder then does with the arguments
    args = {"PYTHON_VERSION": "3.12"}
    assert unquote(expand(got[1].text.split()[0], args)) == "python:3.12-slim"
    assert pairs(expand(got[3].text, {}), "ENV") == [("PIP_NO_CACHE_DIR", "1"), ("PYTHONDONTWRITEBYTECODE", "1")]
    assert pairs(got[9].text, "LABEL") == [("org.opencontainers.image.title", "harbor task"), ("maintainer", "ops")]
    assert words(got[13].text) == ["src/", "/app/"]


# --- lines, comments, keywords ----------------------------------------------------------------


def test_comments_blank_lines_and_case_insensitive_keywords():
    got = parse("\n  # indented comment\nfrom alpine\n\n\trun echo a   \n#x\nWorkDir  /w\n")
    assert got == [ins(3, "FROM", "alpine"), ins(5, "RUN", "echo a"), ins(7, "WORKDIR", "/w")]


def test_hash_inside_an_instruction_is_no_comment():
    assert parse("FROM a\nRUN echo '#not a comment' # nor this\n")[1].text == "echo '#not a comment' # nor this"


def test_continuation_joins_without_a_space_and_drops_comments_and_empty_lines():
    text = "FROM a\nRUN echo a\\\nb \\   \n  # comment \\\n\n   c\nUSER x\n"
    assert parse(text)[1:] == [ins(2, "RUN", "echo ab    c"), ins(7, "USER", "x")]


def test_continuation_at_end_of_file_ends_the_instruction():
    assert parse("FROM a\nRUN echo a \\")[1] == ins(2, "RUN", "echo a")
    assert parse("FROM a\nRUN echo a \\\n")[1] == ins(2, "RUN", "echo a")


def test_escaped_escape_character_at_end_of_line_is_no_continuation():
    assert parse("FROM a\nRUN echo a\\\\\nUSER x\n")[1:] == [ins(2, "RUN", "echo a\\\\"), ins(3, "USER", "x")]


def test_crlf_line_endings_and_byte_order_mark():
    got = parse("\ufeffFROM a\r\nRUN echo a \\\r\n  b\r\n")
    assert got == [ins(1, "FROM", "a"), ins(2, "RUN", "echo a   b")]


# --- parser directives ------------------------------------------------------------------------


def test_escape_directive_backtick():
    text = "# escape=`\nFROM mcr.microsoft.com/windows\nRUN dir c:\\ `\n    && echo done\nCOPY a` b c:\\dst\n"
    got = parse(text)
    assert got == [
        ins(2, "FROM", "mcr.microsoft.com/windows", escape="`"),
        ins(3, "RUN", "dir c:\\     && echo done", escape="`"),
        ins(5, "COPY", "a` b c:\\dst", escape="`"),
    ]
    # the backtick also escapes in words/expand, and a backslash is an ordinary character
    assert words(got[2].text, escape="`") == ["a b", "c:\\dst"]
    assert expand("`$A $A", {"A": "x"}, escape="`") == "`$A x"
    assert words(expand("`$A $A\\", {"A": "x"}, escape="`"), escape="`") == ["$A", "x\\"]


def test_directive_spacing_and_case():
    assert parse("#ESCAPE = `\nFROM a\nRUN x `\ny\n")[1].text == "x y"


def test_syntax_directive_is_ignored():
    assert parse("# syntax=docker/dockerfile:1\n# escape=`\nFROM a\n")[0] == ins(3, "FROM", "a", escape="`")


def test_directives_only_before_any_comment_blank_line_or_instruction():
    for text in ("# a comment\n# escape=`\nFROM a\nRUN x \\\ny\n",
                 "\n# escape=`\nFROM a\nRUN x \\\ny\n",
                 "# unknowndirective=1\n# escape=`\nFROM a\nRUN x \\\ny\n",
                 "FROM a\n# escape=`\nRUN x \\\ny\n"):
        got = parse(text)
        assert got[-1].text == "x y" and got[-1].escape == "\\", text


def test_bad_directives():
    e = error("# escape=`\n# escape=\\\nFROM a\n")
    assert str(e) == "Dockerfile:2: only one escape parser directive can be used"
    e = error("# escape=/\nFROM a\n")
    assert e.line == 1 and "invalid escape token '/'" in str(e)


# --- flags ------------------------------------------------------------------------------------


def test_flags():
    got = parse(
        "FROM --platform=$BUILDPLATFORM golang AS build\n"
        "RUN --mount=type=cache,target=/root/.cache --network=none --mount=type=secret,id=tok make\n"
        'COPY --from=build --chmod=755 --link --parents --exclude="*.md" /out/ /usr/local/bin/\n'
        "ADD --checksum=sha256:abc --keep-git-dir=TRUE --link=false https://x/a.tgz /a\n"
        "RUN echo --mount=not-a-flag\n"
        "COPY -- --dash-file /x\n"
        'COPY "--not-a-flag" /x\n'
    )
    assert got == [
        ins(1, "FROM", "golang AS build", flags={"platform": "$BUILDPLATFORM"}),
        ins(2, "RUN", "make", flags={"mount": "type=cache,target=/root/.cache\ntype=secret,id=tok", "network": "none"}),
        ins(3, "COPY", "/out/ /usr/local/bin/",
          flags={"from": "build", "chmod": "755", "link": "", "parents": "", "exclude": "*.md"}),
        ins(4, "ADD", "https://x/a.tgz /a", flags={"checksum": "sha256:abc", "keep-git-dir": "true", "link": "false"}),
        ins(5, "RUN", "echo --mount=not-a-flag"),
        ins(6, "COPY", "--dash-file /x"),
        ins(7, "COPY", '"--not-a-flag" /x'),
    ]


@pytest.mark.parametrize("line, message", [
    ("COPY --form=build /a /b", "Dockerfile:2: unknown flag --form for COPY"),
    ("ADD --from=build /a /b", "Dockerfile:2: unknown flag --from for ADD"),
    ("RUN --privileged make", "Dockerfile:2: unknown flag --privileged for RUN"),
    ("WORKDIR --x=1 /a", "Dockerfile:2: unknown flag --x for WORKDIR"),
    ("COPY --from=a --from=b /a /b", "Dockerfile:2: duplicate flag --from for COPY"),
    ("COPY --from /a /b", "Dockerfile:2: --from of COPY needs a value (--from=VALUE)"),
    ("COPY --link=yes /a /b", "Dockerfile:2: --link of COPY takes true or false, not 'yes'"),
])
def test_bad_flags(line, message):
    e = error(f"FROM a\n{line}\n")
    assert str(e).splitlines()[0] == message
    assert e.line == 2 and e.file == "Dockerfile"


def test_unknown_flag_hint_lists_the_flags():
    e = error("FROM a\nCOPY --x a b\n")
    assert "Hint: COPY takes --from, --chown, --chmod, --link, --parents, --exclude" in str(e)
    assert "Hint: WORKDIR takes no flags" in str(error("FROM a\nWORKDIR --x /a\n"))


# --- exec (JSON) form vs shell form -----------------------------------------------------------


def test_json_and_shell_forms():
    got = parse(
        "FROM a\n"
        'RUN ["/bin/sh", "-c", "echo \\"hi\\""]\n'
        "RUN [ \"a\" ,\"b\" ]   \n"
        "CMD []\n"
        "RUN [not json]\n"
        'CMD ["unclosed"\n'
        'ENTRYPOINT ["a"] trailing\n'
        'COPY ["my file", "/dst dir/"]\n'
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        'ENV ["x"]=1\n'
        "RUN echo [1]\n"
    )
    assert [i.json for i in got] == [
        None, ["/bin/sh", "-c", 'echo "hi"'], ["a", "b"], [], None, None, None,
        ["my file", "/dst dir/"], ["/bin/bash", "-o", "pipefail", "-c"], None, None,
    ]
    assert got[4].text == "[not json]" and got[6].text == '["a"] trailing'


def test_json_array_of_non_strings_is_an_error():
    e = error('FROM a\n\nCMD ["sleep", 10]\n')
    assert str(e).startswith(
        "Dockerfile:3: CMD: when using JSON array syntax, arrays must be comprised of strings only")


def test_shell_requires_json_form():
    e = error("FROM a\nSHELL /bin/bash -c\n")
    assert str(e).startswith("Dockerfile:2: SHELL requires the arguments to be in JSON form")


# --- heredocs ---------------------------------------------------------------------------------


def test_heredoc_run():
    text = "FROM a\nRUN <<EOF\n  set -e\n# not a comment \\\napt-get update\nEOF\nUSER x\n"
    assert parse(text)[1:] == [
        ins(2, "RUN", "<<EOF", heredocs=(("EOF", "  set -e\n# not a comment \\\napt-get update\n"),)),
        ins(7, "USER", "x"),
    ]


def test_heredoc_with_command_flags_and_continuation():
    text = "FROM a\nRUN --network=none python3 \\\n  <<'PY'\nprint('$HOME')\nPY\n"
    assert parse(text)[1] == ins(2, "RUN", "python3   <<'PY'", flags={"network": "none"},
                               heredocs=(("PY", "print('$HOME')\n"),))


def test_heredoc_dash_strips_leading_tabs():
    text = "FROM a\nRUN <<-EOT bash\n\techo a\n\t\t  echo b\n\tEOT\n"
    assert parse(text)[1].heredocs == (("EOT", "echo a\n  echo b\n"),)


def test_heredoc_quoted_name_keeps_body_verbatim():
    text = 'FROM a\nRUN <<"EOF"\necho $HOME \\$x\nEOF\n'
    assert parse(text)[1] == ins(2, "RUN", '<<"EOF"', heredocs=(("EOF", "echo $HOME \\$x\n"),))


def test_heredoc_copy_several():
    text = "FROM a\nCOPY <<one.txt <<two.txt /dst/\nfirst\none.txt\nsecond\n\nsecond line\ntwo.txt\nWORKDIR /\n"
    assert parse(text)[1:] == [
        ins(2, "COPY", "<<one.txt <<two.txt /dst/",
            heredocs=(("one.txt", "first\n"), ("two.txt", "second\n\nsecond line\n"))),
        ins(9, "WORKDIR", "/"),
    ]


def test_not_heredocs():
    text = ('FROM a\nRUN echo "<<EOF" \'<<EOF\' a<<EOF <<<EOF\nRUN ["cat", "<<EOF"]\nCMD cat <<EOF\n'
            'ENV A=<<EOF\nCOPY <<"" /x\n')
    assert [i.heredocs for i in parse(text)] == [(), (), (), (), (), ()]


def test_heredoc_without_terminator():
    e = error("FROM a\n\nRUN <<EOF\necho hi\nEOF \n")
    assert str(e).startswith("Dockerfile:3: unterminated heredoc <<EOF")
    assert e.line == 3
    assert error("FROM a\nCOPY <<A <<B /x\na\nA\nb\n").line == 2


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword, hint", [
    ("HEALTHCHECK CMD curl -f http://localhost/", "sandboxlite runs no health checks"),
    ("VOLUME /data", "Sandbox(mounts=...)"),
    ("onbuild RUN make", "remove it"),
])
def test_refused_keywords(keyword, hint):
    e = error(f"FROM a\nRUN x\n\n{keyword}\n", file="ctx/Dockerfile.dev")
    name = keyword.split()[0].upper()
    assert str(e).splitlines()[0] == f"ctx/Dockerfile.dev:4: {name} is not supported by sandboxlite image build"
    assert (e.file, e.line) == ("ctx/Dockerfile.dev", 4)
    assert hint in e.hint


def test_unknown_keyword():
    e = error("FRM ubuntu\n")
    assert str(e).splitlines()[0] == "Dockerfile:1: unknown instruction 'FRM' (did you mean FROM?)"
    assert e.hint == "the instructions are " + ", ".join(KEYWORDS)
    assert error("FROM a\nRUN a \\\n  && b\napt-get install x\n").line == 4


def test_first_instruction_must_be_from():
    message = "the first instruction must be FROM (only ARG may come before it)"
    for text in ("", "\n\n", "# just a comment\n", "ARG A=1\nARG B\n"):
        e = error(text)
        assert message in str(e) and e.line == 0, text
    e = error("ARG A\n# c\nRUN make\nFROM a\n")
    assert str(e).startswith(f"Dockerfile:3: {message}, not RUN")
    assert [i.keyword for i in parse("ARG V=1\nFROM a:$V\n")] == ["ARG", "FROM"]


def test_keyword_lists():
    assert set(KEYWORDS) - set(SUPPORTED) == {"HEALTHCHECK", "VOLUME", "ONBUILD"}


# --- expand -----------------------------------------------------------------------------------

ENV = {"A": "alpha", "E": "", "P": "/usr/local/lib/python3.12", "N": None}


@pytest.mark.parametrize("word, expected", [
    ("$A", "alpha"),
    ("${A}", "alpha"),
    ("x${A}y $A.txt $Ab", "xalphay alpha.txt "),
    ("$UNSET|${UNSET}", "|"),
    ("${A:-x}|${E:-x}|${UNSET:-x}|${N:-x}", "alpha|x|x|x"),
    ("${A-x}|${E-x}|${UNSET-x}", "alpha||x"),
    ("${A:+y}|${E:+y}|${UNSET:+y}", "y||"),
    ("${A+y}|${E+y}|${UNSET+y}", "y|y|"),
    ("${A:?must be set}", "alpha"),
    ("${E?}", ""),
    ("${UNSET:-$A}|${UNSET:-${E:-deep}}", "alpha|deep"),
    ("${P#*/}", "usr/local/lib/python3.12"),
    ("${P##*/}", "python3.12"),
    ("${P%/*}", "/usr/local/lib"),
    ("${P%%/lib*}", "/usr/local"),
    ("${P#/usr/local}", "/lib/python3.12"),
    ("${P#nomatch}", "/usr/local/lib/python3.12"),
    ("${A%?}|${A#\\*}", "alph|alpha"),
    ("'$A' \"$A\" '${A:-x}'", "'$A' \"alpha\" '${A:-x}'"),
    ("\\$A \\${A} \"\\$A\"", "\\$A \\${A} \"\\$A\""),
    ("\"it's $A\"", "\"it's alpha\""),
    ("$ $1 $$ ${@} 5$", "$    5$"),
])
def test_expand(word, expected):
    assert expand(word, ENV) == expected


def test_expand_then_words_reads_values_literally():
    env = {"S": "a b", "Q": "it's \"q\" \\ $x"}
    assert expand("$S", env) == "a\\ b"
    assert words(expand("$S /dst", env)) == ["a b", "/dst"]
    assert words(expand("$Q", env)) == ["it's \"q\" \\ $x"]
    assert words(expand('"$Q"', env)) == ["it's \"q\" \\ $x"]
    assert words(expand("'$Q' \\$S", env)) == ["$Q", "$S"]
    assert words(expand("${UNSET:-'x y'}", env)) == ["x y"]
    assert pairs(expand("K=$S L=\"$Q\"", env), "ENV") == [("K", "a b"), ("L", "it's \"q\" \\ $x")]


@pytest.mark.parametrize("word, message", [
    ("${A:?}", "A: is not allowed to be unset"),
    ("${E:?}", "E: is not allowed to be empty"),
    ("${A?set it with --build-arg}", "A: set it with --build-arg"),
    ("${A/x/y}", "unsupported modifier (/) in substitution of ${A...}"),
    ("${A:#x}", "unsupported modifier (:#) in substitution of ${A...}"),
    ("${A x}", "unsupported modifier ( ) in substitution of ${A...}"),
    ("${}", "syntax error: bad substitution"),
    ("${:-x}", "syntax error: bad substitution"),
    ("${A", "syntax error: missing '}'"),
    ("${A:-x", "syntax error: missing '}'"),
    ("'$A", "unterminated single-quoted string"),
    ('"$A', "unterminated double-quoted string"),
])
def test_expand_errors(word, message):
    with pytest.raises(BuildError) as e:
        expand(word, {"E": ""}, file="Dockerfile", line=7)
    assert str(e.value).startswith(f"Dockerfile:7: {message}")
    assert e.value.line == 7


# --- words, unquote ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("a  b\tc", ["a", "b", "c"]),
    ("  ", []),
    ("'a b' \"c d\"", ["a b", "c d"]),
    ("'a \\b \"c\"'", ['a \\b "c"']),
    ('"a \\" \\\\ \\$ \\b"', ['a " \\ $ \\b']),
    ("a\\ b \\'c\\\"", ["a b", "'c\""]),
    ("pre'fix 'mid\"dle\"suf", ["prefix middlesuf"]),
    ("a '' \"\" b", ["a", "", "", "b"]),
    ("8080/tcp 53/udp", ["8080/tcp", "53/udp"]),
    ("trailing\\", ["trailing"]),
])
def test_words(text, expected):
    assert words(text) == expected


def test_words_unterminated_quote():
    with pytest.raises(BuildError) as e:
        words("a 'b", file="Dockerfile", line=4)
    assert str(e.value).startswith("Dockerfile:4: unterminated single-quoted string in \"a 'b\"")
    with pytest.raises(BuildError):
        words('a "b\\"')


def test_unquote_keeps_whitespace():
    assert unquote('/my  "dir name"/x\\ y') == "/my  dir name/x y"
    assert unquote("") == ""


# --- pairs ------------------------------------------------------------------------------------


def test_pairs_env_forms():
    assert pairs('A=1 B="two words" C=\'$x\' D=a\\ b E= F=x=y', "ENV") == [
        ("A", "1"), ("B", "two words"), ("C", "$x"), ("D", "a b"), ("E", ""), ("F", "x=y"),
    ]
    assert pairs("JAVA_HOME   /usr/lib/jvm  with \"quoted\"  spaces", "ENV") == [
        ("JAVA_HOME", '/usr/lib/jvm  with quoted  spaces'),
    ]


def test_pairs_label_quoted_keys():
    assert pairs('"com.example.vendor"="ACME Inc" version=1.0 \'multi word\'="x"', "LABEL") == [
        ("com.example.vendor", "ACME Inc"), ("version", "1.0"), ("multi word", "x"),
    ]
    assert pairs("description a legacy label", "label") == [("description", "a legacy label")]


def test_pairs_arg():
    assert pairs("VERSION", "ARG") == [("VERSION", None)]
    assert pairs('A B=2 C="x y" D=', "ARG") == [("A", None), ("B", "2"), ("C", "x y"), ("D", "")]


@pytest.mark.parametrize("text, keyword, message", [
    ("", "ENV", "ENV requires at least one argument"),
    ("A", "ENV", "ENV must have two arguments"),
    ("A=1 B", "ENV", "ENV: can't find = in 'B'; it must be of the form NAME=VALUE"),
    ("=1", "ENV", "ENV names can not be blank"),
    ('""=1', "LABEL", "LABEL names can not be blank"),
    ("=x", "ARG", "ARG names can not be blank"),
    ("  ", "ARG", "ARG requires at least one argument"),
    ('A="unclosed', "ENV", "unterminated double-quoted string"),
])
def test_pairs_errors(text, keyword, message):
    with pytest.raises(BuildError) as e:
        pairs(text, keyword, file="Dockerfile", line=9)
    assert str(e.value).startswith(f"Dockerfile:9: {message}")


def test_pairs_is_for_env_label_arg_only():
    with pytest.raises(ValueError):
        pairs("A=1", "RUN")
