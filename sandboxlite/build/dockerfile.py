"""Reading a Dockerfile: turning its text into a list of ``Instruction`` values, and the word
rules (variable expansion, quoting, ``KEY=VALUE`` pairs) the builder applies to their arguments.

What it does, following BuildKit's Dockerfile frontend:

- parser directives at the top (``# syntax=`` ignored, ``# escape=``` switches the escape
  character to a backtick), comments, blank lines, case-insensitive keywords;
- line continuations (the escape character at the end of a line; comment and empty lines inside
  a continuation are dropped; the pieces are joined without adding a space);
- leading ``--name=value`` flags, checked against the flags each instruction takes;
- the exec (JSON array) form of RUN, CMD, ENTRYPOINT, SHELL, COPY and ADD;
- heredocs of RUN, COPY and ADD in shell form (``RUN <<EOF``, ``<<-EOF`` (leading tabs
  stripped), ``<<"EOF"``, ``COPY <<EOF /dst``): their bodies are collected verbatim; the
  ``<<EOF`` marker stays in the instruction's text (a quoted marker means: no expansion);
- refusal, with the line and a hint, of what sandboxlite does not build (HEALTHCHECK, VOLUME,
  ONBUILD), of unknown keywords, and of a file that does not start with FROM (ARG aside);
- ``expand`` (``$NAME``, ``${NAME}``, ``${NAME:-word}`` and friends), ``words``, ``unquote`` and
  ``pairs``: the shell-like rules docker applies to ENV, ARG, LABEL, COPY, WORKDIR ... arguments.

What it does not do: read files, run anything, know the build context, or decide what an
instruction means (which stage ``--from`` names, what a ``--mount`` asks for, whether a heredoc
body is expanded): that is the builder's job.  Pure and standard library only.

The escape character of a file is recorded in each ``Instruction.escape``; pass it on to
``expand``/``words``/``unquote``/``pairs`` (their ``escape=`` argument) so that a file with
``# escape=``` is read the way docker reads it.

May import: errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import json as _json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import BuildError

KEYWORDS = ("FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "CMD", "ENTRYPOINT",
            "EXPOSE", "LABEL", "SHELL", "STOPSIGNAL", "HEALTHCHECK", "VOLUME", "ONBUILD", "MAINTAINER")
SUPPORTED = ("FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "CMD", "ENTRYPOINT",
             "EXPOSE", "LABEL", "SHELL", "STOPSIGNAL", "MAINTAINER")

# What to do instead of each keyword sandboxlite refuses.
_REFUSED_HINTS = {
    "HEALTHCHECK": "remove it: sandboxlite runs no health checks (check readiness with Sandbox.exec instead)",
    "VOLUME": "remove it: volumes are host mounts given at run time: Sandbox(mounts=...)",
    "ONBUILD": "remove it: sandboxlite images carry no build triggers; put the instructions in the "
               "Dockerfile that builds FROM this image",
}

# The flags each instruction takes, and their kind: "string" (--name=value), "bool" (--name,
# --name=true|false) or "list" (a string that may repeat; the values are joined with "\n").
_FLAGS: dict[str, dict[str, str]] = {
    "FROM": {"platform": "string"},
    "RUN": {"mount": "list", "network": "string", "security": "string"},
    "COPY": {"from": "string", "chown": "string", "chmod": "string", "link": "bool", "parents": "bool",
             "exclude": "list"},
    "ADD": {"chown": "string", "chmod": "string", "link": "bool", "checksum": "string", "keep-git-dir": "bool",
            "exclude": "list"},
}

_BY_LOWER = {k.lower(): k for k in KEYWORDS}  # docker lower-cases the keyword to look it up
_JSON_FORM = frozenset({"RUN", "CMD", "ENTRYPOINT", "SHELL", "COPY", "ADD", "VOLUME"})
_HEREDOC_FORM = frozenset({"RUN", "COPY", "ADD"})

_WHITESPACE = re.compile(r"[\t\v\f\r ]+")  # what separates the keyword from its arguments
_DIRECTIVE = re.compile(r"#[\t\n\f\r ]*([a-zA-Z][a-zA-Z0-9]*)[\t\n\f\r ]*=[\t\n\f\r ]*(.+?)[\t\n\f\r ]*")
_DIRECTIVES = frozenset({"syntax", "escape", "check"})
_HEREDOC = re.compile(r"([0-9]*)<<(-?)([^<]*)")
# A line continues when it ends with the escape character (blanks may follow) not itself escaped.
_CONTINUATION = {e: re.compile(rf"([^{re.escape(e)}]){re.escape(e)}[ \t]*$|^{re.escape(e)}[ \t]*$") for e in "\\`"}


@dataclass(frozen=True)
class Instruction:
    """One instruction of a Dockerfile.

    ``line`` is where it starts (1-based); ``keyword`` is upper case; ``flags`` are its leading
    ``--name=value`` flags (a bare ``--link`` gives ``""``, a repeated list flag such as
    ``--mount`` its values joined with ``"\\n"``); ``text`` the arguments after the flags,
    continuation lines joined, untouched otherwise (no expansion, quotes kept); ``json`` the exec
    form when ``text`` is a JSON array of strings (RUN, CMD, ENTRYPOINT, SHELL, COPY, ADD), else
    None; ``heredocs`` the ``(name, body)`` of each heredoc, in order (``text`` keeps the
    ``<<NAME`` markers); ``escape`` the file's escape character (``\\`` or a backtick).
    """

    line: int
    keyword: str
    flags: dict[str, str]
    text: str
    json: list[str] | None
    heredocs: tuple[tuple[str, str], ...] = ()
    escape: str = "\\"


# ---------------------------------------------------------------------------------------------
# parse()


def parse(text: str, *, file: str = "Dockerfile") -> list[Instruction]:
    """The instructions of the Dockerfile ``text``; ``file`` names it in errors.

    Raises ``BuildError`` (with the file and line) for a bad parser directive, an unknown or
    refused keyword, an unknown or malformed flag, a JSON array of non-strings, SHELL not in
    JSON form, an unterminated heredoc, and a file that is empty or does not start with FROM
    (only ARG may come before it).
    """
    lines = _physical_lines(text)
    escape = "\\"
    in_directives, seen_directives = True, set()
    seen_from = False
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        start = i + 1
        first = lines[i].rstrip("\r\n").lstrip()
        i += 1
        if in_directives:
            directive = _directive(first)
            if directive is not None:
                escape = _apply_directive(directive, escape, seen_directives, file=file, line=start)
                continue
            in_directives = False
        if first.startswith("#"):
            continue
        joined, i = _logical_line(first, lines, i, escape)
        if not joined.strip():
            continue
        inst = _instruction(joined, start, escape, file)
        if inst.keyword in _HEREDOC_FORM and inst.json is None:
            heredocs, i = _read_heredocs(_heredoc_markers(inst.text), lines, i, file=file, line=start)
            inst = dataclasses.replace(inst, heredocs=heredocs)
        if inst.keyword == "FROM":
            seen_from = True
        elif inst.keyword != "ARG" and not seen_from:
            raise BuildError(
                f"the first instruction must be FROM (only ARG may come before it), not {inst.keyword}",
                file=file, line=start, hint="start the Dockerfile with FROM IMAGE",
            )
        out.append(inst)
    if not seen_from:
        what = "has no instructions" if not out else "has no FROM"
        raise BuildError(
            f"the Dockerfile {what}: the first instruction must be FROM (only ARG may come before it)",
            file=file, hint="start the Dockerfile with FROM IMAGE",
        )
    return out


def _physical_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its line ending (docker splits on ``\\n`` only); a
    UTF-8 byte-order mark at the start is dropped."""
    parts = text.removeprefix("\ufeff").split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _directive(line: str) -> tuple[str, str] | None:
    """``(name, value)`` when ``line`` (left-stripped) is a parser directive docker knows."""
    m = _DIRECTIVE.fullmatch(line)
    if m is None or m.group(1).lower() not in _DIRECTIVES:
        return None
    return m.group(1).lower(), m.group(2)


def _apply_directive(directive: tuple[str, str], escape: str, seen: set[str], *, file: str, line: int) -> str:
    """The escape character after ``directive``; each directive may appear once."""
    name, value = directive
    if name in seen:
        raise BuildError(f"only one {name} parser directive can be used", file=file, line=line)
    seen.add(name)
    if name != "escape":
        return escape  # syntax= and check= mean nothing to sandboxlite
    if value not in ("\\", "`"):
        raise BuildError(f"invalid escape token {value!r}: it must be ` or \\", file=file, line=line)
    return value


def _logical_line(first: str, lines: list[str], i: int, escape: str) -> tuple[str, int]:
    """``first`` joined with the lines it continues onto (from ``lines[i]`` on), and the index
    after them.  Comment and empty lines inside a continuation are dropped, as docker does."""
    joined, more = _trim_continuation(first, escape)
    while more and i < len(lines):
        piece = lines[i].rstrip("\r\n")
        i += 1
        if not piece.lstrip() or piece.lstrip().startswith("#"):
            continue
        piece, more = _trim_continuation(piece, escape)
        joined += piece
    return joined, i


def _trim_continuation(line: str, escape: str) -> tuple[str, bool]:
    """``(line without its continuation mark, True)`` when ``line`` ends with the escape
    character (trailing blanks allowed, an escaped escape character is no mark), else
    ``(line, False)``."""
    m = _CONTINUATION[escape].search(line)
    if m is None:
        return line, False
    return line[: m.start()] + (m.group(1) or ""), True


def _instruction(joined: str, line: int, escape: str, file: str) -> Instruction:
    """The instruction on the logical line ``joined`` (heredoc bodies not read yet)."""
    head, rest = _split_keyword(joined)
    keyword = _BY_LOWER.get(head.lower())
    if keyword is None:
        close = difflib.get_close_matches(head.upper(), KEYWORDS, n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        raise BuildError(
            f"unknown instruction {head!r}{guess}", file=file, line=line,
            hint="the instructions are " + ", ".join(KEYWORDS),
        )
    if keyword not in SUPPORTED:
        raise BuildError(
            f"{keyword} is not supported by sandboxlite image build", file=file, line=line,
            hint=_REFUSED_HINTS[keyword],
        )
    flag_words, args = _extract_flags(rest)
    flags = _check_flags(keyword, flag_words, file=file, line=line)
    text = args.strip()
    return Instruction(line, keyword, flags, text, _exec_form(keyword, text, file=file, line=line), (), escape)


def _split_keyword(line: str) -> tuple[str, str]:
    """The first word of ``line`` and the rest."""
    parts = _WHITESPACE.split(line.strip(), maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _extract_flags(rest: str) -> tuple[list[str], str]:
    """The leading ``--flag`` words of ``rest`` (quotes removed, ``\\`` escapes applied, as
    docker does) and the text after them; a lone ``--`` ends the flags."""
    flags: list[str] = []
    pos, n = 0, len(rest)
    while True:
        while pos < n and rest[pos].isspace():
            pos += 1
        if not rest.startswith("--", pos):
            return flags, rest[pos:]
        word, pos = _flag_word(rest, pos)
        if word == "--":
            return flags, rest[pos:]
        flags.append(word)


def _flag_word(rest: str, pos: int) -> tuple[str, int]:
    """The flag word starting at ``pos`` (up to unquoted whitespace) and where it ends."""
    out: list[str] = []
    quote = None
    n = len(rest)
    while pos < n:
        ch = rest[pos]
        if quote is None and ch.isspace():
            break
        pos += 1
        if quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
        elif ch == "\\":
            if pos < n:
                out.append(rest[pos])
                pos += 1
        else:
            out.append(ch)
    return "".join(out), pos


def _check_flags(keyword: str, words: list[str], *, file: str, line: int) -> dict[str, str]:
    """The flags of ``keyword`` as a dict, after docker's checks."""
    known = _FLAGS.get(keyword, {})
    takes = ", ".join(f"--{f}" for f in known)
    flags: dict[str, str] = {}
    for word in words:
        name, eq, value = word[2:].partition("=")
        kind = known.get(name)
        if kind is None:
            raise BuildError(
                f"unknown flag --{name} for {keyword}", file=file, line=line,
                hint=f"{keyword} takes {takes}" if takes else f"{keyword} takes no flags",
            )
        if name in flags and kind != "list":
            raise BuildError(f"duplicate flag --{name} for {keyword}", file=file, line=line)
        if kind == "bool":
            if eq and value.lower() not in ("true", "false"):
                raise BuildError(f"--{name} of {keyword} takes true or false, not {value!r}", file=file, line=line)
            flags[name] = value.lower()
        elif not eq:
            raise BuildError(f"--{name} of {keyword} needs a value (--{name}=VALUE)", file=file, line=line)
        elif name in flags:
            flags[name] += "\n" + value
        else:
            flags[name] = value
    return flags


def _exec_form(keyword: str, text: str, *, file: str, line: int) -> list[str] | None:
    """The JSON array ``text`` stands for, when ``keyword`` has an exec form and ``text`` is
    valid JSON; None for the shell form (which includes text that starts with ``[`` but is no
    valid JSON).  A valid JSON array holding anything but strings is an error, as in docker."""
    value = None
    if keyword in _JSON_FORM and text.startswith("["):
        try:
            value = _json.loads(text, parse_constant=_no_constant)
        except ValueError:
            value = None
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise BuildError(
                f"{keyword}: when using JSON array syntax, arrays must be comprised of strings only",
                file=file, line=line, hint='quote every element, e.g. ["python3", "-m", "http.server", "8000"]',
            )
    if keyword == "SHELL" and not isinstance(value, list):
        raise BuildError(
            "SHELL requires the arguments to be in JSON form", file=file, line=line,
            hint='write it as SHELL ["/bin/bash", "-c"]',
        )
    return value if isinstance(value, list) else None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # Go's decoder refuses NaN and Infinity


def _heredoc_markers(text: str) -> list[tuple[str, bool]]:
    """``(name, strip leading tabs)`` of each ``<<NAME`` word of ``text``, in order."""
    markers = []
    for raw in _raw_words(text, "\\"):
        m = _HEREDOC.fullmatch(raw)
        if m is None or not m.group(3):
            continue
        try:
            name = _lex(m.group(3), "\\", split=True, file="", line=0)
        except BuildError:
            continue
        if len(name) == 1 and name[0]:
            markers.append((name[0], m.group(2) == "-"))
    return markers


def _read_heredocs(markers: list[tuple[str, bool]], lines: list[str], i: int, *, file: str,
                   line: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """The ``(name, body)`` of each heredoc, read from ``lines[i:]``, and the index after them."""
    heredocs = []
    for name, chomp in markers:
        body: list[str] = []
        while True:
            if i >= len(lines):
                raise BuildError(
                    f"unterminated heredoc <<{name}: no line {name!r} ends it", file=file, line=line,
                    hint=f"end the heredoc with a line holding only {name}",
                )
            raw = lines[i]
            i += 1
            candidate = raw.rstrip("\r\n")
            if chomp:
                candidate, raw = candidate.lstrip("\t"), raw.lstrip("\t")
            if candidate == name:
                break
            body.append(raw)
        heredocs.append((name, "".join(body)))
    return tuple(heredocs), i


# ---------------------------------------------------------------------------------------------
# words(), unquote(), pairs(): quotes and escapes


def words(text: str, *, file: str = "Dockerfile", line: int = 0, escape: str = "\\") -> list[str]:
    """``text`` split into words, shell-like: unquoted whitespace separates words; ``'...'`` is
    literal; in ``"..."`` the escape character escapes only ``"``, itself and ``$``; outside
    quotes it escapes any character.  Quotes and escapes are removed; ``''`` is an empty word.
    ``$`` is an ordinary character here: call ``expand`` first.  An unterminated quote raises
    ``BuildError``.

    >>> words('a "b c" \\'d e\\' f\\\\ g')
    ['a', 'b c', 'd e', 'f g']
    """
    return _lex(text, escape, split=True, file=file, line=line)


def unquote(text: str, *, file: str = "Dockerfile", line: int = 0, escape: str = "\\") -> str:
    """``text`` as one word (docker's ProcessWord, for WORKDIR, USER, a JSON-form argument ...):
    quotes and escapes processed as in ``words``, whitespace kept."""
    return "".join(_lex(text, escape, split=False, file=file, line=line))


def pairs(text: str, keyword: str, *, file: str = "Dockerfile", line: int = 0,
          escape: str = "\\") -> list[tuple[str, str | None]]:
    """The ``(key, value)`` pairs of an ENV, LABEL or ARG argument text, quotes and escapes
    processed in keys and values.

    - ``KEY=VALUE KEY2="quoted value"``: one pair a word (a word splits at its first ``=``);
    - ENV and LABEL also take the legacy ``KEY value with spaces``, when the first word has no
      ``=``: one pair, the value is the rest of the text;
    - ARG takes ``NAME`` (value None) and ``NAME=default``, several in one line.

    An empty key, a missing ``=`` or no argument at all raise ``BuildError``.
    """
    kw = keyword.upper()
    if kw not in ("ENV", "LABEL", "ARG"):
        raise ValueError(f"pairs() reads ENV, LABEL or ARG, not {keyword!r}")
    raw = _raw_words(text, escape)
    if not raw:
        raise BuildError(f"{kw} requires at least one argument", file=file, line=line,
                         hint=f"write {kw} NAME=VALUE")
    if kw != "ARG" and "=" not in raw[0]:
        return [_legacy_pair(text, kw, file=file, line=line, escape=escape)]
    out: list[tuple[str, str | None]] = []
    for word in raw:
        key, eq, value = word.partition("=")
        if not eq and kw != "ARG":
            raise BuildError(f"{kw}: can't find = in {word!r}; it must be of the form NAME=VALUE",
                             file=file, line=line)
        out.append((_key(key, kw, file=file, line=line, escape=escape),
                    unquote(value, file=file, line=line, escape=escape) if eq else None))
    return out


def _legacy_pair(text: str, kw: str, *, file: str, line: int, escape: str) -> tuple[str, str]:
    """``KEY value with spaces``: the first word is the key, the rest of the text the value."""
    parts = _WHITESPACE.split(text.strip(), maxsplit=1)
    if len(parts) < 2:
        raise BuildError(f"{kw} must have two arguments", file=file, line=line, hint=f"write {kw} NAME=VALUE")
    return (_key(parts[0], kw, file=file, line=line, escape=escape),
            unquote(parts[1], file=file, line=line, escape=escape))


def _key(raw: str, kw: str, *, file: str, line: int, escape: str) -> str:
    key = unquote(raw, file=file, line=line, escape=escape)
    if not key:
        raise BuildError(f"{kw} names can not be blank", file=file, line=line, hint=f"write {kw} NAME=VALUE")
    return key


def _raw_words(text: str, escape: str) -> list[str]:
    """``text`` split at unquoted, unescaped whitespace, quotes and escapes kept (docker's
    parseWords: the first step of ENV, LABEL and ARG)."""
    out: list[str] = []
    cur: list[str] = []
    quote = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if quote is None and ch.isspace():
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
            if ch == quote:
                quote = None
            elif quote is None and ch in "'\"":
                quote = ch
            elif ch == escape and quote != "'" and i + 1 < n:
                i += 1
                cur.append(text[i])
        i += 1
    if cur:
        out.append("".join(cur))
    return out


def _lex(text: str, escape: str, *, split: bool, file: str, line: int) -> list[str]:
    """Quotes and escapes of ``text`` processed; split at unquoted whitespace when ``split``."""
    out: list[str] = []
    cur: list[str] = []
    in_word = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _unterminated("single", text, file, line)
            cur.append(text[i + 1:end])
            i = end + 1
        elif ch == '"':
            chunk, i = _double_quoted(text, i, escape, file, line)
            cur.append(chunk)
        elif ch == escape:
            if i + 1 == n:
                break  # an escape character at the very end is dropped
            cur.append(text[i + 1])
            i += 2
        elif split and ch.isspace():
            if in_word:
                out.append("".join(cur))
                cur, in_word = [], False
            i += 1
            continue
        else:
            cur.append(ch)
            i += 1
        in_word = True
    if in_word or not split:
        out.append("".join(cur))
    return out


def _double_quoted(text: str, i: int, escape: str, file: str, line: int) -> tuple[str, int]:
    """The content of the double-quoted string at ``text[i]`` and the index after it."""
    out: list[str] = []
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == escape and i + 1 < len(text) and text[i + 1] in ('"', "$", escape):
            ch = text[i + 1]
            i += 1
        out.append(ch)
        i += 1
    raise _unterminated("double", text, file, line)


def _unterminated(kind: str, text: str, file: str, line: int) -> BuildError:
    return BuildError(f"unterminated {kind}-quoted string in {text!r}", file=file, line=line,
                      hint="close the quote (or escape the quote character)")


# ---------------------------------------------------------------------------------------------
# expand(): variables


def expand(word: str, env: Mapping[str, str | None], *, file: str = "Dockerfile", line: int = 0,
           escape: str = "\\") -> str:
    """``word`` with its variables substituted from ``env``, docker's way; quotes and escapes
    are left in place for ``words``/``unquote``/``pairs`` to process afterwards.

    Substitution: ``$NAME``, ``${NAME}`` (unset: ``""``; a None value counts as unset),
    ``${NAME:-word}`` / ``${NAME-word}`` (word when unset or empty / unset),
    ``${NAME:+word}`` / ``${NAME+word}`` (word when set and not empty / set, else ``""``),
    ``${NAME:?message}`` / ``${NAME?message}`` (``BuildError`` when unset or empty / unset),
    ``${NAME#pattern}``, ``${NAME##pattern}``, ``${NAME%pattern}``, ``${NAME%%pattern}``
    (remove the shortest / longest matching prefix / suffix; ``*`` and ``?`` are wildcards).
    Any other ``${...}`` form raises ``BuildError``.  A ``word`` inside ``${...}`` is itself
    expanded and unquoted, as in docker.

    Nothing is substituted inside ``'...'`` or after the escape character (``\\$A`` stays
    ``\\$A``, which ``words`` turns into ``$A``).  A ``$`` followed by no name stays ``$``.

    The contract: ``words(expand(t, env))``, ``unquote(expand(t, env))`` and
    ``pairs(expand(t, env), kw)`` give what docker gives.  To that end a substituted value is
    inserted escaped where it would otherwise be read as syntax: its quotes, escape characters
    and (outside double quotes) whitespace get an escape character in front, so a value is
    never split into several words nor unquoted twice.  The output of ``expand`` is therefore
    meant for those functions, not for use as is.

    >>> expand('$A "${B:-x y}" \\'$A\\'', {"A": "1 2"})
    '1\\\\ 2 "x y" \\'$A\\''
    """
    return _Expander(word, env, escape, file, line).run()


_MODIFIERS = frozenset({"-", "+", "?", ":-", ":+", ":?", "#", "%"})
_SPECIAL_PARAMS = "@*#?-$!"


class _Expander:
    """One pass over a word (docker's shell lexer, with quotes and escapes kept at the top)."""

    def __init__(self, text: str, env: Mapping[str, str | None], escape: str, file: str, line: int) -> None:
        self.text, self.env, self.escape, self.file, self.line = text, env, escape, file, line
        self.pos = 0

    def _peek(self) -> str | None:
        return self.text[self.pos] if self.pos < len(self.text) else None

    def _next(self) -> str | None:
        ch = self._peek()
        self.pos += 1
        return ch

    def _error(self, message: str) -> BuildError:
        return BuildError(
            f"{message} in {self.text!r}", file=self.file, line=self.line,
            hint="the forms are $NAME, ${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:+word}, ${NAME+word}, "
                 "${NAME:?message}, ${NAME?message}, ${NAME#pattern}, ${NAME##pattern}, ${NAME%pattern}, "
                 "${NAME%%pattern}; escape a literal $ as \\$",
        )

    def run(self) -> str:
        """The whole text: substitutions made, quotes and escapes copied as they are."""
        out: list[str] = []
        in_double = False
        while (ch := self._peek()) is not None:
            if ch == "$":
                out.append(_escaped(self._dollar(), in_double, self.escape))
                continue
            self.pos += 1
            nxt = self._peek()
            if ch == self.escape and nxt is not None and (not in_double or nxt in ('"', "$", self.escape)):
                out.append(ch + nxt)
                self.pos += 1
            elif ch == '"':
                in_double = not in_double
                out.append(ch)
            elif ch == "'" and not in_double:
                end = self.text.find("'", self.pos)
                if end < 0:
                    raise self._error("unterminated single-quoted string")
                out.append(self.text[self.pos - 1:end + 1])
                self.pos = end + 1
            else:
                out.append(ch)
        if in_double:
            raise self._error("unterminated double-quoted string")
        return "".join(out)

    def _dollar(self) -> str:
        """The value of the ``$...`` at ``pos`` (which is consumed), as plain text."""
        self.pos += 1
        if self._peek() != "{":
            name = self._name()
            return self._value(name) or "" if name else "$"
        self.pos += 1
        ch = self._peek()
        if ch is None:
            raise self._error("syntax error: missing '}'")
        if ch in "{}:":
            raise self._error("syntax error: bad substitution")
        name = self._name()
        modifier = self._next()
        if modifier == "}":
            return self._value(name) or ""
        if modifier == ":" and self._peek() is not None:
            modifier += self._next() or ""
        if modifier is None or modifier == ":":
            raise self._error("syntax error: missing '}'")
        if modifier not in _MODIFIERS:
            raise self._error(f"unsupported modifier ({modifier}) in substitution of ${{{name}...}}")
        arg = self._until_brace(raw_escapes=modifier in ("#", "%"))
        return self._modified(name, modifier, arg)

    def _name(self) -> str:
        """The variable name at ``pos``: letters, digits and ``_``; or digits only; or one
        special parameter character (``$@``, ``$$`` ... which are never set)."""
        start = self.pos
        ch = self._peek()
        if ch is None:
            return ""
        if ch.isdecimal():
            while (c := self._peek()) is not None and c.isdecimal():
                self.pos += 1
        elif ch in _SPECIAL_PARAMS:
            self.pos += 1
        else:
            while (c := self._peek()) is not None and (c.isalpha() or c.isdecimal() or c == "_"):
                self.pos += 1
        return self.text[start:self.pos]

    def _value(self, name: str) -> str | None:
        return self.env.get(name)

    def _modified(self, name: str, modifier: str, arg: str) -> str:
        value = self._value(name)
        missing = value is None or (modifier.startswith(":") and value == "")
        op = modifier[-1]
        if op == "-":
            return arg if missing else value or ""
        if op == "+":
            return "" if missing else arg
        if op == "?":
            if missing:
                default = "is not allowed to be unset" if value is None else "is not allowed to be empty"
                raise BuildError(f"{name}: {arg or default}", file=self.file, line=self.line)
            return value or ""
        longest = arg.startswith(op)
        return _trim(value or "", arg[1:] if longest else arg, suffix=op == "%", longest=longest,
                     escape=self.escape)

    def _until_brace(self, *, raw_escapes: bool) -> str:
        """The word up to the closing ``}``, expanded and unquoted (escape characters kept
        when ``raw_escapes``: a pattern's ``\\*`` is a literal star)."""
        out: list[str] = []
        while True:
            ch = self._peek()
            if ch is None:
                raise self._error("syntax error: missing '}'")
            if ch == "}":
                self.pos += 1
                return "".join(out)
            if ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise self._error("unterminated single-quoted string")
                out.append(self.text[self.pos + 1:end])
                self.pos = end + 1
            elif ch == '"':
                out.append(self._double_quoted())
            elif ch == "$":
                out.append(self._dollar())
            else:
                self.pos += 1
                if ch == self.escape:
                    if raw_escapes:
                        out.append(ch)
                    ch = self._next()
                    if ch is None:
                        raise self._error("syntax error: missing '}'")
                out.append(ch)

    def _double_quoted(self) -> str:
        """A ``"..."`` inside ``${...}``: expanded and unquoted."""
        out: list[str] = []
        self.pos += 1
        while True:
            ch = self._peek()
            if ch is None:
                raise self._error("unterminated double-quoted string")
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "$":
                out.append(self._dollar())
                continue
            self.pos += 1
            if ch == self.escape and self._peek() in ('"', "$", self.escape):
                ch = self._next() or ""
            out.append(ch)


def _escaped(value: str, in_double: bool, escape: str) -> str:
    """``value`` written so that ``words``/``unquote`` read it back literally, as one piece."""
    out = []
    for ch in value:
        if ch == '"' or ch == escape or (not in_double and (ch == "'" or ch.isspace())):
            out.append(escape)
        out.append(ch)
    return "".join(out)


def _trim(value: str, pattern: str, *, suffix: bool, longest: bool, escape: str) -> str:
    """``value`` without its shortest/longest prefix (or suffix) matching the glob ``pattern``
    (``*`` any text, ``?`` one character, the escape character makes the next one literal)."""
    rx = _glob(pattern, escape)
    n = len(value)
    cuts = range(n + 1) if longest == suffix else range(n, -1, -1)
    for i in cuts:
        if rx.fullmatch(value[i:] if suffix else value[:i]):
            return value[:i] if suffix else value[i:]
    return value


def _glob(pattern: str, escape: str) -> re.Pattern[str]:
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "*" else "." if ch == "?" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)
