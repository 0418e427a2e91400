"""The agent's three tools (the LLM-in-Sandbox protocol): ``execute_bash``,
``str_replace_editor`` and ``submit``.

``Tools(sandbox)`` gives the OpenAI function schemas (``schemas()``) and runs a
call (``call(name, arguments)``).  A tool's result is a ``ToolResult``: the text
the model sees, plus structured facts for the trajectory.  Anything the model
got wrong (an unknown tool, bad arguments, a refused edit) raises ``ToolError``,
whose message goes back to the model and says what to do next.

Files are read and written through the sandbox's file API, never through a
shell, so their bytes are exact: tabs, CRLF line endings, a missing final
newline, backslashes and text like ``-e`` or ``$HOME`` all survive an edit.
"""

from __future__ import annotations

import asyncio
import codecs
import errno
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ConfigError, SandboxError, SandboxFileError, ToolError
from .paths import DEFAULT_PATHS, Paths

if TYPE_CHECKING:
    from ..jail.aio import AsyncShell
    from ..jail.sandbox import Sandbox
    from ..jail.shell import Shell
    from ..result import ExecResult

EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
# what each editor command needs and may take beside "command" (as ``_edit`` checks them); a local
# model's grammar-constrained calls are built from it, so they are complete calls
EDITOR_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "view": (("path",), ("view_range",)),
    "create": (("path", "file_text"), ()),
    "str_replace": (("path", "old_str"), ("new_str",)),
    "insert": (("path", "insert_line", "new_str"), ()),
}
MAX_EDIT_BYTES = 64 << 20  # the editor reads files up to this size; bigger ones are for execute_bash
BINARY_SNIFF_BYTES = 8192
VIEW_CHUNK = 1 << 20  # view reads files this much at a time (>= BINARY_SNIFF_BYTES: the first read is sniffed)
MAX_LISTED_OCCURRENCES = 10  # a non-unique old_str: the lines of this many of its occurrences are named
SNIPPET_CONTEXT_LINES = 4
# what bash prints when the timeout kills its foreground job ("bash:  8 Killed  sleep 5")
_KILLED_REPORT = re.compile(r"^bash:(?: line \d+:)? +\d+ Killed .*\n?", re.MULTILINE)
USE_BASH_FOR_BINARY = "use execute_bash to inspect it (e.g. `file PATH`, `xxd PATH | head`)"


@dataclass
class ToolResult:
    """What one tool call produced."""

    output: str  # the text the model sees as the tool message
    submitted: bool = False
    data: dict = field(default_factory=dict)  # structured facts (exit_code, timed_out, path, ...)


# -- argument checking ---------------------------------------------------------------
class _Arg(NamedTuple):
    types: tuple[type, ...]
    expected: str  # the type as the model is told
    required: bool = False


def _string(required: bool = False) -> _Arg:
    return _Arg((str,), "a string", required)


# tool -> its arguments, in the order they are described to the model
_SIGNATURES: dict[str, dict[str, _Arg]] = {
    "execute_bash": {"command": _string(required=True), "timeout": _Arg((int, float), "a number")},
    "str_replace_editor": {
        "command": _string(required=True),
        "path": _string(required=True),
        "file_text": _string(),
        "old_str": _string(),
        "new_str": _string(),
        "insert_line": _Arg((int,), "an integer"),
        "view_range": _Arg((list,), "a list of two integers [start, end]"),
    },
    "submit": {},
}


def _describe(value: Any) -> str:
    """A value as the model sent it, shortened: 'string "3"'."""
    try:
        text = readable(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{_json_type(value)} {text}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _signature_text(tool: str) -> str:
    sig = _SIGNATURES[tool]
    if not sig:
        return "no arguments"
    return ", ".join(f"{name} ({arg.expected}{'' if arg.required else ', optional'})" for name, arg in sig.items())


def _parse_arguments(tool: str, arguments: dict | str | None) -> dict[str, Any]:
    """Decode (if JSON) and check a call's arguments against the tool's signature.

    ``null`` values count as absent; an empty string or ``null`` is an empty
    argument object (models send these for tools without arguments).
    """
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(
                f"{tool}: the arguments are not valid JSON ({e.msg} at position {e.pos}); "
                f"send a JSON object with {_signature_text(tool)}"
            ) from None
        if arguments is None:
            arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(
            f"{tool}: the arguments must be a JSON object, got {_json_type(arguments)}; "
            f"send a JSON object with {_signature_text(tool)}"
        )
    sig = _SIGNATURES[tool]
    args = {k: v for k, v in arguments.items() if v is not None}
    for name in args:
        if name not in sig:
            raise ToolError(f"{tool}: unknown argument {name!r}; the arguments are: {_signature_text(tool)}")
    for name, arg in sig.items():
        if name not in args:
            if arg.required:
                raise ToolError(f"{tool}: missing required argument {name!r} ({arg.expected})")
            continue
        value = args[name]
        if isinstance(value, float) and arg.types == (int,) and value.is_integer():
            value = args[name] = int(value)  # 3.0 is a fine line number
        if not isinstance(value, arg.types) or isinstance(value, bool):
            raise ToolError(f"{tool}: argument {name!r} must be {arg.expected}, got {_describe(value)}")
    return args


# -- text helpers ------------------------------------------------------------------------
_SURROGATES = re.compile("[\ud800-\udfff]")


def readable(text: str) -> str:
    """``text`` fit to show the model and to record: each byte that is not UTF-8 as ``\\xff``.

    Names from the sandbox (its files, the shell's cwd) are surrogate-escaped str, as
    ``os.fsdecode`` gives them: a lone surrogate per byte that is not UTF-8, which cannot be
    written as UTF-8 (the trajectory, the model's messages).  Each becomes ``\\xff``, the way
    bash's ``$'...'`` writes that byte; any other lone surrogate (a model can send one in JSON)
    becomes ``\\udXXX``.  Text without any comes back as it is.
    """
    return _SURROGATES.sub(_escape_surrogate, text)


def _escape_surrogate(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def clip_middle(text: str, limit: int, why: str = "omitted") -> tuple[str, int]:
    """Keep the head and tail of ``text`` (about ``limit`` characters in all), with a note in the
    middle: "[... N characters {why} ...]".

    Returns the text and how many characters were left out (0 if none).
    """
    if len(text) <= limit:
        return text, 0
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters {why} ...]\n{text[len(text) - tail:]}", omitted


def _split_lines(text: str) -> list[str]:
    """Lines as ``cat -n`` sees them: split at "\\n" only, each keeping its "\\n"."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _line_of(text: str, offset: int) -> int:
    """1-based line number of a character offset."""
    return text.count("\n", 0, offset) + 1


def _count_lines(text: str) -> int:
    """How many lines ``_split_lines`` would give, without making them."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _line_start(text: str, n: int) -> int:
    """Offset of the start of 1-based line ``n`` (``len(text)`` past the last line)."""
    return _skip_lines(text, 0, n - 1)[0]


_SKIP_BLOCK = 4096


def _skip_lines(text: str, pos: int, n: int) -> tuple[int, int]:
    """The offset just past the ``n``-th "\\n" from ``pos`` on, and how many were passed (fewer than
    ``n`` when the text ends first: then the offset is ``len(text)``).  Blocks without the one
    sought are counted whole, so skipping millions of lines costs only a few thousand finds."""
    passed = 0
    while passed < n and pos < len(text):
        end = min(len(text), pos + _SKIP_BLOCK)
        in_block = text.count("\n", pos, end)
        if passed + in_block < n:
            passed, pos = passed + in_block, end
            continue
        while passed < n:
            pos = text.find("\n", pos, end) + 1
            passed += 1
    return pos, passed


def _number_lines(lines: list[str], first: int) -> str:
    """``cat -n`` style: a 6-wide line number, a tab, the line (its line ending left out)."""
    return "".join(f"{n:6}\t{_strip_eol(line)}\n" for n, line in enumerate(lines, first))


def _strip_eol(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def _uses_crlf(text: str) -> bool:
    """Does the file mostly end its lines with CRLF?"""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def _to_crlf(text: str) -> str:
    """Bare "\\n" become "\\r\\n" ("\\r\\n" already there stay as they are)."""
    return re.sub(r"(?<!\r)\n", "\r\n", text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _shown(name: str) -> str:
    """A file name as text for the model: bytes that are not UTF-8 as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- the tools ------------------------------------------------------------------------------
class Tools:
    """The three tools of an agent working in ``sandbox``.

    One persistent shell (``sandbox.shell()``) is opened at the first
    ``execute_bash`` and kept, so ``cd`` and exported variables persist; it is
    reopened if the sandbox was ``reset()``.  ``close()`` ends it.  The paths the
    tools name (in their descriptions and errors) are the sandbox's: ``paths``.
    """

    def __init__(
        self,
        sandbox: "Sandbox",
        *,
        bash_timeout: float = 120.0,
        max_output_chars: int = 20000,
        max_view_chars: int = 100_000,
        paths: Paths | None = None,
    ) -> None:
        for name, value in (
            ("bash_timeout", bash_timeout),
            ("max_output_chars", max_output_chars),
            ("max_view_chars", max_view_chars),
        ):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(name, f"must be a positive number, got {value!r}")
        self.sandbox = sandbox
        self.bash_timeout = float(bash_timeout)
        self.max_output_chars = int(max_output_chars)
        self.max_view_chars = int(max_view_chars)
        self._shell: Shell | None = None
        self._shell_generation = -1
        self._ashell: AsyncShell | None = None  # the same session, driven by an event loop (acall)
        self._paths = paths  # None: the sandbox's, in the default layout

    def __enter__(self) -> "Tools":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the shell session (the sandbox itself stays open)."""
        shell, self._shell = self._shell, None
        if shell is not None and not self.sandbox.closed:
            shell.close()

    @property
    def paths(self) -> Paths:
        """Where the agent's files are in the sandbox (the ``paths`` given, else ``Paths.of(sandbox)``)."""
        return self._paths if self._paths is not None else Paths.of(self.sandbox)

    # -- dispatch -----------------------------------------------------------------------
    def schemas(self) -> list[dict]:
        """The OpenAI ``tools`` list (``type: function``) for the three tools."""
        return tool_schemas(self.bash_timeout, self.paths)

    def call(self, name: str, arguments: dict | str | None = None) -> ToolResult:
        """Run the tool ``name``; ``arguments`` is a dict or its JSON text.

        Raises ``ToolError`` (for the model) for an unknown tool, bad
        arguments or a refused edit.
        """
        if name not in _SIGNATURES:
            raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(_SIGNATURES)}")
        args = _parse_arguments(name, arguments)
        if name == "execute_bash":
            return self.execute_bash(**args)
        if name == "str_replace_editor":
            return self.str_replace_editor(**args)
        return self.submit()

    # -- submit ---------------------------------------------------------------------------
    def submit(self) -> ToolResult:
        """The model is done; the loop decides what happens next."""
        return ToolResult(output="submitted", submitted=True, data={})

    def write_answer(self, text: str) -> ToolResult:
        """Write ``text`` (a newline added) to the answer file, replacing what is there: the
        small-model profile's plain reply taken as the answer (``Agent(plain_answers=True)``)."""
        size = self._write(self.paths.answer_file, text.rstrip("\n") + "\n")
        return ToolResult(output=f"The answer was written to {self.paths.answer_file} ({_plural(size, 'byte')})",
                          data={"path": self.paths.answer_file, "bytes": size})  # fmt: skip

    def answer_written(self) -> bool:
        """Whether the answer file exists and holds more than whitespace."""
        try:
            return bool(self.sandbox.read_file(self.paths.answer_file, length=4096).strip())
        except SandboxError:
            return False

    # -- execute_bash -----------------------------------------------------------------------
    def _get_shell(self) -> "Shell":
        sb = self.sandbox
        if self._shell is None or self._shell_generation != sb.generation:
            self._shell = sb.shell()
            self._shell_generation = sb.generation
        return self._shell

    def execute_bash(self, command: str, timeout: float | None = None) -> ToolResult:
        """Run ``command`` in the persistent shell and describe what it did."""
        timeout = self._bash_timeout(command, timeout)
        shell = self._get_shell()
        try:
            r = shell.run(command, timeout=timeout)
        except ConfigError as e:
            raise ToolError(f"execute_bash: {e.message}") from None
        return self._bash_result(r, shell, timeout)

    async def acall(self, name: str, arguments: dict | str | None = None) -> ToolResult:
        """``call`` for asyncio: execute_bash's command is driven by the running loop (no thread,
        ``AsyncShell``; the same session as ``call``'s); the editor's and submit's work (a file
        request or two to the executor, or nothing) is done inline."""
        if name != "execute_bash":
            return self.call(name, arguments)
        args = _parse_arguments(name, arguments)
        timeout = self._bash_timeout(args["command"], args.get("timeout"))
        loop = asyncio.get_running_loop()
        shell = self._get_shell()
        ashell = self._ashell
        if ashell is None or ashell.shell is not shell or ashell.loop is not loop:
            from ..jail.aio import AsyncSandbox, AsyncShell

            ashell = self._ashell = AsyncShell(shell, AsyncSandbox(self.sandbox, loop=loop))
        try:
            r = await ashell.run(args["command"], timeout=timeout)
        except ConfigError as e:
            raise ToolError(f"execute_bash: {e.message}") from None
        return self._bash_result(r, shell, timeout)

    def _bash_timeout(self, command: str, timeout: float | None) -> float:
        """execute_bash's checks on its arguments; the timeout to use."""
        if not command.strip():
            raise ToolError("execute_bash: command is empty; send the shell command to run")
        if "\0" in command:
            raise ToolError("execute_bash: command contains a NUL character; remove it")
        if timeout is None:
            return self.bash_timeout
        if timeout <= 0:
            raise ToolError(f"execute_bash: argument 'timeout' must be a positive number of seconds, got {timeout!r}")
        return timeout

    def _bash_result(self, r: ExecResult, shell: "Shell", timeout: float) -> ToolResult:
        text, clipped = self._format_bash(r, timeout)
        data = {
            "exit_code": r.exit_code,
            "timed_out": r.timed_out,
            "truncated": r.truncated or clipped,
            "duration_s": round(r.duration_s, 3),
            "cwd": readable(shell.cwd),  # the session may be in a directory whose name is not UTF-8
        }
        if r.note:
            data["note"] = readable(r.note)  # it names the cwd
        return ToolResult(output=text, data=data)

    def _format_bash(self, r: ExecResult, timeout: float) -> tuple[str, bool]:
        """stdout, [stderr] stderr, remarks, "[exit code: N]", the shell's note; and whether it was clipped."""
        stdout = r.stdout.decode("utf-8", "replace")
        stderr = r.stderr.decode("utf-8", "replace")
        if r.timed_out:  # bash's own report of the job it was told to kill is noise here
            stderr = _KILLED_REPORT.sub("", stderr)
        if stdout and stderr:
            body = _with_newline(stdout) + "[stderr]\n" + stderr
        else:
            body = stdout or stderr
        body, omitted = clip_middle(body, self.max_output_chars)
        text = _with_newline(body)
        if r.truncated:
            cap = self.sandbox.config.limits.output_bytes
            text += f"[the output was cut at the sandbox's limit of {cap} bytes per stream]\n"
        if r.timed_out:
            text += (
                f"[the command timed out after {timeout:g} s and was killed; output so far is shown]\n"
                "[run long jobs in the background (cmd > log 2>&1 &) and check on them, "
                "or pass a larger timeout]\n"
            )
        text += f"[exit code: {r.exit_code}]"
        if r.note:
            text += f"\n[{readable(r.note)}]"
        return text, omitted > 0

    # -- str_replace_editor ---------------------------------------------------------------------
    def str_replace_editor(
        self,
        command: str,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list | None = None,
    ) -> ToolResult:
        """View, create or edit a file (see the tool's description).

        Arguments a command does not use are ignored.  What it says (its output, its errors, the
        path it records) is ``readable``: a path may name bytes that are not UTF-8.
        """
        try:
            output = self._edit(command, path, file_text, old_str, new_str, insert_line, view_range)
        except ToolError as e:
            raise ToolError(readable(e.message), hint=e.hint) from None
        return ToolResult(output=readable(output), data={"command": command, "path": readable(path)})

    def _edit(self, command: str, path: str, file_text: str | None, old_str: str | None, new_str: str | None,
              insert_line: int | None, view_range: list | None) -> str:  # fmt: skip
        if command not in EDITOR_COMMANDS:
            raise ToolError(
                f"str_replace_editor: unknown command {command!r}; use one of: {', '.join(EDITOR_COMMANDS)}"
            )
        _check_path(path, self.paths.workdir)
        if command == "view":
            output = self._view(path, view_range)
        elif command == "create":
            if file_text is None:
                raise ToolError("str_replace_editor create: missing argument 'file_text' (the file's content)")
            output = self._create(path, file_text)
        elif command == "str_replace":
            if old_str is None:
                raise ToolError("str_replace_editor str_replace: missing argument 'old_str' (the text to replace)")
            output = self._str_replace(path, old_str, new_str or "")
        else:
            if insert_line is None:
                raise ToolError(
                    "str_replace_editor insert: missing argument 'insert_line' "
                    "(insert after this line; 0 = at the top)"
                )
            if new_str is None:
                raise ToolError("str_replace_editor insert: missing argument 'new_str' (the text to insert)")
            output = self._insert(path, insert_line, new_str)
        return output

    # file access, with errors the model can act on
    def _file_error(self, e: SandboxFileError, path: str) -> ToolError:
        return _file_tool_error(e, path, self.paths.workdir, self.paths.tmp_dir)

    def _read_text(self, path: str) -> str:
        """The file's text (strict UTF-8); ToolError for a missing, binary or huge file."""
        return _decode(path, self._read_bytes(path))

    def _read_bytes(self, path: str) -> bytes:
        try:
            return self.sandbox.read_file(path, max_bytes=MAX_EDIT_BYTES)
        except SandboxFileError as e:
            raise self._file_error(e, path) from None

    def _mode(self, path: str) -> int:
        """The permission bits of an existing file (so an edit keeps a script executable)."""
        r = self.sandbox.exec(["stat", "-L", "-c", "%a", path], timeout=30)
        try:
            return int(r.stdout.strip(), 8) if r.ok else 0o644
        except ValueError:
            return 0o644

    def _write(self, path: str, text: str, mode: int = 0o644) -> int:
        """Write ``text`` as UTF-8 with ``mode``; returns the number of bytes written."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ToolError(
                f"the text for {path} contains a character that cannot be written as UTF-8 "
                f"({text[e.start]!r}, a lone surrogate, at position {e.start}); remove it"
            ) from None
        try:
            self.sandbox.write_file(path, data, mode=mode, parents=True)
        except SandboxFileError as e:
            raise self._file_error(e, path) from None
        return len(data)

    # view
    def _view(self, path: str, view_range: list | None) -> str:
        """``cat -n`` of the file, or of the lines in view_range, clipped at max_view_chars.

        The file is read VIEW_CHUNK bytes at a time, in one pass (``_LineScan``) that checks it is
        UTF-8 text and counts its lines, keeping only what is shown: the host holds one chunk and
        the output, never the whole file nor a list of its lines.
        """
        try:
            chunk = self._read_part(path, 0)
        except IsADirectoryError:
            if view_range is not None:
                raise ToolError(f"{path} is a directory: view_range only applies to files") from None
            return self._list_directory(path)
        first, last = _view_bounds(view_range)
        scan = _LineScan(path, first, last, self.max_view_chars)
        offset = 0
        while chunk:
            scan.feed(chunk)
            offset += len(chunk)
            chunk = self._read_part(path, offset) if len(chunk) == VIEW_CHUNK else b""
        scan.finish()
        start, end, note = _check_view_range(view_range, scan.lines, path)
        header = f"Here is the result of running `cat -n` on {path}"
        if view_range is not None:
            header += f" (lines {start}-{end} of {scan.lines})"
        if scan.crlf > 0 and scan.crlf >= scan.newlines - scan.crlf:  # as _uses_crlf
            header += " (the file has CRLF line endings; the \\r are not shown)"
        header += ":\n"
        if not scan.lines:
            return header + "[the file is empty]"
        out = header + "".join(scan.shown)
        if scan.clipped_at is not None:
            out += (
                f"[output clipped at {self.max_view_chars} characters after line {scan.clipped_at} of {scan.lines}; "
                f"view the rest with view_range, e.g. [{scan.clipped_at + 1}, -1], or search it with "
                f"execute_bash (grep -n PATTERN {_quote(path)})]\n"
            )
        return out + note

    def _read_part(self, path: str, offset: int) -> bytes:
        """VIEW_CHUNK bytes of the file from ``offset`` (fewer at its end).  File errors become
        ToolError, but for IsADirectoryError at offset 0 (view lists a directory)."""
        try:
            return self.sandbox.read_file(path, max_bytes=MAX_EDIT_BYTES, offset=offset, length=VIEW_CHUNK)
        except SandboxFileError as e:
            if offset == 0 and isinstance(e, IsADirectoryError):
                raise
            raise self._file_error(e, path) from None

    def _list_directory(self, path: str) -> str:
        """Files and directories two levels deep, hidden ones (and what is inside them) left out.
        Listed by the sandbox's file API (no command runs: any image, even one without find);
        links are shown, never followed (as find does below its starting point)."""
        entries, problems = [], []
        base = path.rstrip("/") or "/"

        def listed(where: str) -> list:
            try:
                return self.sandbox.list(where)
            except SandboxFileError as e:
                problems.append(f"{where}: {e.strerror or e}")
                return []

        for top in listed(path):
            if top.name.startswith("."):
                continue
            name = f"{base.rstrip('/')}/{_shown(top.name)}"
            entries.append(name + ("/" if top.is_dir else ""))
            if top.is_dir:
                entries += [f"{name}/{_shown(sub.name)}" + ("/" if sub.is_dir else "")
                            for sub in listed(top.path) if not sub.name.startswith(".")]  # fmt: skip
        entries.sort()
        text = f"Here are the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
        text += path.rstrip("/") + "/\n"
        text += "".join(f"{e}\n" for e in entries) if entries else "[the directory is empty]\n"
        if problems:
            text += f"[some entries could not be listed: {'; '.join(problems)[:500]}]\n"
        clipped, omitted = clip_middle(text, self.max_output_chars)
        if omitted:
            clipped += f"\n[the listing is long; list a subdirectory, or use execute_bash (ls, find {_quote(path)})]\n"
        return clipped

    # create
    def _create(self, path: str, file_text: str) -> str:
        if self._exists(path):
            raise ToolError(f"file already exists at {path}; use str_replace or delete it first")
        size = self._write(path, file_text)
        return f"File created successfully at: {path} ({_plural(size, 'byte')})"

    def _exists(self, path: str) -> bool:
        try:
            self.sandbox.read_file(path, max_bytes=0)
        except FileNotFoundError:
            return False
        except SandboxFileError as e:
            if e.errno == errno.ENOTDIR:
                raise self._file_error(e, path) from None
            return True  # too big for max_bytes=0, a directory, unreadable...: something is there
        return True

    # str_replace
    def _str_replace(self, path: str, old_str: str, new_str: str) -> str:
        if not old_str:
            raise ToolError(
                "str_replace: old_str is empty; give the exact text to replace "
                "(to add text use the insert command, to write a whole new file use create)"
            )
        text = self._read_text(path)
        note = ""
        count = text.count(old_str)  # non-overlapping, as they would be replaced
        if not count and _uses_crlf(text) and "\n" in old_str:
            # the model wrote "\n" in a CRLF file: match (and write) with the file's line endings
            crlf_count = text.count(_to_crlf(old_str))
            if crlf_count:
                old_str, new_str, count = _to_crlf(old_str), _to_crlf(new_str), crlf_count
                note = "[old_str and new_str were given \\r\\n line endings, as the file uses them]\n"
        if not count:
            raise ToolError(
                f"str_replace: old_str did not occur in {path}, so nothing was replaced; it must match the file "
                "exactly, including whitespace and indentation (view the file to copy the exact text; "
                "leave out the line numbers that view adds)"
            )
        if count > 1:
            lines = ", ".join(map(str, _lines_of(text, _occurrences(text, old_str, MAX_LISTED_OCCURRENCES))))
            more = f" and {count - MAX_LISTED_OCCURRENCES} more" if count > MAX_LISTED_OCCURRENCES else ""
            raise ToolError(
                f"str_replace: old_str occurred {count} times in {path} (starting at lines {lines}{more}), "
                "so nothing was replaced; include more surrounding lines in old_str to make it unique"
            )
        if old_str == new_str:
            raise ToolError("str_replace: old_str and new_str are identical, so nothing would change")
        at = text.find(old_str)
        new_text = text[:at] + new_str + text[at + len(old_str) :]
        self._write(path, new_text, self._mode(path))
        first = _line_of(new_text, at)
        last = _line_of(new_text, at + len(new_str) - 1) if new_str else first
        return (
            f"The file {path} has been edited. "
            + self._snippet(new_text, first, last)
            + note
            + "Review the changes and make sure they are as expected; edit the file again if necessary."
        )

    def _snippet(self, text: str, first: int, last: int) -> str:
        """Numbered lines first..last of ``text``, with a few lines of context each side (only those
        lines are cut out of the text)."""
        n_lines = _count_lines(text)
        lo = max(1, first - SNIPPET_CONTEXT_LINES)
        hi = min(n_lines, last + SNIPPET_CONTEXT_LINES)
        if not n_lines:
            return "The file is now empty.\n"
        start = _line_start(text, lo)
        end = _skip_lines(text, start, hi - lo + 1)[0]
        body, omitted = clip_middle(_number_lines(_split_lines(text[start:end]), lo), self.max_output_chars)
        return f"Here is a snippet of the edited region (lines {lo}-{hi}, `cat -n` style):\n{body}"

    # insert
    def _insert(self, path: str, insert_line: int, new_str: str) -> str:
        """Insert ``new_str`` as whole lines after line ``insert_line``.

        Newline style: in a file that mostly uses CRLF, the bare "\\n" of
        ``new_str`` become "\\r\\n".  A line ending is added to ``new_str`` when
        it has none, except when inserting after the last line of a file that
        has no final newline: then the file's last line gets a line ending and
        ``new_str`` goes in as given (so "c" keeps the file without a final
        newline, "c\\n" gives it one).
        """
        text = self._read_text(path)
        n_lines = _count_lines(text)
        if not 0 <= insert_line <= n_lines:
            raise ToolError(
                f"insert: insert_line {insert_line} is out of range: {path} has {_plural(n_lines, 'line')}, "
                f"so insert_line must be between 0 (at the top) and {n_lines} (at the end)"
            )
        crlf = _uses_crlf(text)
        eol = "\r\n" if crlf else "\n"
        block = _to_crlf(new_str) if crlf else new_str
        if insert_line == n_lines and text and not text.endswith("\n"):
            new_text = text + eol + block
        else:
            if not block.endswith("\n"):
                block += eol
            at = _line_start(text, insert_line + 1)
            new_text = text[:at] + block + text[at:]
        self._write(path, new_text, self._mode(path))
        first = insert_line + 1
        last = insert_line + max(1, _count_lines(block))
        return (
            f"The file {path} has been edited: the text was inserted after line {insert_line}. "
            + self._snippet(new_text, first, last)
            + "Review the changes and make sure they are as expected (correct indentation, no duplicate lines); "
            "edit the file again if necessary."
        )


# -- module helpers ------------------------------------------------------------------------------
def _decode(path: str, data: bytes) -> str:
    """Strict UTF-8 text; ToolError (pointing at execute_bash) for binary content."""
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise _binary_error(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8_error(path, e.start) from None


def _binary_error(path: str) -> ToolError:
    return ToolError(f"{path} looks like a binary file (it contains NUL bytes); {_bash_hint(path)}")


def _not_utf8_error(path: str, offset: int) -> ToolError:
    return ToolError(
        f"{path} is not valid UTF-8 text (invalid byte at offset {offset}), so the editor cannot "
        f"show or edit it; {_bash_hint(path)}"
    )


class _LineScan:
    """One pass over a file's bytes, fed a chunk at a time, for ``view``: checks that it is text as
    ``_decode`` does, counts its lines (as ``_split_lines`` cuts them) and line endings, and keeps
    the numbered lines from ``first`` to ``last`` (None: to the end) that fit in ``budget``
    characters, clipping as ``cat -n`` output is clipped (a line too long for the budget alone
    shows its beginning).  It holds the lines it keeps and one chunk, never the file."""

    def __init__(self, path: str, first: int, last: int | None, budget: int) -> None:
        self.path, self.first, self.last, self.budget = path, first, last, budget
        self.newlines = 0  # "\n" seen
        self.crlf = 0  # "\r\n" seen
        self.shown: list[str] = []  # the numbered lines kept
        self.clipped_at: int | None = None  # the last line shown when the budget ran out
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._offset = 0  # bytes fed
        self._size = 0  # characters in shown
        self._line = 1  # the line the scan is in
        self._part: list[str] = []  # what is kept of that line: at most budget + 2 characters
        self._part_len = 0
        self._cr = False  # the text so far ends with "\r"
        self._open_line = False  # ... with a line that has no "\n" yet
        self._full = last is not None and last < first  # nothing (more) to keep: budget used up, past last

    @property
    def lines(self) -> int:
        return self.newlines + self._open_line

    def feed(self, data: bytes) -> None:
        if self._offset < BINARY_SNIFF_BYTES and b"\0" in data[: BINARY_SNIFF_BYTES - self._offset]:
            raise _binary_error(self.path)
        self._text(self._decode(data, final=False))
        self._offset += len(data)

    def finish(self) -> None:
        """The end of the file: the last line may have no "\\n"."""
        self._text(self._decode(b"", final=True))
        if self._open_line and not self._full and self._line >= self.first:
            self._end_line()

    def _decode(self, data: bytes, final: bool) -> str:
        pending = len(self._decoder.getstate()[0])  # bytes of a character cut by the last chunk
        try:
            return self._decoder.decode(data, final)
        except UnicodeDecodeError as e:
            raise _not_utf8_error(self.path, self._offset - pending + e.start) from None

    def _text(self, text: str) -> None:
        if not text:
            return
        self.newlines += text.count("\n")
        self.crlf += text.count("\r\n") + (self._cr and text[0] == "\n")
        self._cr, self._open_line = text[-1] == "\r", text[-1] != "\n"
        pos = 0
        if not self._full and self._line < self.first:
            pos, passed = _skip_lines(text, 0, self.first - self._line)
            self._line += passed
        while not self._full and self._line >= self.first:
            nl = text.find("\n", pos)
            self._keep(text, pos, len(text) if nl < 0 else nl + 1)
            if nl < 0:
                return
            self._end_line()
            pos = nl + 1

    def _keep(self, text: str, start: int, end: int) -> None:
        room = self.budget + 2 - self._part_len  # longer than that, the line is clipped anyway
        if room > 0 and end > start:
            piece = text[start : min(end, start + room)]
            self._part.append(piece)
            self._part_len += len(piece)

    def _end_line(self) -> None:
        n = self._line
        numbered = _number_lines(["".join(self._part)], n)
        self._part, self._part_len, self._line = [], 0, n + 1
        if self._size + len(numbered) > self.budget:
            if not self.shown:  # one enormous line: show its beginning
                self.shown.append(numbered[: self.budget] + "\n")
                self.clipped_at = n
            else:
                self.clipped_at = n - 1
            self._full = True
            return
        self.shown.append(numbered)
        self._size += len(numbered)
        if self.last is not None and self._line > self.last:
            self._full = True


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _quote(path: str) -> str:
    return path if re.fullmatch(r"[\w./@%+=:,-]+", path) else "'" + path.replace("'", "'\\''") + "'"


def _bash_hint(path: str) -> str:
    return USE_BASH_FOR_BINARY.replace("PATH", _quote(path))


def _check_path(path: str, workdir: str) -> None:
    if not path.startswith("/"):
        raise ToolError(f"path must be absolute, e.g. {workdir.rstrip('/')}/..., got {path!r}")
    if "\0" in path:
        raise ToolError("path contains a NUL character; remove it")
    try:
        path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise ToolError(f"path is not valid text (a lone surrogate at position {e.start}); remove it") from None


def _occurrences(text: str, needle: str, limit: int) -> list[int]:
    """Start offsets of the first ``limit`` non-overlapping occurrences of ``needle``."""
    starts: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(starts) < limit:
        starts.append(at)
        at = text.find(needle, at + len(needle))
    return starts


def _lines_of(text: str, offsets: list[int]) -> list[int]:
    """1-based line numbers of ascending character offsets (the text is counted through once)."""
    lines, line, prev = [], 1, 0
    for at in offsets:
        line += text.count("\n", prev, at)
        lines.append(line)
        prev = at
    return lines


def _view_bounds(view_range: list | None) -> tuple[int, int | None]:
    """The lines to keep while scanning: (first, last, None for the end of the file).  A view_range
    that makes no sense keeps none: ``_check_view_range`` says what is wrong once the file is read
    (so a binary file is still reported as such first)."""
    if view_range is None:
        return 1, None
    if len(view_range) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in view_range):
        return 1, 0
    start, end = view_range
    return max(1, start), None if end == -1 else end


def _check_view_range(view_range: list | None, n_lines: int, path: str) -> tuple[int, int, str]:
    """(start, end, note) for a view_range, 1-based and inclusive; ToolError if it makes no sense."""
    if view_range is None:
        return 1, n_lines, ""
    if len(view_range) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in view_range):
        raise ToolError(f"view_range must be two integers [start, end], got {json.dumps(view_range)}")
    start, end = view_range
    if n_lines == 0:
        raise ToolError(f"{path} is empty: view it without view_range")
    if not 1 <= start <= n_lines:
        raise ToolError(
            f"view_range start {start} is out of range: {path} has {_plural(n_lines, 'line')}, "
            f"so start must be between 1 and {n_lines}"
        )
    if end == -1:
        return start, n_lines, ""
    if end < start:
        raise ToolError(
            f"view_range end {end} is before start {start}; use an end >= start, or -1 to view to the end of the file"
        )
    if end > n_lines:
        return start, n_lines, f"[view_range end {end} is past the end of the file: shown up to line {n_lines}]\n"
    return start, end, ""


def _file_tool_error(e: SandboxFileError, path: str, workdir: str, tmp_dir: str = "/tmp") -> ToolError:
    """A file error as a message that says what to do next (``workdir``: the sandbox's)."""
    if isinstance(e, FileNotFoundError):
        return ToolError(
            f"{path} does not exist; check the path (str_replace_editor view on its directory, or execute_bash ls), "
            "or make a new file with the create command"
        )
    if isinstance(e, IsADirectoryError):
        return ToolError(f"{path} is a directory, not a file; give the path of a file inside it")
    if isinstance(e, NotADirectoryError):
        return ToolError(f"a component of {path} is a file, not a directory; check the path")
    if isinstance(e, PermissionError):
        return ToolError(f"permission denied for {path}; use a path under {workdir} or {tmp_dir}")
    if e.errno == errno.EFBIG:
        return ToolError(
            f"{path} is too large for the editor (over {MAX_EDIT_BYTES >> 20} MiB); "
            "use execute_bash (head, sed -n, grep -n, python) to read or change it"
        )
    if e.errno == errno.EINVAL:
        return ToolError(f"{path} is not a regular file; {_bash_hint(path)}")
    return ToolError(f"{path}: {e.message}")


# -- schemas --------------------------------------------------------------------------------------------
def tool_schemas(bash_timeout: float = 120.0, paths: Paths = DEFAULT_PATHS) -> list[dict]:
    """The OpenAI function-calling schemas of the three tools, naming ``paths`` (the sandbox's:
    ``Paths.of(sandbox)``; by default ``/testbed``'s)."""
    return [
        _function(
            "execute_bash",
            f"Run a bash command on the Linux computer (the sandbox) and see its output. The shell is "
            f"persistent: it starts in {paths.workdir}, and `cd`, exported variables and functions carry over to "
            f"the next call. The task's input files are in {paths.input_dir}; write what you produce to "
            f"{paths.output_dir}. You see stdout, then stderr (after a [stderr] line), then the exit code; very long "
            f"output keeps only its beginning and end, so redirect it to a file and grep it. A command is "
            f"killed after `timeout` seconds (default {bash_timeout:g}): run long jobs in the background "
            f"(`cmd > log 2>&1 &`) and check on them. Commands get no input (stdin is empty): pass flags such "
            f"as -y instead of waiting for prompts.",
            {
                "command": {"type": "string", "description": "The bash command(s) to run."},
                "timeout": {
                    "type": "number",
                    "description": f"Seconds before the command is killed (default {bash_timeout:g}).",
                },
            },
            ["command"],
        ),
        _function(
            "str_replace_editor",
            "View, create and edit files on the computer. Paths must be absolute (e.g. "
            f"{paths.workdir}/script.py).\n"
            "* view: show a file with line numbers (like `cat -n`), optionally only the lines in "
            "view_range=[start, end] (1-based; end -1 means to the end of the file); for a directory, list "
            "its files and subdirectories two levels deep (hidden ones left out).\n"
            "* create: write file_text to a new file (parent directories are created). It refuses an "
            "existing file: change that with str_replace.\n"
            "* str_replace: replace old_str with new_str in the file. old_str must match exactly one place in "
            "the file, character for character (whitespace and indentation included; leave out the line "
            "numbers that view shows): include enough surrounding lines to make it unique. An empty new_str "
            "deletes old_str.\n"
            "* insert: insert new_str as new lines after line insert_line (0 inserts at the top of the file).\n"
            f"To give your final answer, write it to {paths.answer_file} yourself (e.g. with create), then call "
            "submit.",
            {
                "command": {
                    "type": "string",
                    "enum": list(EDITOR_COMMANDS),
                    "description": "The operation: view, create, str_replace or insert.",
                },
                "path": {
                    "type": "string",
                    "description": f"Absolute path of the file or directory, e.g. {paths.workdir}/a.py.",
                },
                "file_text": {"type": "string", "description": "create: the content of the new file."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace (one match)."},
                "new_str": {
                    "type": "string",
                    "description": "str_replace: the replacement text (empty to delete); insert: the text to insert.",
                },
                "insert_line": {
                    "type": "integer",
                    "description": "insert: new_str goes after this line (0 = at the top of the file).",
                },
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "view (files only): [start, end] lines to show, 1-based; end -1 = to the end.",
                },
            },
            ["command", "path"],
        ),
        _function(
            "submit",
            f"Finish the task. Before calling it, write your final answer to {paths.answer_file} yourself with the "
            "other tools (submit takes no arguments and does not write anything). After submit you cannot "
            "act any more: check your output files first.",
            {},
            [],
        ),
    ]


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }
