"""The ``sandboxlite`` command line.  It only parses and maps errors to exit codes.

May import: anything: it is the top.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import sys
from pathlib import Path

import click

from . import __version__
from .config import Limits, Mount, SandboxConfig
from .errors import ConfigError, RootfsError, SandboxError, TaskError

# Exit codes of our own (a command's own exit code passes through unchanged).
EXIT_USAGE = 2  # bad arguments or config
EXIT_SANDBOX = 125  # sandboxlite itself failed (like `docker run`)


def _fail(e: SandboxError) -> None:
    """The message, then the exit code: 2 bad input (ConfigError, TaskError; a bad endpoint setting
    too, though it is also a ModelError), 3 the model endpoint failed, 125 anything else."""
    from .errors import ModelError

    click.echo(f"sandboxlite: {e}", err=True)
    if isinstance(e, (ConfigError, TaskError)):
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_MODEL if isinstance(e, ModelError) else EXIT_SANDBOX)


def _errors_to_exit_codes(fn):
    """A command whose SandboxErrors become a message and an exit code (see _fail)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SandboxError as e:
            _fail(e)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sandboxlite")
def main() -> None:
    """Millisecond sandboxes for LLM agents (bubblewrap + seccomp)."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the machine and every check (for scripts).")
@click.option("--image", default=None, help="Check what this image offers the agent's tools (shell, editor, python).")
def doctor(as_json: bool, image: str | None) -> None:
    """Check that this host can run sandboxes, and say how to fix what is missing (exit 1 on a failure)."""
    import dataclasses
    import json

    from .doctor import header, image_checks, run_checks

    checks = run_checks() if image is None else image_checks(image)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        click.echo(json.dumps({"host": header(), "ok": not failed, "checks": [dataclasses.asdict(c) for c in checks]},
                              indent=1))  # fmt: skip
        sys.exit(1 if failed else 0)
    click.echo(header())
    marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
    for c in checks:
        click.echo(f"[{marks[c.status]}] {c.name}: {c.detail}")
        if c.hint and c.status != "ok":
            click.echo(f"       Hint: {c.hint}")
    sys.exit(1 if failed else 0)


@main.command(name="container-profile")
@click.argument("runtime", type=click.Choice(["docker", "podman"]), default="docker")
def container_profile(runtime: str) -> None:
    """Print a seccomp profile (JSON) for the container sandboxlite runs in: the runtime's default
    refusals, except the namespace and mount calls a jail is built with.

    docker run --security-opt seccomp=<(sandboxlite container-profile) --security-opt systempaths=unconfined ...
    """
    import json

    from .isolation.container_profile import profile

    click.echo(json.dumps(profile(runtime), indent=1))


def isolation_option(f):
    """``--isolation``: namespaces (the default) or landlock (no namespaces: SECURITY.md)."""
    return click.option("--isolation", type=click.Choice(["auto", "namespaces", "landlock"]), default="auto",
                        show_default=True, help="auto: $SANDBOXLITE_ISOLATION, else namespaces; landlock needs "
                        "none (for locked-down containers; weaker, see SECURITY.md).")(f)  # fmt: skip


class NetworkMode(click.ParamType):
    """``none``, ``host`` or ``allow:RULE,...`` (checked here: an unknown preset is a usage error)."""

    name = "none|host|allow:RULES"

    def convert(self, value, param, ctx):
        from .config import check_network

        try:
            check_network(value, f"--{param.name}" if param is not None else "network")
        except ConfigError as e:
            self.fail(e.message.split(": ", 1)[-1] + (f" ({e.hint})" if e.hint else ""), param, ctx)
        return value


NETWORK_HELP = ("none (only loopback), host (the host's network, its loopback services included) or "
                "allow:RULE,... (only these hosts, through the egress proxy: names, *.domain, presets pypi and debian)")


def _use_isolation(isolation: str) -> None:
    """``run`` and ``eval`` start their sandboxes deep inside: the process's default says it."""
    if isolation != "auto":
        os.environ["SANDBOXLITE_ISOLATION"] = isolation


@main.command(name="paper", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def paper(args) -> None:
    """Run the paper's own CLI (llm-in-sandbox ARGS) with its runtime on sandboxlite.

    Example: sandboxlite paper -- run --query 'What is 6*7?' --llm_name NAME --llm_base_url URL
    (needs the [paper] extra: llm-in-sandbox 0.2.0)
    """
    from .compat import llm_in_sandbox as compat

    try:
        code = compat.main(list(args))
    except SandboxError as e:
        _fail(e)
        return
    sys.exit(code)


@main.command(name="exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--rootfs", default="auto", show_default=True, help='"auto", "host", an image name or a directory.')
@click.option("--image", default=None, help="A container image in the store (sandboxlite image list) as the root.")
@click.option("--mount", "mounts", multiple=True, metavar="SRC:DST[:ro|rw]", help="Show a host path inside (repeatable).")
@click.option("--timeout", type=float, default=None, help="Seconds before the command is killed (exit code 124).")
@click.option("--network", type=NetworkMode(), default="none", show_default=True, help=NETWORK_HELP)
@click.option("--network-log", type=click.Path(dir_okay=False, allow_dash=True), default=None, metavar="FILE",
              help="With allow:..., write the egress requests there (JSON lines; - prints them to stderr).")
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="Set an environment variable (repeatable).")
@click.option("--workdir", default="/testbed", show_default=True)
@click.option("--memory-mb", type=int, default=None, help="Memory limit in MiB.")
@isolation_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_(rootfs, image, mounts, timeout, network, network_log, envs, workdir, memory_mb, isolation, command) -> None:
    """Run COMMAND in a fresh sandbox and pass its exit code through (with --image and no COMMAND:
    the image's own Entrypoint and Cmd).

    Example: sandboxlite exec -- python3 -c 'print(6*7)'
    """
    from .jail import attach
    from .jail.sandbox import Sandbox

    try:
        env = {}
        for item in envs:
            if "=" not in item:
                raise ConfigError("--env", f"expected KEY=VALUE, got {item!r}")
            k, v = item.split("=", 1)
            env[k] = v
        limits = Limits(**({"memory_mb": memory_mb} if memory_mb else {}))
        if timeout is not None:
            limits = dataclasses.replace(limits, timeout_s=timeout)
        command = command or _image_command(image)
        config = SandboxConfig(
            rootfs=_image_root(image, rootfs),
            mounts=tuple(Mount.parse(m) for m in mounts),
            network=network,
            env=env,
            workdir=workdir,
            limits=limits,
            isolation=isolation,
        )
        # stdin passes through when it is not a terminal (a pipe or a file: `echo 2+2 | ... bc`)
        stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer
        old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            with Sandbox(config) as sb:
                proc = sb.spawn(list(command), stdin=stdin is not None, timeout=config.limits.timeout_s, lossless=True)
                result = attach.pipe_through(proc, stdin=stdin, stdout=sys.stdout.buffer, stderr=sys.stderr.buffer)
                dropped = proc.stdout.dropped + proc.stderr.dropped
            requests = sb.network_log()
        finally:
            signal.signal(signal.SIGTERM, old_sigterm)
    except SandboxError as e:
        _fail(e)
        return
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the command's tree was killed with the sandbox
        what, code = ("SIGTERM", EXIT_SIGTERM) if isinstance(e, _Terminated) else ("Ctrl-C", EXIT_SIGINT)
        click.echo(f"\nsandboxlite: interrupted ({what})", err=True)
        sys.exit(code)
    if network_log == "-":
        for r in requests:
            click.echo(f"sandboxlite: egress: {r.line()}", err=True)
    elif network_log is not None:
        with open(network_log, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r.as_dict()) + "\n" for r in requests)
    if dropped and result.signal != signal.SIGPIPE:  # (our stdout could not keep up: it is read as it comes)
        click.echo(f"sandboxlite: {dropped} bytes of output were dropped (not read in time)", err=True)
    if result.timed_out:
        click.echo(f"sandboxlite: timed out after {result.duration_s:.1f}s", err=True)
    sys.exit(result.exit_code)


@main.command(name="shell")
@click.option("--rootfs", default="auto", show_default=True, help='"auto", "host", an image name or a directory.')
@click.option("--image", default=None, help="A container image in the store (sandboxlite image list) as the root.")
@click.option("--mount", "mounts", multiple=True, metavar="SRC:DST[:ro|rw]", help="Show a host path inside (repeatable).")
@click.option("--network", type=NetworkMode(), default="none", show_default=True, help=NETWORK_HELP)
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="Set an environment variable (repeatable).")
@click.option("--workdir", default="/testbed", show_default=True)
@click.option("--memory-mb", type=int, default=None, help="Memory limit in MiB.")
@isolation_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@_errors_to_exit_codes
def shell_(rootfs, image, mounts, network, envs, workdir, memory_mb, isolation, command) -> None:
    """An interactive shell (bash, else sh) in a fresh sandbox, on a terminal of its own: Ctrl-C,
    Ctrl-Z and job control work; its exit status is ours.  Everything is gone when it exits.
    COMMAND (after --): run that on the terminal instead (e.g. -- python3)."""
    from .jail import attach
    from .jail.sandbox import Sandbox

    env = {"TERM": os.environ.get("TERM", "xterm-256color")}
    for item in envs:
        if "=" not in item:
            raise ConfigError("--env", f"expected KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        env[k] = v
    config = SandboxConfig(rootfs=_image_root(image, rootfs), mounts=tuple(Mount.parse(m) for m in mounts),
                           network=network, workdir=workdir, isolation=isolation,
                           limits=Limits(**({"memory_mb": memory_mb} if memory_mb else {})))  # fmt: skip
    try:  # the terminal's own size (not $COLUMNS/$LINES, which may be stale)
        size = os.get_terminal_size(sys.stdin.fileno())
    except (OSError, ValueError):
        size = os.terminal_size((80, 24))
    with Sandbox(config) as sb:
        argv = list(command) or (["/bin/bash", "-i"] if sb.is_file("/bin/bash") else ["/bin/sh", "-i"])
        proc = sb.spawn(argv, env=env, pty=(size.lines, size.columns), lossless=True)
        result = attach.terminal(proc)
    sys.exit(result.exit_code)


RUN_LOCAL_MAX_TOKENS = 512  # `run` with an in-process model: a reply's default budget
EXIT_NOT_SUBMITTED = 1  # the run ended without the model calling submit
EXIT_MODEL = 3  # the model endpoint failed
EXIT_SIGINT = 130  # 128 + SIGINT: Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM


def _json_object(ctx, param, value):
    """``--extra-body``: a JSON object or nothing."""
    if value is None:
        return None
    try:
        data = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f'expected a JSON object such as \'{{"top_k": 20}}\', got {type(data).__name__}')
    return data


def _image_root(image: str | None, rootfs: str | None) -> str | None:
    """``--image REF``: the root it names (a container image in the store, checked), else ``rootfs``;
    both given is bad input unless they agree."""
    if image is None:
        return rootfs
    from .images import store

    if rootfs not in (None, "auto", image):
        raise ConfigError("--image", f"{image!r} and --rootfs {rootfs!r} both name the root", hint="give one of them")
    try:
        store.find_image(image)
    except RootfsError as e:
        raise ConfigError("--image", e.message, hint=e.hint) from None
    return image


def _image_command(image: str | None) -> tuple[str, ...]:
    """``exec --image REF`` without a command: the image's Entrypoint + Cmd (as docker run does)."""
    if image is None:
        raise click.UsageError("give the COMMAND to run (after --)")
    from .images import store

    try:
        config = store.find_image(image).manifest["oci"].get("config") or {}
    except RootfsError as e:
        raise ConfigError("--image", e.message, hint=e.hint) from None
    argv = tuple(config.get("entrypoint") or ()) + tuple(config.get("cmd") or ())
    if not argv:
        raise click.UsageError(f"the image {image} names no command (no Entrypoint or Cmd): give the COMMAND")
    return argv


def _check_rootfs(spec: str, field: str) -> None:
    """An image name or directory that does not exist is bad input: say which exist, and a command that works."""
    from .images import images_dir, resolve, where
    from .images.build import profile_names

    if spec in ("auto", "host") or where.find(spec) is not None:  # (a container image the store names)
        return
    if "/" in spec:
        if not os.path.isdir(spec):
            raise ConfigError(field, f"rootfs directory {os.path.abspath(spec)} does not exist",
                              hint='give a folder holding a root filesystem, an image name, "auto" or "host"')  # fmt: skip
        return
    if (images_dir() / spec).exists():
        resolve(spec)  # there but broken (incomplete, corrupt): its RootfsError says how to repair it
        return
    try:
        built = sorted(d.name for d in images_dir().iterdir() if (d / "manifest.json").is_file())
    except OSError:
        built = []
    profiles = profile_names()
    have = f"built here: {', '.join(built)}" if built else "none is built here"
    build = spec if spec in profiles else "lean"
    raise ConfigError(field, f"no rootfs image named {spec!r} ({have}; the profiles to build: {', '.join(profiles)})",
                      hint=f"sandboxlite rootfs build {build}   (or use \"auto\", \"host\", a folder, or import an "
                      "image: sandboxlite rootfs import FILE, a container image: sandboxlite image import FILE)")  # fmt: skip


def _prepare_output_dir(path: Path, overwrite: bool) -> None:
    """A fresh or empty folder is used; a non-empty one is refused unless ``overwrite``, which empties
    it first: what is in it only, never a symlink's target (a link in it is removed, not followed)."""
    import shutil
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # run_task makes it
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError("--output-dir", f"{path} is a symlink",
                          hint=f"give the folder itself ({os.path.realpath(path)}) or another one")  # fmt: skip
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError("--output-dir", f"{path} exists and is not a folder", hint="choose another folder")
    entries = list(os.scandir(path))
    if not entries:
        return
    if not overwrite:
        names = ", ".join(sorted(e.name for e in entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise ConfigError("--output-dir", f"{path} is not empty ({names}): an earlier run's answer.txt and files/ "
                          "would mix with this run's",
                          hint="pass --overwrite to empty it first, or choose another folder")  # fmt: skip
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path)  # does not follow the symlinks inside (rmtree.avoids_symlink_attacks)
        else:
            os.unlink(e.path)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is: ``run_task``'s cleanup (trajectory, outputs) sees it as it
    sees Ctrl-C (a KeyboardInterrupt, so nothing that handles Exception swallows it)."""


def _on_sigterm(signum, frame):
    raise _Terminated()


@main.command()
@click.argument("task_file", metavar="[TASK.json | -]", required=False,
                type=click.Path(dir_okay=False, allow_dash=True))  # fmt: skip
@click.option("--query", default=None, metavar="TEXT",
              help='A one-off task instead of TASK.json: this query, id "query", the defaults of task.json.')  # fmt: skip
@click.option("--model", "model_name", default=None,
              help="auto (the default: the strongest model found here, said on screen; `sandboxlite models` lists "
              "them), local (the embedded model), local:/path/model.gguf (any GGUF file), ollama:NAME, "
              "server:URL[#MODEL], scripted (a no-LLM dry run: looks around, writes an answer, submits), or NAME: "
              "a model on an OpenAI-compatible endpoint (--base-url or $OPENAI_BASE_URL).")  # fmt: skip
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL).")
@click.option("--api-key", default=None, help="API key (default: $OPENAI_API_KEY).")
@click.option("--temperature", type=click.FloatRange(min=0), default=None)
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help=f"Cap on the tokens of each model reply (default: {RUN_LOCAL_MAX_TOKENS} for local models, whose "
              "small ones can ramble to the end of the context; the endpoint's own for servers).")  # fmt: skip
@click.option("--token-budget", type=click.IntRange(min=1), default=None,
              help="Cap on all tokens of the run (prompt + completion).")  # fmt: skip
@click.option("--extra-body", default=None, metavar="JSON", callback=_json_object,
              help="Extra request fields, a JSON object, e.g. '{\"top_k\": 20}'.")  # fmt: skip
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Override the task's max_steps.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Wall time of the whole run (overrides the task's timeout_s; default 1800).")  # fmt: skip
@click.option("--input-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="A host folder copied to the task's input_path (replaces the task's input_files / input_dir).")  # fmt: skip
@click.option("--network", type=NetworkMode(), default=None,
              help="Override the task's network (default none): " + NETWORK_HELP + ".")  # fmt: skip
@click.option("--rootfs", default=None,
              help='Override the task\'s rootfs: "auto" (the default), "host", an image name or a directory.')  # fmt: skip
@click.option("--image", default=None, help="Override the task's root with a container image in the store.")
@click.option("--constrained", type=click.Choice(["retry", "always", "never"]), default=None,
              help="local models: grammar-constrained replies (default: the small profile always, its block-or-answer "
              "grammar; the standard profile retries a turn that did not parse under its JSON-call grammar).")
@click.option("--profile", type=click.Choice(["auto", "small", "standard"]), default=None,
              help="local models: the prompt profile: small (a short prompt, commands in ```bash blocks, the "
              "answer as a plain reply), standard (tools as JSON calls), auto (small below 1B parameters: "
              "the default).")  # fmt: skip
@click.option("--tool-format", type=click.Choice(["native", "text", "auto"]), default=None,
              help="Servers: tool calls through the API's tools parameter (native, the default), written as text "
              "in the reply (text: servers without a tool-call parser), or native until the server refuses "
              "tools, then text (auto).")
@click.option("--context-tokens", type=click.IntRange(min=256), default=None,
              help="Servers: the model's context size; tool outputs are clipped so the next request fits it.")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None,
              help="Default: ./output/<timestamp>-<task id>/ (a folder that is not empty is refused).")  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Empty a non-empty --output-dir first (only that folder).")
@click.option("--prompt", "prompt_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A prompt template file ([system] and [instance] sections).")  # fmt: skip
@click.option("--mode", type=click.Choice(["sandbox", "vanilla"]), default="sandbox", show_default=True)
@click.option("--quiet", is_flag=True, help="No step-by-step view.")
@isolation_option
def run(task_file, query, model_name, base_url, api_key, temperature, max_tokens, token_budget, extra_body, max_steps,
        timeout_s, input_dir, network, rootfs, image, constrained, profile, tool_format, context_tokens, output_dir,
        overwrite, prompt_file, mode, quiet, isolation) -> None:  # fmt: skip
    """Let a model solve TASK.json (or a --query; "-" reads the task from stdin) inside a fresh sandbox;
    outputs land in --output-dir.

    Exit codes: 0 submitted (vanilla: answered); 1 the run ended without a submit (a limit); 2 bad
    input (arguments, task, model name, rootfs, output folder); 3 the model endpoint failed; 125
    sandboxlite itself failed; 130 Ctrl-C; 143 SIGTERM (both keep the trajectory and the outputs).
    """
    from .agent.loop import AgentLimits
    from .agent.outcome import ExitReason
    from .agent.profiles import in_process_local, resolve_model
    from .agent.run import default_output_dir, run_task
    from .agent.task import Task

    _use_isolation(isolation)
    old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    out = None
    try:
        if (task_file is None) == (query is None):
            raise click.UsageError("give a task file (TASK.json, or - for stdin) or --query TEXT" +
                                   (", not both" if query is not None else ""))  # fmt: skip
        task = Task.load(task_file) if task_file is not None else Task.one_off(query)
        rootfs = _image_root(image, rootfs)
        changes = {k: v for k, v in (("network", network), ("rootfs", rootfs), ("timeout_s", timeout_s),
                                     ("prompt", prompt_file)) if v is not None}  # fmt: skip
        if input_dir is not None:
            changes.update(input_dir=os.path.abspath(input_dir), input_files={})
        task = dataclasses.replace(task, **changes)
        if mode == "sandbox":
            _check_rootfs(task.rootfs, "--rootfs" if rootfs is not None else "rootfs (in the task)")
        limits = AgentLimits(max_steps=max_steps if max_steps is not None else task.max_steps,
                             max_wall_s=task.timeout_s, max_total_tokens=token_budget)  # fmt: skip
        out = Path(output_dir) if output_dir is not None else default_output_dir(task)
        _prepare_output_dir(out, overwrite)
        name, base_url = _short_model(model_name or task.model or "auto", base_url)
        if max_tokens is None and in_process_local(name, base_url):
            max_tokens = RUN_LOCAL_MAX_TOKENS
        model = resolve_model(name, base_url=base_url, api_key=api_key,
                              temperature=temperature, max_tokens=max_tokens, extra_body=extra_body,
                              constrained=constrained, tool_format=tool_format,
                              context_tokens=context_tokens, profile=profile)  # fmt: skip
        if hasattr(model, "preflight"):  # a bad URL, key or model name fails here, before the sandbox starts
            model.preflight()
        on_step = None if quiet else _print_step
        result = run_task(task, model, output_dir=out, mode=mode, limits=limits, on_step=on_step)
    except SandboxError as e:  # ModelError included: exit code 3
        _fail(e)
        return
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (_Terminated): what there is was kept
        what, code = ("SIGTERM", EXIT_SIGTERM) if isinstance(e, _Terminated) else ("Ctrl-C", EXIT_SIGINT)
        kept = f"; the trajectory and outputs so far are in {out}/" if out is not None and out.is_dir() else ""
        click.echo(f"\nsandboxlite: interrupted ({what}){kept}", err=True)
        sys.exit(code)
    finally:
        signal.signal(signal.SIGTERM, old_sigterm)
    answer = (result.answer or "").strip()
    click.echo(f"{result.exit_reason}: {result.steps} steps, {result.duration_s:.1f}s, "
               f"{result.usage.get('total_tokens', 0)} tokens -> {result.output_dir}", err=True)  # fmt: skip
    if answer:
        click.echo(answer)
    if not result.ok:
        click.echo(f"sandboxlite: the run ended without an answer: {result.exit_reason}", err=True)
        sys.exit(EXIT_MODEL if result.reason is ExitReason.MODEL_ERROR else EXIT_NOT_SUBMITTED)


def _short_model(name: str, base_url: str | None) -> tuple[str, str | None]:
    """``auto``, ``ollama:NAME`` and ``server:URL`` written out (the choice and its reason said on
    stderr, before the run); any other name as given."""
    from .agent.catalog import resolve_short

    short = resolve_short(name, base_url=base_url)
    if short is None:
        return name, base_url
    shown = short.name if short.base_url is None else f"{short.name} at {short.base_url}"
    click.echo(f"model: {name} -> {shown} ({short.reason})", err=True)
    return short.name, short.base_url


def _print_step(agent, step) -> None:
    """A compact live view of the run on stderr."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    timing = f"[dim]{step.model_s:.1f}s model, {step.tools_s:.1f}s tools[/dim]"
    if step.error:
        console.print(f"[bold]step {step.index}[/bold] [yellow]{escape(step.error[:120])}[/yellow] {timing}")
    for obs in step.observations:
        first = (obs["output"].strip().splitlines() or [""])[0][:100]
        args = escape(str(obs["arguments"])[:80])
        console.print(f"[bold]step {step.index}[/bold] [cyan]{obs['tool']}[/cyan] {args} -> {escape(first)} {timing}")


EXIT_INCOMPLETE = 4  # eval finished, but some tasks errored or some domain had no data

# the paper's task names (llm-in-sandbox --task) -> ours
PAPER_TASKS = {"instruct_follow": ["instruct"], "instruct_pretrain": ["dream", "qed"]}


def _domain_names(spec: str) -> list[str]:
    names: list[str] = []
    for n in (x.strip() for x in spec.split(",")):
        for m in PAPER_TASKS.get(n, [n] if n else []):
            if m not in names:
                names.append(m)
    return names


@main.command(name="eval")
@click.option("--model", "model_name", default="local", show_default=True, envvar="LLM_NAME",
              help="local, auto (the strongest model found here: `sandboxlite models`), ollama:NAME, "
              "server:URL[#MODEL], scripted (a no-LLM dry run), or a model on an OpenAI-compatible endpoint "
              "(default: $LLM_NAME, else local).")  # fmt: skip
@click.option("--base-url", default=None, envvar="LLM_BASE_URL",
              help="OpenAI-compatible endpoint (default: $LLM_BASE_URL, else $OPENAI_BASE_URL).")  # fmt: skip
@click.option("--api-key", default=None, envvar="LLM_API_KEY",
              help="API key (default: $LLM_API_KEY, else $OPENAI_API_KEY).")  # fmt: skip
@click.option("--temperature", type=click.FloatRange(min=0), default=None, envvar="LLM_TEMPERATURE",
              help="Sent in both modes (default: $LLM_TEMPERATURE, else the backend's own).")  # fmt: skip
@click.option("--top-p", type=click.FloatRange(min=0, max=1, min_open=True), default=None, help="Sent in both modes.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Cap on the tokens of each model reply, both modes (default: what the context allows).")  # fmt: skip
@click.option("--sampling-seed", type=int, default=None, help="The sampling seed sent with every request.")
@click.option("--tool-format", type=click.Choice(["native", "text", "auto"]), default=None,
              help="Tool calls through the API's tools parameter (native, the default), as text in the reply "
              "(text), or native until the server refuses tools (auto).")
@click.option("--context-tokens", type=click.IntRange(min=256), default=None,
              help="The model's context size; tool outputs are clipped so the next request fits it.")
@click.option("--extra-body", default=None, metavar="JSON", help="Extra request fields, e.g. '{\"top_k\": 20}'.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="The eval-data folder (default: $SANDBOXLITE_EVAL_DATA, else the cache that "
              "`sandboxlite data pull` fills).")  # fmt: skip
@click.option("--domains", "--task", "domains", default=None, metavar="A,B",
              help="math, physics, chem, biomed, long_context, instruct (the default: all six); also dream, qed; "
              "the paper's names instruct_follow and instruct_pretrain too.")  # fmt: skip
@click.option("--tasks", "task_files", multiple=True, type=click.Path(dir_okay=False, exists=True),
              help="A JSONL file of your own tasks (repeatable; see sandboxlite.eval.custom).")  # fmt: skip
@click.option("--domain-module", "domain_modules", multiple=True, metavar="MODULE:NAME",
              help="Register the Domain(s) a Python module defines (repeatable).")  # fmt: skip
@click.option("--mode", type=click.Choice(["sandbox", "vanilla", "both", "llm"]), default="sandbox", show_default=True,
              help="llm is vanilla (the paper's name): one chat call, no sandbox.")  # fmt: skip
@click.option("--scoring", type=click.Choice(["strict", "paper"]), default="strict", show_default=True,
              help="strict: sandboxlite's scorers; paper: the paper's own reward rules.")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N items per domain (seeded, stratified).")
@click.option("--ids", default=None, metavar="ID,ID", help="Only these items (as in results.jsonl).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per item (the paper repeats AIME 16x).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="The sample's and the bootstrap's seed.")
@click.option("--workers", type=click.IntRange(min=1), default=8, show_default=True, envvar="LLM_NUM_WORKERS",
              help="Tasks in parallel, and pooled sandboxes (default: $LLM_NUM_WORKERS, else 8).")  # fmt: skip
@click.option("--max-steps", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=1800.0, show_default=True,
              help="Seconds per task.")  # fmt: skip
@click.option("--token-budget", type=click.IntRange(min=1), default=None, help="Cap on all tokens of one task.")
@click.option("--rootfs", default="auto", show_default=True)
@click.option("--image", default=None, help="Every sandbox's root: a container image in the store.")
@click.option("--network", type=NetworkMode(), default="none", show_default=True,
              help="Every sandbox's network: " + NETWORK_HELP + ".")  # fmt: skip
@click.option("--prompt", "prompt_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A prompt template file ([system] and [instance] sections), for both modes.")  # fmt: skip
@click.option("--judge", "judge_name", default=None, help="An LLM judge (physics, long_context), on --judge-base-url.")
@click.option("--judge-base-url", default=None, help="The judge's endpoint (default: --base-url).")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None,
              help="Default: ./eval-output/<model>-<settings fingerprint>/ (the same command resumes there).")  # fmt: skip
@click.option("--retry-errors/--no-retry-errors", default=True, show_default=True,
              help="On resume, run again the tasks that ended in an error.")  # fmt: skip
@click.option("--resume-anyway", is_flag=True, help="Resume in --output-dir although its settings differ.")
@click.option("--no-progress", is_flag=True, help="No progress display.")
@isolation_option
def eval_(model_name, base_url, api_key, temperature, top_p, max_tokens, sampling_seed, tool_format, context_tokens,
          extra_body, data_dir, domains,
          task_files, domain_modules, mode, scoring, limit, ids, repeats, seed, workers, max_steps, timeout_s,
          token_budget, rootfs, image, network, prompt_file, judge_name, judge_base_url, output_dir, retry_errors,
          resume_anyway, no_progress, isolation) -> None:  # fmt: skip
    """Score a model on the paper's domains (or yours), in the sandbox and/or answering directly.

    Exit codes: 0 every task ran; 2 bad arguments; 3 the model endpoint failed (the preflight
    request, before any task); 4 some tasks errored or some domain had no data (run the same
    command again to retry them); 130 interrupted (finished tasks are kept).
    """

    from .agent.profiles import resolve_model
    from .eval import EvalConfig, run_eval
    from .eval.data import default_data_dir

    _use_isolation(isolation)
    try:
        chosen = _eval_domains(domains, task_files, domain_modules)
        rootfs = _image_root(image, rootfs)
        data = Path(data_dir) if data_dir else default_data_dir(os.environ)
        extra = _extra_body(extra_body)
        model_name, base_url = _short_model(model_name, base_url)
        model = resolve_model(model_name, base_url=base_url, api_key=api_key, temperature=temperature, top_p=top_p,
                              max_tokens=max_tokens, seed=sampling_seed, extra_body=extra, tool_format=tool_format,
                              context_tokens=context_tokens)  # fmt: skip
        judge = None
        if judge_name:
            from .eval.scoring.judge import LLMJudge

            judge = LLMJudge(resolve_model(judge_name, base_url=judge_base_url or base_url, api_key=api_key,
                                           temperature=0.0))  # fmt: skip
        cfg = EvalConfig(domains=chosen, data_dir=data, out_dir=Path(output_dir) if output_dir else None,
                         modes=["sandbox", "vanilla"] if mode == "both" else ["vanilla" if mode == "llm" else mode],
                         limit=limit, ids=[i.strip() for i in ids.split(",")] if ids else None, repeats=repeats,
                         seed=seed, workers=workers, max_steps=max_steps, timeout_s=timeout_s,
                         token_budget=token_budget, rootfs=rootfs, network=network, prompt=prompt_file, scoring=scoring,
                         retry_errors=retry_errors, resume_anyway=resume_anyway)  # fmt: skip
        progress = None if no_progress or not sys.stderr.isatty() else _eval_progress()
        try:
            result = run_eval(cfg, model, judge=judge, model_name=model_name, progress=progress)
        except KeyboardInterrupt:
            where = cfg.out_dir or "the output folder"
            click.echo(f"\nsandboxlite: interrupted; finished tasks are kept in {where}/results.jsonl. "
                       "Run the same command again to resume.", err=True)  # fmt: skip
            sys.exit(130)
    except SandboxError as e:  # ModelError included: exit code 3
        _fail(e)
        return
    _eval_report(result, data_dir)
    if not result.complete:
        sys.exit(EXIT_INCOMPLETE)


def _eval_domains(domains: str | None, task_files: tuple[str, ...], domain_modules: tuple[str, ...]) -> list:
    """The domains ``eval`` runs: those named (the paper's six when none are named and no tasks or
    domain modules are given), then the tasks of the --tasks files."""
    from .eval import domains as known_domains
    from .eval import load_domain_module, load_tasks_file

    custom = [d for f in task_files for d in load_tasks_file(f)]
    for spec in domain_modules:
        load_domain_module(spec)
    if domains:
        names = _domain_names(domains)
    elif custom or domain_modules:
        names = []
    else:
        from .eval.domains import PAPER_DOMAINS

        names = list(PAPER_DOMAINS)
    known = known_domains()
    for n in names:
        if n not in known:
            raise ConfigError("--domains", f"unknown domain {n!r} (known: {', '.join(known)})")
    chosen = [known[n] for n in names] + custom
    if not chosen:
        raise ConfigError("--domains", "no domain selected")
    return chosen


def _extra_body(extra_body: str | None) -> dict | None:
    """--extra-body: a JSON object (None when not given)."""
    try:
        extra = json.loads(extra_body) if extra_body else None
    except json.JSONDecodeError as e:
        raise ConfigError("--extra-body", f"not valid JSON: {e.msg}") from None
    if extra is not None and not isinstance(extra, dict):
        raise ConfigError("--extra-body", f"expected a JSON object, got {type(extra).__name__}")
    return extra


def _eval_report(result, data_dir: str | None) -> None:
    """The summary on stdout; what ran, the domains skipped and the first errors on stderr."""
    out = result.out_dir
    click.echo((out / "summary.md").read_text())
    click.echo(f"{result.ran} tasks run, {result.skipped} already done; results in {out}/", err=True)
    for name, why in result.skipped_domains.items():
        click.echo(f"sandboxlite: warning: domain {name} skipped, no data: {why.splitlines()[0]}\n"
                   f"  Hint: sandboxlite data pull {name}" + (f" --dir {data_dir}" if data_dir else ""), err=True)  # fmt: skip
    if result.errors:
        click.echo(f"sandboxlite: {result.errors} task(s) ended in an error (scored 0); the first:", err=True)
        for key, error in result.first_errors:
            click.echo(f"  {key}: {error.splitlines()[0][:300]}", err=True)
        click.echo("  Hint: fix the cause, then run the same command again: errored tasks are retried "
                   "(--no-retry-errors keeps them)", err=True)  # fmt: skip


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"ETA {seconds // 60}m{seconds % 60:02d}s"  # fmt: skip


def _eval_progress():
    """A one-line progress display on stderr: done/total, errors, mean score so far, ETA."""

    def show(done: int, total: int, counts: dict) -> None:
        mean = counts["score_sum"] / max(1, counts["ran"])
        bar = "#" * int(30 * done / max(1, total))
        sys.stderr.write(f"\r[{bar:<30}] {done}/{total} tasks, {counts['errors']} errors, mean {100 * mean:.1f}%, "
                         f"{_eta(counts.get('eta_s'))}  ")  # fmt: skip
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the models and auto's choice.")
@click.option("--no-servers", is_flag=True, help="Files only: do not ask the loopback ports.")
def models(as_json: bool, no_servers: bool) -> None:
    """The models found on this machine, and the one --model auto uses.

    Servers answering on loopback (Ollama 11434 or $OLLAMA_HOST, llama-server 8080, vLLM 8000,
    LM Studio 1234, and $SANDBOXLITE_MODEL_PORTS), the embedded model, GGUF files in the Hugging
    Face cache, Ollama's store, LM Studio's folder and $SANDBOXLITE_MODELS. Nothing is started or
    downloaded; each port gets a short timeout.
    """
    from .agent.catalog import available_memory, choose, find_models, human_bytes, human_params, llama_cpp_installed

    found = find_models(servers=not no_servers)
    memory = available_memory()
    choice = choose(found, memory=memory, can_run_gguf=llama_cpp_installed())
    if as_json:
        rows = [dict(dataclasses.asdict(f), served=f.served) for f in found]
        why = {id(f): w for f, w in choice.passed_over}
        for f, row in zip(found, rows):
            row["passed_over"] = why.get(id(f))
        click.echo(json.dumps({"models": rows, "auto": {"ref": choice.ref, "reason": choice.reason},
                               "memory_available": memory}, indent=2))  # fmt: skip
        return
    table = [("MODEL", "SOURCE", "SIZE", "QUANT", "CONTEXT", "PARAMS", "KIND")]
    refs, notes = [""], [""]
    for f in found:
        table.append((f.name, f.source, human_bytes(f.size) if f.size is not None else "-", f.quantisation or "-",
                      str(f.context_length or "-"), human_params(f.n_params), f.kind))  # fmt: skip
        refs.append(f.ref)
        notes.append(f.note)
    widths = [min(60, max(len(r[i]) for r in table)) for i in range(len(table[0]))]
    for r, ref, note in zip(table, refs, notes):
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if ref:
            click.echo(f"    --model {ref}" + (f"   ({note})" if note else ""))
    if not no_servers and not any(f.served for f in found):
        click.echo("(no model server answers on the loopback ports)")
    click.echo(f"\nauto: {choice.ref} ({choice.reason})")
    click.echo("any GGUF file: --model local:/path/model.gguf; any OpenAI-compatible server: --model server:URL "
               "or --model NAME --base-url URL")  # fmt: skip


@main.command()
@click.option("--quick", is_flag=True, help="A few rounds of everything, for CI (seconds).")
@click.option("--rounds", type=int, default=None, help="Interleaved rounds per latency metric [default: 200; quick 5].")
@click.option("--warmup", type=int, default=None, help="Untimed rounds first (they also probe) [default: 3].")
@click.option("--exec-per-round", type=int, default=None, help="exec_true samples per round [default: 5].")
@click.option("--rootfs", default="auto", show_default=True, help="Rootfs of every sandbox and baseline.")
@click.option("--cgroups", type=click.Choice(["auto", "off", "required"]), default="auto", show_default=True)
@click.option("--baselines", default="all", show_default=True, metavar="A,B",
              help="raw_bwrap,unshare,posix_spawn,subprocess_run,host,docker,podman,runc; or all, local, "
                   "containers, none.")  # fmt: skip
@click.option("--only", default=None, metavar="METRIC,...",
              help="Metrics or groups: cold, core, files, scale, latency, throughput, density, agent, profile, "
                   "cold_true, exec_true, warm_true, reset, close, ... [default: all].")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Results file [default: bench/results/bench-<time>.json in a checkout, else ./].")  # fmt: skip
@click.option("--chart", "chart_path", type=click.Path(dir_okay=False), default=None,
              help="Chart PNG [default: the JSON path with .png]; needs matplotlib.")  # fmt: skip
@click.option("--no-chart", is_flag=True, help="Do not draw the chart.")
@click.option("--concurrency", default=None, metavar="1,2,8,64", help="Throughput concurrencies.")
@click.option("--density", "density_counts", default=None, metavar="10,100,1000", help="Density sizes.")
@click.option("--density-baseline-max", type=int, default=100, show_default=True,
              help="docker/podman/runc density only up to this many containers.")  # fmt: skip
def bench(quick, rounds, warmup, exec_per_round, rootfs, cgroups, baselines, only, json_path, chart_path, no_chart,
          concurrency, density_counts, density_baseline_max) -> None:  # fmt: skip
    """Benchmark sandboxlite against posix_spawn, unshare, raw bwrap, Docker, podman and runc.

    Prints a table, writes JSON and a chart. Docker: sudo bench/setup_docker.sh first.
    """
    from .bench.runner import BenchOptions, run_bench

    def ints(opt: str, text: str | None) -> list[int] | None:
        try:
            return [int(x) for x in text.split(",") if x.strip()] if text else None
        except ValueError:
            raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=opt) from None

    opts = BenchOptions(quick=quick, rounds=rounds, warmup=warmup, exec_per_round=exec_per_round, rootfs=rootfs,
                        cgroups=cgroups, baselines=baselines, only=only, json_path=json_path, chart=not no_chart,
                        chart_path=chart_path, concurrency=ints("--concurrency", concurrency),
                        density=ints("--density", density_counts), density_baseline_max=density_baseline_max,
                        command=" ".join([os.path.basename(sys.argv[0]) if sys.argv[0].endswith("sandboxlite")
                                          else sys.argv[0], *sys.argv[1:]]))  # fmt: skip
    try:
        code = run_bench(opts)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except SandboxError as e:
        _fail(e)
        return
    sys.exit(code)


@main.group()
def rootfs() -> None:
    """Build and manage root filesystem images (profiles: lean, science, full)."""


@rootfs.command("build")
@click.argument("profile")
@click.option("--force", is_flag=True, help="Replace an existing image of that name.")
@click.option("--mirror", default=None, help="Debian mirror (default http://deb.debian.org/debian).")
@_errors_to_exit_codes
def rootfs_build(profile, force, mirror) -> None:
    """Build the image for PROFILE with mmdebstrap (progress on stderr)."""
    from .images import build

    click.echo(str(build.build(profile, force=force, **({"mirror": mirror} if mirror else {}))))


@rootfs.command("list")
def rootfs_list() -> None:
    """The images on this machine."""
    from .images import manage

    images = manage.list_images()
    if not images:
        click.echo("no images (build one: sandboxlite rootfs build lean)")
    for img in images:
        m = img.manifest
        if "error" in m:
            click.echo(f"{img.name:12} BROKEN: {m['error']}")
            continue
        size = m.get("size_bytes", 0) / (1 << 20)
        click.echo(f"{img.name:12} {m.get('profile') or '-':10} {size:8.0f} MiB  {len(m.get('packages', {})):4} pkgs  "
                   f"built {m.get('built_at', '?')}  {m.get('digest', '')[:19]}")  # fmt: skip


@rootfs.command("verify")
@click.argument("name")
@click.option("--current", is_flag=True, help="Also fail (exit 1) when NAME was built from another recipe than "
              "its profile's now (setup uses this to rebuild images after an upgrade).")
@_errors_to_exit_codes
def rootfs_verify(name, current) -> None:
    """Recompute NAME's digest; list the files that changed."""
    from .images import manage

    v = manage.verify(name)
    if v.ok and current:
        stale = manage.stale_recipe(name)
        if stale:
            click.echo(f"{name}: ok ({v.actual}), but {stale}")
            click.echo(f"Hint: rebuild it: sandboxlite rootfs build {name} --force", err=True)
            sys.exit(1)
    if v.ok:
        click.echo(f"{name}: ok ({v.actual})")
        return
    click.echo(f"{name}: MODIFIED (digest {v.actual}, expected {v.expected})")
    for label, paths in (("changed", v.changed), ("added", v.added), ("removed", v.removed)):
        for p in paths[:50]:
            click.echo(f"  {label}: /{p}")
        if len(paths) > 50:
            click.echo(f"  ... and {len(paths) - 50} more {label}")
    click.echo(f"Hint: rebuild it: sandboxlite rootfs build {name} --force", err=True)
    sys.exit(1)


@rootfs.command("export")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@_errors_to_exit_codes
def rootfs_export(name, file) -> None:
    """Write NAME to FILE (.tar.zst) for other machines."""
    from .images import manage

    click.echo(str(manage.export(name, file)))


@rootfs.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", default=None, help="Install under this name (default: the exported name).")
@click.option("--force", is_flag=True, help="Replace an existing image of that name.")
@_errors_to_exit_codes
def rootfs_import(file, name, force) -> None:
    """Install an exported image after checking its digest."""
    from .images import manage

    info = manage.import_(file, name, force=force)
    click.echo(f"{info.name}: imported, digest {info.manifest['digest']}")


@rootfs.command("chown")
@click.argument("name")
@_errors_to_exit_codes
def rootfs_chown(name) -> None:
    """Give NAME to the uid sandboxes run as (root only; a copy-on-write root needs it)."""
    from .images import manage

    manage.give(name)


@rootfs.command("rm")
@click.argument("name")
@_errors_to_exit_codes
def rootfs_rm(name) -> None:
    """Delete image NAME."""
    from .images import manage

    manage.remove(name)


@main.group()
def image() -> None:
    """Container images as sandbox roots: pull from a registry, import docker/podman/OCI archives,
    list, inspect, remove.
    A sandbox starts from one by its name: Sandbox(rootfs="python:3.12-slim"), exec --rootfs NAME."""


@image.command("import")
@click.argument("source", type=click.Path(exists=True, allow_dash=True))
@click.option("--tag", help="Name the image this (the archive must hold one); else the archive's own names.")
@click.option("--platform", help="os/arch of a multi-platform archive (default: this machine's).")
@_errors_to_exit_codes
def image_import(source, tag, platform) -> None:
    """Import SOURCE: a docker save / podman save tar, an OCI layout (directory or tar), or - for a
    stream on stdin.  Every blob is checked against its digest; the layers are unpacked safely."""
    from .images import store

    src = sys.stdin.buffer if source == "-" else source
    for info in store.import_archive(src, tag=tag, platform=platform):
        shown = ", ".join(info.manifest["oci"]["names"]) or "(no name: use the id)"
        click.echo(f"{info.name}: {shown} ({info.manifest['size_bytes'] / (1 << 20):.1f} MiB)")


@image.command("pull")
@click.argument("reference")
@click.option("--platform", help="os/arch of a multi-platform image (default: this machine's).")
@click.option("--username", "-u", help="Log in as this user (default: the login docker/podman saved).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (with --username).")
@click.option("--insecure", is_flag=True, help="Plain http (no TLS): only for a registry on this machine (loopback).")
@click.option("--quiet", "-q", is_flag=True, help="No progress, only the result.")
@_errors_to_exit_codes
def image_pull(reference, platform, username, password_stdin, insecure, quiet) -> None:
    """Pull REFERENCE (python:3.12-slim, ghcr.io/o/r:tag, 127.0.0.1:5000/app@sha256:...) from its
    registry into the store.  Every blob is checked against its digest; blobs already here (a
    shared base) are not fetched; a broken download resumes where it stopped."""
    from .images import store
    from .images.credentials import Credentials
    from .images.progress import ProgressBar

    credentials = None
    if password_stdin and not username:
        raise click.UsageError("--password-stdin needs --username")
    if username:
        if not password_stdin:
            raise click.UsageError("--username needs --password-stdin (a password on the command line leaks to ps)")
        credentials = Credentials(username, sys.stdin.readline().rstrip("\r\n"))
    bar = None if quiet else ProgressBar(sys.stderr)
    try:
        info = store.pull_image(reference, platform=platform, credentials=credentials, insecure=insecure,
                                progress=bar)  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    shown = ", ".join(info.manifest["oci"]["names"])
    click.echo(f"{info.name}: {shown} ({info.manifest['size_bytes'] / (1 << 20):.1f} MiB)")


@image.command("build")
@click.argument("context", type=click.Path(exists=True, file_okay=False))
@click.option("-f", "--file", "dockerfile", type=click.Path(exists=True, dir_okay=False),
              help="The Dockerfile (default: CONTEXT/Dockerfile).")
@click.option("-t", "--tag", help="Name the image this (python-app:1, 127.0.0.1:5000/app:dev).")
@click.option("--build-arg", "build_args", multiple=True, metavar="NAME=VALUE", help="An ARG's value (repeatable).")
@click.option("--target", help="Build up to this stage (FROM ... AS NAME).")
@click.option("--network", default=None, metavar="POLICY",
              help="What RUN steps may reach: none, host, or allow:RULES (default: allow:pypi,debian).")
@click.option("--no-cache", is_flag=True, help="Run every step again (the cache is not read).")
@click.option("--quiet", "-q", is_flag=True, help="Only the result (no steps, no RUN output).")
@_errors_to_exit_codes
def image_build(context, dockerfile, tag, build_args, target, network, no_cache, quiet) -> None:
    """Build an image from a Dockerfile, without a daemon: each RUN in a sandbox (network as
    --network says), each step a layer cached by its inputs (a rebuild with nothing changed takes
    milliseconds).  The image goes to the store: Sandbox(image=TAG), exec --rootfs TAG."""
    from .build import builder

    args = {}
    for item in build_args:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--build-arg")
        args[k] = v
    path = dockerfile or str(Path(context) / "Dockerfile")
    if not Path(path).is_file():
        raise click.BadParameter(f"{path} does not exist", param_hint="-f/--file")
    out = None if quiet else (lambda chunk: (sys.stderr.buffer.write(chunk), sys.stderr.buffer.flush()))
    result = builder.build(path, context, tag=tag, build_args=args, target=target,
                           network=network or builder.DEFAULT_NETWORK, no_cache=no_cache,
                           say=None if quiet else (lambda line: click.echo(line, err=True)), output=out)  # fmt: skip
    click.echo(f"{result.image}{' ' + result.tag if result.tag else ''}: {len(result.steps)} steps, "
               f"{result.cached} cached, {result.seconds:.2f} s")


@image.command("list")
@_errors_to_exit_codes
def image_list() -> None:
    """The container images in the store: id, size, names."""
    from .images import store, where

    table = where.names()
    images = store.oci_images()
    if not images:
        click.echo("no container images (import one: sandboxlite image import FILE)")
    for info in images:
        refs = sorted(ref for ref, name in table.items() if name == info.name)
        click.echo(f"{info.name:16} {info.manifest.get('size_bytes', 0) / (1 << 20):8.1f} MiB  "
                   f"{' '.join(refs) or '(no name)'}")  # fmt: skip


@image.command("inspect")
@click.argument("ref")
@_errors_to_exit_codes
def image_inspect(ref) -> None:
    """REF's record as JSON: names, digests, layers, its config (env, workdir, user, command, ports)."""
    from .images import store

    info = store.find_image(ref)
    m = info.manifest
    click.echo(json.dumps({"id": info.name, "path": str(info.path), "size_bytes": m.get("size_bytes"),
                           "files": m.get("file_count"), "digest": m.get("digest"), **m["oci"]}, indent=1))  # fmt: skip


@image.command("rm")
@click.argument("refs", nargs=-1, required=True)
@_errors_to_exit_codes
def image_rm(refs) -> None:
    """Remove images (by a name or their id) and their names; their blobs stay until prune."""
    from .images import store

    for ref in refs:
        gone = store.remove(ref)
        click.echo(f"removed {ref}" + (f" ({', '.join(gone)})" if gone else ""))


@image.command("prune")
@_errors_to_exit_codes
def image_prune() -> None:
    """Remove the blobs no image in the store uses, and the unpacked files no image shares any more."""
    from .images import store

    pruned = store.prune()
    click.echo(f"removed {pruned.blobs} blob(s) and {pruned.files} shared file(s), {pruned.freed / (1 << 20):.1f} MiB")


@main.group()
def snapshot() -> None:
    """Keep, list and move sandbox snapshots (Sandbox.snapshot(); where: SANDBOXLITE_SNAPSHOTS)."""


def _store():
    from .jail.host import default_host

    return default_host().snapshot_store()


@snapshot.command("list")
@_errors_to_exit_codes
def snapshot_list() -> None:
    """The snapshots kept here, oldest first: name, parent, layers, size, entries, created, in use,
    fork's (removed with the last sandbox of it)."""
    import datetime

    store = _store()
    snaps = store.list()
    click.echo(f"{len(snaps)} snapshot(s) in {store.root}")
    for s in snaps:
        when = datetime.datetime.fromtimestamp(s.created).strftime("%Y-%m-%d %H:%M:%S")
        used = " ".join(x for x in ("in use" if store.in_use(s.name) else "", "fork's" if s.transient else "") if x)
        click.echo(f"{s.name[:12]}  parent {s.parent[:12] if s.parent else '-':12}  layers {s.depth:2}  "
                   f"{s.size / (1 << 20):9.1f} MiB  {s.files:7} entries  {when}  {s.rootfs or '-'}  {used}".rstrip())  # fmt: skip


@snapshot.command("prune")
@_errors_to_exit_codes
def snapshot_prune() -> None:
    """Remove the snapshots fork() took for its children that no live sandbox uses (left by a
    process that ended without closing them)."""
    removed = _store().prune()
    click.echo(f"removed {len(removed)} snapshot(s)" + "".join(f"\n  {n[:12]}" for n in removed))


@snapshot.command("rm")
@click.argument("names", nargs=-1, required=True)
@_errors_to_exit_codes
def snapshot_rm(names) -> None:
    """Remove snapshots (refused while a live sandbox uses one, or one was taken on top of it)."""
    store = _store()
    for name in names:
        snap = store.meta(name)
        store.remove(snap.name)
        click.echo(f"removed {snap}")


@snapshot.command("flatten")
@click.argument("name")
@_errors_to_exit_codes
def snapshot_flatten(name) -> None:
    """Keep NAME's whole stack as one layer (a new snapshot without a parent); print its name."""
    click.echo(_store().meta(name).flatten().name)


@snapshot.command("export")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@_errors_to_exit_codes
def snapshot_export(name, file) -> None:
    """Write NAME and the layers below it to FILE (.tar.zst, with a manifest) for other machines."""
    from .state import archive

    click.echo(str(archive.export(_store().meta(name), file)))


@snapshot.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_errors_to_exit_codes
def snapshot_import(file) -> None:
    """Check FILE's snapshot (each layer against its name; no device, setuid bit or link out) and keep it."""
    from .state import archive

    snap = archive.import_(_store(), file)
    click.echo(f"{snap.name}: imported ({snap.depth} layer(s), {snap.size} bytes)")


@main.group()
def data() -> None:
    """Eval data: pull each domain's files from the Hugging Face hub, list what is here."""


def _data_dir_option(f):
    return click.option("--dir", "data_dir", type=click.Path(file_okay=False), default=None,
                        help="The data directory (default: $SANDBOXLITE_EVAL_DATA, else ~/.cache/sandboxlite/eval-data; "
                        "eval reads the same one).")(f)  # fmt: skip


@data.command("pull")
@click.argument("domains", nargs=-1)
@_data_dir_option
@click.option("--accept-changed", is_flag=True, help="Install files whose checksum differs from the pinned one.")
@click.option("--force", is_flag=True, help="Fetch again although the files are present and verified.")
@_errors_to_exit_codes
def data_pull(domains, data_dir, accept_changed, force) -> None:
    """Download DOMAINS (default: every one with a hub source) through huggingface_hub (HF_ENDPOINT and
    HF_TOKEN honoured), verify each file's SHA-256, install them. Exit 1 when a domain failed."""
    from .eval.data import default_data_dir, pull

    target = Path(data_dir) if data_dir else default_data_dir(os.environ)
    click.echo(f"data directory: {target}", err=True)
    results = pull(_domain_names(",".join(domains)) if domains else [], target, environ=os.environ,
                   accept_changed=accept_changed, force=force, progress=lambda m: click.echo(f"  {m}", err=True))  # fmt: skip
    for r in results:
        click.echo(f"{r.domain:13} {'ok ' if r.ok else 'FAILED'} {r.message}")
    if not all(r.ok for r in results):
        sys.exit(1)


@data.command("list")
@_data_dir_option
@_errors_to_exit_codes
def data_list(data_dir) -> None:
    """What each domain has in the data directory: files verified against the pins, items eval reads."""
    from .eval.data import default_data_dir, status

    target = Path(data_dir) if data_dir else default_data_dir(os.environ)
    click.echo(f"data directory: {target}")
    for st in status(target):
        files = f"{st.verified}/{st.files} verified" if st.files else "no pins"
        items = f"{st.items} items" if st.items is not None else "missing"
        click.echo(f"{st.domain:13} {items:12} {files:14} {st.source}")
        if st.problem:
            click.echo(f"{'':13} {st.problem}")


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The HTML file to write [default: PATH/view.html for a folder, view.html beside a "
                   "trajectory.json, FILE.html beside another trajectory file].")  # fmt: skip
@click.option("--open", "open_it", is_flag=True, help="Open the page in the web browser.")
@click.option("--serve", "serve_port", type=click.IntRange(0, 65535), is_flag=False, flag_value=0, default=None,
              metavar="[PORT]", help="Serve the page on 127.0.0.1:PORT (any free port without one) while a run "
              "or an eval still writes: new steps appear without a reload; Ctrl-C stops.  Writes nothing.")  # fmt: skip
@_errors_to_exit_codes
def view(path: Path, out: Path | None, open_it: bool, serve_port: int | None) -> None:
    """Write one self-contained HTML page showing a run: PATH is its output folder or its trajectory.json.

    PATH may also be an eval's output folder (the --output-dir of `sandboxlite eval`): then the page
    shows every task (filters, sorting, sandbox next to vanilla, charts) and each run's own page is
    written too (view.html in its trajectory folder), so the page's links work.

    The page embeds the data and fetches nothing (it works from file://); open it in any browser.
    """
    from .view import ViewServer, is_eval_dir, load_run, resolve, write_eval, write_html

    if serve_port is not None:
        if out is not None:
            raise click.UsageError("--serve writes no file: drop -o")
        server = ViewServer(path, serve_port)
        click.echo(f"serving {path} at {server.url} (loopback only; Ctrl-C stops)")
        if open_it:
            import webbrowser

            webbrowser.open(server.url)
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            click.echo("stopped")
        finally:
            server.server_close()
        return
    if is_eval_dir(path):
        try:
            written, data, pages = write_eval(path, out)
        except OSError as e:
            raise ConfigError("--output", f"cannot write {out or path}: {e.strerror or e}",
                              hint="choose another file with -o OUT.html") from None  # fmt: skip
        click.echo(f"{written} ({written.stat().st_size:,} bytes, {len(data['rows'])} tasks, "
                   f"{pages} trajectory pages)")  # fmt: skip
    else:
        traj, folder = resolve(path)
        if out is None:
            out = folder / "view.html" if folder is not None else traj.with_suffix(".html")
        data = load_run(path)
        try:
            written = write_html(data, out)
        except OSError as e:
            raise ConfigError("--output", f"cannot write {out}: {e.strerror or e}",
                              hint="choose another file with -o OUT.html") from None  # fmt: skip
        click.echo(f"{written} ({written.stat().st_size:,} bytes, {len(data['steps'])} steps)")
    if open_it:
        import webbrowser

        webbrowser.open(written.resolve().as_uri())


if __name__ == "__main__":  # pragma: no cover
    main()
