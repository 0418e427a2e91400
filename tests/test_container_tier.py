"""The container tier (issue 16, "tested for real"): sandboxlite inside real Docker and rootless podman containers.

Opt-in: ``SANDBOXLITE_CONTAINER_TIER=1 .venv/bin/python -m pytest tests/test_container_tier.py`` (as root,
or with a Docker daemon already up).  Without the variable every test here is skipped; with it, a
Docker or a rootless podman that cannot be used is a failure, not a skip.

``tools/container_tier.sh`` starts dockerd (``bench/setup_docker.sh``: Debian's docker.io) and makes an
image without any registry: the project's ``lean`` rootfs ``docker import``ed, bubblewrap, gcc, musl and
python3-venv from Debian's .debs, sandboxlite and its dependencies as wheels made on the host (cached
by a digest of its inputs: seconds when nothing changed).  Each scenario is one ``docker run
--network none`` of a probe (``PROBE`` below) that runs ``sandboxlite doctor --json``, an exec, a
reset and ``COLD_RUNS`` timed cold starts (``Sandbox()`` + its first exec), over the container's own
``/usr`` (``rootfs="host"``) and over the host's ``lean`` image bound in read-only (a copy-on-write root):

- ``recipe``: the README's recipe (seccomp, systempaths and apparmor unconfined): everything works;
- ``profile``: the same with ``seccomp=<sandboxlite container-profile docker>`` instead of unconfined;
- ``recipe-pool0`` / ``profile-pool0``: those with ``SANDBOXLITE_NETNS_POOL=0`` (network namespaces
  made by bwrap, not ahead of time);
- ``default``: ``docker run`` without options: a sandbox must fail to start, naming the seccomp profile
  and the recipe, and ``doctor --json`` must exit 1 with its "user namespaces" check failing;
- ``user1000``: the recipe with ``--user 1000`` (a non-root caller inside);
- ``recipe-sysadmin``: the recipe with ``--cap-add SYS_ADMIN`` (root may then join network namespaces
  made ahead of time and idmap the image, as on a host);

and the same image in rootless podman (``podman run`` as ``$SANDBOXLITE_TIER_PODMAN_USER``, default
plainuser: the container's root is that user; the script's ``podman-rootless`` runs it, with its storage and
the OCI runtime that works here):

- ``podman-recipe``: the README's podman recipe (``seccomp=<sandboxlite container-profile podman>``,
  ``unmask=ALL``): everything works;
- ``podman-unconfined``: the same with ``seccomp=unconfined``;
- ``podman-default``: ``podman run`` without options: a sandbox must fail to start naming the cause (podman's
  default profile allows the namespaces but refuses ``sethostname``, and its ``/proc`` is masked) and the
  recipe, and ``doctor --json`` must exit 1 with its "sandbox" check failing.

and ``isolation="landlock"`` (``SANDBOXLITE_ISOLATION=landlock``: no namespaces, the container's own ``/usr``
only) where no flag is changed:

- ``landlock-default``: ``docker run`` without options; ``landlock-user1000``: the same with ``--user 1000``;
- ``podman-landlock``: ``podman run`` without options.

The last test writes the table (scenario x doctor, exec, reset, cold start median) to
``$SANDBOXLITE_CONTAINER_TIER_DIR/logs/table.md`` and prints it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

if not os.environ.get("SANDBOXLITE_CONTAINER_TIER"):
    pytest.skip("the container tier is opt-in: set SANDBOXLITE_CONTAINER_TIER=1 (needs Docker, or root to start it)",
                allow_module_level=True)  # fmt: skip

pytestmark = pytest.mark.timeout(1200)  # the first run builds the image (about a minute; more without caches)

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "tools" / "container_tier.sh"
STATE = Path(os.environ.get("SANDBOXLITE_CONTAINER_TIER_DIR", "/var/tmp/sandboxlite-container-tier"))
COLD_RUNS = int(os.environ.get("SANDBOXLITE_CONTAINER_TIER_RUNS", "20"))
LABEL = "sandboxlite-container-tier"

UNCONFINED = ["--security-opt", "systempaths=unconfined", "--security-opt", "apparmor=unconfined"]
RECIPE = ["--security-opt", "seccomp=unconfined", *UNCONFINED]
PROFILE = "PROFILE"  # stands for --security-opt seccomp=<sandboxlite container-profile ENGINE>, the engine's
UNMASK = ["--security-opt", "unmask=ALL"]
LANDLOCK = {"SANDBOXLITE_ISOLATION": "landlock"}


class Scenario(NamedTuple):
    what: str
    opts: list[str]  # extra `run` options
    env: dict[str, str]  # extra environment
    works: bool  # must sandboxes start
    engine: str = "docker"  # or "podman" (rootless)
    rootfs: tuple[str, ...] = ("host", "lean")  # the container's own /usr; the host's lean image, bound in read-only

    @property
    def landlock(self) -> bool:
        return self.env.get("SANDBOXLITE_ISOLATION") == "landlock"


SCENARIOS = {
    "recipe": Scenario("seccomp=unconfined systempaths=unconfined apparmor=unconfined", RECIPE, {}, True),
    "recipe-pool0": Scenario("recipe + SANDBOXLITE_NETNS_POOL=0", RECIPE, {"SANDBOXLITE_NETNS_POOL": "0"}, True),
    "profile": Scenario("seccomp=<container-profile docker> systempaths=unconfined apparmor=unconfined",
                        [PROFILE, *UNCONFINED], {}, True),  # fmt: skip
    "profile-pool0": Scenario("profile + SANDBOXLITE_NETNS_POOL=0", [PROFILE, *UNCONFINED],
                              {"SANDBOXLITE_NETNS_POOL": "0"}, True),  # fmt: skip
    "default": Scenario("docker run with no --security-opt", [], {}, False),
    "user1000": Scenario("recipe + --user 1000", [*RECIPE, "--user", "1000"], {}, True),
    # with CAP_SYS_ADMIN, root may join the network namespaces made ahead of time and idmap the image
    "recipe-sysadmin": Scenario("recipe + --cap-add SYS_ADMIN", [*RECIPE, "--cap-add", "SYS_ADMIN"], {}, True),
    # rootless podman: the README's recipe, the same unconfined, and no options
    "podman-recipe": Scenario("podman: seccomp=<container-profile podman> unmask=ALL", [PROFILE, *UNMASK], {}, True,
                              "podman"),  # fmt: skip
    "podman-unconfined": Scenario("podman: seccomp=unconfined unmask=ALL",
                                  ["--security-opt", "seccomp=unconfined", *UNMASK], {}, True, "podman"),  # fmt: skip
    "podman-default": Scenario("podman run with no --security-opt", [], {}, False, "podman"),
    # no flag changed: isolation="landlock" (no namespaces; the container's own files only)
    "landlock-default": Scenario("docker run with no --security-opt, isolation=landlock", [], LANDLOCK, True,
                                 rootfs=("host",)),  # fmt: skip
    "landlock-user1000": Scenario("docker run --user 1000, isolation=landlock", ["--user", "1000"], LANDLOCK, True,
                                  rootfs=("host",)),  # fmt: skip
    "podman-landlock": Scenario("podman run with no --security-opt, isolation=landlock", [], LANDLOCK, True, "podman",
                                rootfs=("host",)),  # fmt: skip
}
WORKING = [name for name, s in SCENARIOS.items() if s.works]
NAMESPACED = [name for name in WORKING if not SCENARIOS[name].landlock]
LANDLOCKED = [name for name in WORKING if SCENARIOS[name].landlock]
CASES = [(name, r) for name in WORKING for r in SCENARIOS[name].rootfs]  # (scenario, rootfs) that must work
# what a failing start under podman's defaults may name: podman's default profile allows the namespaces (unlike
# Docker's) but refuses sethostname, and its /proc is masked; whichever is met first is the cause
PODMAN_CAUSES = ("sethostname", "/proc is masked", "seccomp profile")
ROOTFS = ("host", "lean")  # the table's columns

# Runs inside the container: python3 probe.py ROOTFS... ; prints one JSON object on its last line.
PROBE = r'''
import json, os, statistics, subprocess, sys, time, traceback

out = {"euid": os.geteuid(), "python": sys.version.split()[0], "rootfs": {}}
t = time.perf_counter()
d = subprocess.run([sys.executable, "-c", "from sandboxlite.cli import main; main()", "doctor", "--json"],
                   capture_output=True, text=True)
out["doctor_s"] = round(time.perf_counter() - t, 3)
out["doctor_rc"] = d.returncode
try:
    out["doctor"] = json.loads(d.stdout)
except ValueError:
    out["doctor"] = None
    out["doctor_raw"] = (d.stdout + d.stderr)[-4000:]

from sandboxlite import Sandbox, SandboxError


def err(e):
    if isinstance(e, SandboxError):
        return {"type": type(e).__name__, "message": e.message, "hint": e.hint}
    return {"type": type(e).__name__, "message": str(e), "hint": None, "traceback": traceback.format_exc()[-2000:]}


for spec in sys.argv[1:]:
    res = out["rootfs"][spec] = {}
    try:
        with Sandbox(rootfs=spec) as sb:
            r = sb.exec(["python3", "-c", "import os; print(6*7, os.getuid())"])
            res["exec"] = {"exit_code": r.exit_code, "stdout": r.stdout.decode(errors="replace"),
                           "stderr": r.stderr.decode(errors="replace")[-2000:]}
            res["info"] = {k: v for k, v in sb.info.items() if isinstance(v, (str, int, float, bool, type(None)))}
            # leave traces everywhere a sandbox can write, and a process, then reset
            sb.write_file("marker.txt", b"before reset")
            # TMPDIR and HOME: /tmp and /root with namespaces, the sandbox's own directories with Landlock
            w = sb.exec("echo x > $TMPDIR/t && echo x > $HOME/r && (echo x > /etc/cow 2>/dev/null && echo cow || echo ro)"
                        " && (sleep 1000 >/dev/null 2>&1 &) && echo started")
            res["before_reset"] = w.stdout.decode(errors="replace")
            t = time.perf_counter()
            sb.reset()
            res["reset_ms"] = round((time.perf_counter() - t) * 1e3, 3)
            a = sb.exec("for f in marker.txt $TMPDIR/t $HOME/r /etc/cow; do test -e $f && echo left:$f; done;"
                        " n=$(for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done"
                        " | grep -c '^sleep 1000'); echo procs=$n")
            res["after_reset"] = a.stdout.decode(errors="replace")
            res["after_reset_exit"] = a.exit_code
            e2 = sb.exec(["python3", "-c", "print('again')"])
            res["exec_after_reset"] = e2.stdout.decode(errors="replace")
    except Exception as e:
        res["error"] = err(e)
        continue
    # cold starts: a new Sandbox() and its first exec, one at a time (one warm-up not counted)
    times, failures = [], []
    for i in range(int(os.environ.get("PROBE_RUNS", "20")) + 1):
        t = time.perf_counter()
        try:
            sb = Sandbox(rootfs=spec)
            try:
                r = sb.exec(["true"])
                dt = (time.perf_counter() - t) * 1e3
            finally:
                sb.close()
            if r.exit_code != 0:
                raise RuntimeError(f"true exited {r.exit_code}")
        except Exception as e:
            failures.append(err(e))
            continue
        if i:
            times.append(dt)
    res["cold_ms"] = sorted(round(x, 3) for x in times)
    res["cold_median_ms"] = round(statistics.median(times), 3) if times else None
    res["cold_failures"] = len(failures)
    res["cold_first_failure"] = failures[0] if failures else None

print(json.dumps(out))
'''


# -- the setup ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tier(tmp_path_factory) -> dict:
    """tools/container_tier.sh: dockerd up, the image built (or found), rootless podman ready (or PODMAN_ERROR);
    what it wrote to $STATE/env."""
    t = time.monotonic()
    p = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=1100)
    took = time.monotonic() - t
    if p.returncode not in (0, 3):  # 3: Docker is ready, podman is not (the podman tests fail with PODMAN_ERROR)
        pytest.fail(f"SANDBOXLITE_CONTAINER_TIER is set but {SETUP} failed (exit {p.returncode}): Docker is not "
                    f"usable here\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}", pytrace=False)  # fmt: skip
    env = dict(line.split("=", 1) for line in (STATE / "env").read_text().splitlines() if "=" in line)
    env["setup_s"] = f"{took:.1f}"
    env["setup_out"] = p.stdout
    info = subprocess.run([env["DOCKER"], "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if info.returncode != 0:
        pytest.fail(f"docker info failed after setup: {info.stderr.strip()}", pytrace=False)
    d = tmp_path_factory.mktemp("container-tier")
    # world-readable: a container started with --user 1000 reads the probe as uid 1000
    d.chmod(0o755)
    (d / "probe.py").write_text(PROBE)
    (d / "probe.py").chmod(0o644)
    env["dir"] = str(d)
    return env


# an engine: the command that runs it, the image in its storage, a directory of the probe it can bind in
@pytest.fixture(scope="module")
def docker_engine(tier) -> dict:
    return {"name": "docker", "cmd": tier["DOCKER"], "image": tier["IMAGE"], "dir": tier["dir"]}


@pytest.fixture(scope="module")
def podman_engine(tier):
    """Rootless podman: the script's podman-rootless (runuser to the user); the probe where that user reads it."""
    if not tier.get("PODMAN"):
        why = tier.get("PODMAN_ERROR") or f"{SETUP} wrote no PODMAN"
        pytest.fail(f"SANDBOXLITE_CONTAINER_TIER is set but rootless podman is not usable: {why}", pytrace=False)
    d = Path(tempfile.mkdtemp(prefix="probe-", dir=tier["PODMAN_SHARE"]))
    d.chmod(0o755)
    (d / "probe.py").write_text(PROBE)
    (d / "probe.py").chmod(0o644)
    yield {"name": "podman", "cmd": tier["PODMAN"], "image": tier["PODMAN_IMAGE"], "dir": str(d)}
    shutil.rmtree(d, ignore_errors=True)


def engine_run(eng: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([eng["cmd"], *args], capture_output=True, text=True, timeout=timeout)


def make_profile(eng: dict) -> Path:
    """`sandboxlite container-profile ENGINE`, as the image's sandboxlite prints it."""
    p = engine_run(eng, "run", "--rm", "--network", "none", "--label", LABEL, eng["image"],
                   "sandboxlite", "container-profile", eng["name"])  # fmt: skip
    assert p.returncode == 0, f"`sandboxlite container-profile {eng['name']}` failed in the image: {p.stderr.strip()}"
    prof = json.loads(p.stdout)
    assert prof["syscalls"], prof
    path = Path(eng["dir"]) / f"sandboxlite-{eng['name']}.json"
    path.write_text(p.stdout)
    path.chmod(0o644)  # rootless podman reads it as its user
    return path


@pytest.fixture(scope="module")
def docker_profile(docker_engine) -> Path:
    return make_profile(docker_engine)


@pytest.fixture(scope="module")
def podman_profile(podman_engine) -> Path:
    return make_profile(podman_engine)


RESULTS: dict[str, dict] = {}


def run_scenario(name: str, tier: dict, eng: dict, profile_file: Path | None) -> dict:
    if name in RESULTS:
        return RESULTS[name]
    s = SCENARIOS[name]
    opts = [x for o in s.opts for x in (["--security-opt", f"seccomp={profile_file}"] if o == PROFILE else [o])]
    user = opts[opts.index("--user") + 1] if "--user" in opts else "0"
    home = "/var/cache/sandboxlite" if user == "0" else "/home/agent/.cache/sandboxlite"
    argv = ["run", "--rm", "--network", "none", "--label", LABEL, *opts,
            "-v", f"{eng['dir']}:/sandboxlite-tier:ro",
            "-v", f"{tier['LEAN_DIR']}:{home}/rootfs/lean:ro",
            "-e", f"PROBE_RUNS={COLD_RUNS}"]  # fmt: skip
    for k, v in s.env.items():
        argv += ["-e", f"{k}={v}"]
    argv += [eng["image"], "python", "/sandboxlite-tier/probe.py", *s.rootfs]
    t = time.monotonic()
    p = engine_run(eng, *argv)
    took = time.monotonic() - t
    log = Path(tier["LOGS"]) / f"scenario-{name}.log"
    log.write_text(f"$ {shlex.join([eng['cmd'], *argv])}\n# exit {p.returncode} in {took:.1f} s\n"
                   f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n")  # fmt: skip
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert p.returncode == 0 and lines, f"the probe did not finish in scenario {name} (log: {log}):\n{p.stderr[-3000:]}"
    res = json.loads(lines[-1])
    res["run_s"] = round(took, 2)
    res["argv"] = [eng["cmd"], *argv]
    res["log"] = str(log)
    RESULTS[name] = res
    return res


def scenario_result(request, tier: dict, name: str) -> dict:
    """The scenario's probe result (run once): the engine's fixtures are asked for only when needed."""
    if name in RESULTS:
        return RESULTS[name]
    s = SCENARIOS[name]
    eng = request.getfixturevalue(f"{s.engine}_engine")
    prof = request.getfixturevalue(f"{s.engine}_profile") if PROFILE in s.opts else None
    return run_scenario(name, tier, eng, prof)


@pytest.fixture
def scenario(request, tier):
    name = request.param
    return name, scenario_result(request, tier, name)


def check(doctor: dict | None, name: str) -> dict:
    assert doctor is not None, "doctor --json printed no JSON"
    found = [c for c in doctor["checks"] if c["name"] == name]
    assert found, f"doctor has no check named {name!r}: {[c['name'] for c in doctor['checks']]}"
    return found[0]


def failing(doctor: dict | None) -> list[str]:
    return [f"{c['name']}: {c['detail']} (hint: {c['hint']})" for c in (doctor or {}).get("checks", [])
            if c["status"] == "fail"]  # fmt: skip


# -- the scenarios that must work -----------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", NAMESPACED, indirect=True)
def test_doctor_ok(scenario):
    name, res = scenario
    assert res["doctor_rc"] == 0 and res["doctor"]["ok"], f"{name}: doctor failed: {failing(res['doctor'])}"
    assert check(res["doctor"], "container")["detail"].startswith(SCENARIOS[name].engine)
    assert check(res["doctor"], "sandbox")["status"] == "ok"


@pytest.mark.parametrize("scenario", LANDLOCKED, indirect=True)
def test_landlock_doctor(scenario):
    """No flag changed: doctor's namespace rows may fail, its "landlock mode" row must pass."""
    name, res = scenario
    assert res["doctor"] is not None, res.get("doctor_raw")
    row = check(res["doctor"], "landlock mode")
    assert row["status"] == "ok", f"{name}: {row}"
    # SANDBOXLITE_ISOLATION=landlock: the namespace rows' failures are warnings, the verdict is Landlock's
    assert res["doctor_rc"] == 0 and res["doctor"]["ok"], f"{name}: doctor failed: {failing(res['doctor'])}"
    assert check(res["doctor"], "container")["detail"].startswith(SCENARIOS[name].engine)


@pytest.mark.parametrize("scenario, rootfs", CASES, indirect=["scenario"])
def test_exec(scenario, rootfs):
    name, res = scenario
    r = res["rootfs"][rootfs]
    assert "error" not in r, f"{name}/{rootfs}: the sandbox did not start: {r.get('error')}"
    assert r["exec"]["exit_code"] == 0, r["exec"]
    six_times_seven, uid = r["exec"]["stdout"].split()
    assert six_times_seven == "42"
    if SCENARIOS[name].landlock:  # no user namespace: the sandbox's uid is a real one, never root
        assert r["info"]["isolation"] == "landlock" and uid != "0", r
        assert uid == ("1000" if "--user" in SCENARIOS[name].opts else str(r["info"]["host_uid"]))
    else:
        assert uid == "0" and r["info"]["isolation"] == "namespaces"
    if name.endswith("user1000"):
        assert res["euid"] == 1000


@pytest.mark.parametrize("scenario, rootfs", CASES, indirect=["scenario"])
def test_reset(scenario, rootfs):
    name, res = scenario
    r = res["rootfs"][rootfs]
    assert "error" not in r, f"{name}/{rootfs}: the sandbox did not start: {r.get('error')}"
    assert r["before_reset"].split()[-1] == "started", r["before_reset"]
    # nothing left: no file in the workdir, TMPDIR, HOME or /etc (copy-on-write over an image), no sleep process
    assert r["after_reset"].split() == ["procs=0"], f"{name}/{rootfs}: after reset: {r['after_reset']!r}"
    assert r["exec_after_reset"] == "again\n"


@pytest.mark.parametrize("scenario, rootfs", CASES, indirect=["scenario"])
def test_cold_starts(scenario, rootfs):
    """COLD_RUNS sandboxes, one after another, in one process: each must start (not only the first)."""
    name, res = scenario
    r = res["rootfs"][rootfs]
    assert "error" not in r, f"{name}/{rootfs}: the sandbox did not start: {r.get('error')}"
    assert r["cold_failures"] == 0, (f"{name}/{rootfs}: {r['cold_failures']} of {COLD_RUNS + 1} starts failed, "
                                     f"the first: {r['cold_first_failure']}")  # fmt: skip


# -- default flags: the failure must name the cause -----------------------------------------------------------------
def assert_refused_naming_the_cause(res: dict, where: str, causes: tuple[str, ...], hint_words: tuple[str, ...]):
    """Each rootfs: the start failed with a SetupError whose message names a cause and whose hint the recipe."""
    for rootfs in ROOTFS:
        r = res["rootfs"][rootfs]
        assert "error" in r, f"a sandbox started under {where} ({rootfs}): {r}"
        e = r["error"]
        assert e["type"] == "SetupError", e
        msg, hint = e["message"], e["hint"] or ""
        assert any(c in msg for c in causes), msg
        assert all(w in hint for w in hint_words), hint


@pytest.mark.parametrize("scenario", ["default"], indirect=True)
def test_default_flags_fail_with_the_cause(scenario):
    _, res = scenario
    assert_refused_naming_the_cause(res, "Docker's default seccomp profile", ("seccomp profile that refuses the namespaces",),
                                    ("systempaths=unconfined", "seccomp=", "container-profile", "isolation='landlock'"))  # fmt: skip
    assert all("docker" in res["rootfs"][r]["error"]["message"] for r in ROOTFS)


@pytest.mark.parametrize("scenario", ["default"], indirect=True)
def test_default_flags_doctor(scenario):
    _, res = scenario
    assert res["doctor_rc"] == 1, res.get("doctor_raw") or res["doctor"]
    assert res["doctor"]["ok"] is False
    userns = check(res["doctor"], "user namespaces")
    assert userns["status"] == "fail", userns
    assert "seccomp" in userns["detail"] and "systempaths=unconfined" in userns["hint"], userns


# -- podman's defaults: the same, in podman's words -----------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["podman-default"], indirect=True)
def test_podman_default_flags_fail_with_the_cause(scenario):
    _, res = scenario
    assert_refused_naming_the_cause(res, "rootless podman's defaults", PODMAN_CAUSES,
                                    ("unmask=ALL", "seccomp=", "container-profile podman"))  # fmt: skip
    assert all("podman" in res["rootfs"][r]["error"]["message"] for r in ROOTFS)


@pytest.mark.parametrize("scenario", ["podman-default"], indirect=True)
def test_podman_default_flags_doctor(scenario):
    _, res = scenario
    assert res["doctor_rc"] == 1, res.get("doctor_raw") or res["doctor"]
    assert res["doctor"]["ok"] is False
    assert check(res["doctor"], "container")["detail"].startswith("podman")
    sandbox = check(res["doctor"], "sandbox")
    assert sandbox["status"] == "fail", sandbox
    assert any(c in sandbox["detail"] for c in PODMAN_CAUSES) and "unmask=ALL" in sandbox["hint"], sandbox


# -- the table ------------------------------------------------------------------------------------------------------
def cells(res: dict) -> list[str]:
    """doctor's verdict, then exec, reset and the cold start median for each rootfs."""
    doc = res["doctor"]
    if doc is None:
        out = ["no JSON"]
    else:
        out = ["ok" if res["doctor_rc"] == 0 else
               "FAIL (" + ", ".join(c["name"] for c in doc["checks"] if c["status"] == "fail") + ")"]  # fmt: skip
    for rootfs in ROOTFS:
        r = res["rootfs"].get(rootfs)
        if r is None:
            out += ["n/a (not probed: Landlock has no image; a plain user has none of its own)", "-", "-"]
            continue
        if "error" in r:
            out += ["no: " + r["error"]["type"], "-", "-"]
            continue
        ok_exec = r["exec"]["exit_code"] == 0 and r["exec"]["stdout"].startswith("42")
        ok_reset = r["after_reset"].split() == ["procs=0"]
        med = f"{r['cold_median_ms']:.1f} ms" if r["cold_median_ms"] is not None else "-"
        if r["cold_failures"]:  # a median of the few that started would mislead
            med = f"{r['cold_failures']}/{COLD_RUNS + 1} starts FAILED"
        out += ["yes" if ok_exec else "NO", f"yes ({r['reset_ms']:.1f} ms)" if ok_reset else "NO", med]
    return out


def host_probes(tier: dict):
    """The probe without a container, for reference: (row, what, argv, extra env, env) as root, and as a plain user
    (uid 65534 through setpriv, the system Python with this tree on its path), each with both isolations."""
    from .helpers_nonroot import NOBODY_GID, NOBODY_UID, make_nobody_home, nobody_pythonpath

    probe = str(Path(tier["dir"]) / "probe.py")
    yield "no container", "this machine, as root", [sys.executable, probe, *ROOTFS], {}, dict(os.environ)
    yield "no container, landlock", "this machine, as root, isolation=landlock", [sys.executable, probe, "host"], \
        LANDLOCK, dict(os.environ)
    home = make_nobody_home()
    probe = str(home / "probe.py")  # where uid 65534 reads it
    shutil.copy(Path(tier["dir"]) / "probe.py", probe)
    os.chmod(probe, 0o644)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "SANDBOXLITE_HOME": str(home), "TMPDIR": str(home),
           "PYTHONPATH": nobody_pythonpath(), "LANG": "C.UTF-8"}  # fmt: skip
    plain = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "/usr/bin/python3", probe]
    try:
        yield "plain user", f"this machine, uid {NOBODY_UID} (no image of its own: host only)", [*plain, "host"], {}, env
        yield "plain user, landlock", f"this machine, uid {NOBODY_UID}, isolation=landlock", [*plain, "host"], \
            LANDLOCK, env
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_zz_table(tier, request, capsys):
    """Every scenario (run now if a test above was deselected), as a table; also in logs/table.md."""
    rows = []
    for name, s in SCENARIOS.items():
        try:
            res = scenario_result(request, tier, name)
        except (AssertionError, pytest.fail.Exception) as e:  # a probe that failed; an engine not usable
            rows.append(f"| {name} | {s.what} | probe failed: {str(e).splitlines()[0]} |" + " |" * 7)
            continue
        rows.append(f"| {name} | {s.what} | " + " | ".join(cells(res)) + f" | {res['run_s']:.1f} s |")
    for row, what, argv, extra, env in host_probes(tier):
        t = time.monotonic()
        host = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/",
                              env={**env, "PROBE_RUNS": str(COLD_RUNS), **extra})  # fmt: skip
        took = time.monotonic() - t
        try:
            RESULTS[row] = h = json.loads(host.stdout.splitlines()[-1])
            rows.append(f"| {row} | {what} | " + " | ".join(cells(h)) + f" | {took:.1f} s |")
        except (ValueError, IndexError, KeyError, TypeError):
            rows.append(f"| {row} | {what} | probe failed: {host.stderr.strip()[-200:]} |" + " |" * 7)
    head = ("| scenario | run options | doctor --json | exec (host) | reset (host) | cold start median (host) "
            "| exec (lean) | reset (lean) | cold start median (lean) | run total |\n"
            "|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    podman = (f"podman {tier.get('PODMAN_VERSION')} rootless as {tier.get('PODMAN_USER')} "
              f"({tier.get('PODMAN_STORAGE')} storage, runtime {tier.get('PODMAN_RUNTIME')})" if tier.get("PODMAN")
              else f"podman not usable: {tier.get('PODMAN_ERROR')}")  # fmt: skip
    table = (f"Docker {tier['DOCKER_SERVER']}, {podman}, image {tier['IMAGE']}, setup {tier['setup_s']} s; "
             f"cold start = Sandbox() + its first exec, median of {COLD_RUNS} (after one warm-up), in one process per "
             "container\n\n"
             + head + "\n" + "\n".join(rows) + "\n")  # fmt: skip
    (Path(tier["LOGS"]) / "table.md").write_text(table)
    (Path(tier["LOGS"]) / "results.json").write_text(json.dumps(RESULTS, indent=1))
    with capsys.disabled():
        sys.stdout.write("\n\n" + table + f"(also in {tier['LOGS']}/table.md; raw results in results.json)\n")


# -- the shipped Dockerfile example -----------------------------------------------------------------------------------
def test_example_dockerfile(tier, tmp_path):
    """examples/container/Dockerfile, built as a user would (apt and pip fetch from Debian and PyPI, the only
    registries reachable here; FROM the tier's imported base: no Docker Hub), then run: the recipe's doctor and an
    exec, and Landlock with no flags at all."""
    ctx = tmp_path / "ctx"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, ctx / rel)
    args = ["--build-arg", f"BASE={tier['BASE_IMAGE']}", "--build-arg", "WITH_IMAGE="]
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")  # a proxy that re-signs TLS (as here) is in the host's
    if bundle.is_file():
        shutil.copy(bundle, ctx / "ca.crt")
        args += ["--build-arg", "PIP_CERT=/opt/sandboxlite-src/ca.crt"]
    tag = "sandboxlite-example:tier"
    t = time.monotonic()
    b = subprocess.run([tier["DOCKER"], "build", "-q", "--network", "host", "--label", LABEL, *args, "-t", tag,
                        "-f", "examples/container/Dockerfile", "."], cwd=ctx, capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    (Path(tier["LOGS"]) / "example-dockerfile.log").write_text(f"{time.monotonic() - t:.1f} s\n{b.stdout}\n{b.stderr}")
    assert b.returncode == 0, b.stderr[-4000:]
    eng = {"name": "docker", "cmd": tier["DOCKER"], "image": tag, "dir": str(tmp_path)}
    tmp_path.chmod(0o755)
    prof = make_profile(eng)
    recipe = ["--security-opt", f"seccomp={prof}", *UNCONFINED]
    d = engine_run(eng, "run", "--rm", "--network", "none", *recipe, tag, "sandboxlite", "doctor", "--json")
    assert d.returncode == 0 and json.loads(d.stdout)["ok"], d.stdout[-3000:] + d.stderr[-2000:]
    e = engine_run(eng, "run", "--rm", "--network", "none", *recipe, tag, "sandboxlite", "exec", "--", "id", "-u")
    assert e.returncode == 0 and e.stdout == "0\n", e.stderr
    ll = engine_run(eng, "run", "--rm", "--network", "none", "-e", "SANDBOXLITE_ISOLATION=landlock", tag,
                    "sandboxlite", "exec", "--", "python3", "-c", "print(6*7)")  # fmt: skip
    assert ll.returncode == 0 and ll.stdout == "42\n", ll.stderr


def test_docker_and_podman_save_import_as_images(tier, tmp_path, host_dir_factory, monkeypatch):
    """An image built by dockerd (a busybox tree ``docker import``ed, then a Dockerfile: RUN, ENV, USER,
    WORKDIR, CMD, a removal that becomes a whiteout), saved by ``docker save`` to a file and as a stream,
    and by rootless podman after ``podman load``: each imported with the CLI and run (real bwrap)."""
    from click.testing import CliRunner

    from sandboxlite import Sandbox
    from sandboxlite.cli import main

    monkeypatch.setenv("SANDBOXLITE_HOME", str(host_dir_factory("sandboxlite-tier-images-")))
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", tree / "bin" / "busybox")
    for applet in ("sh", "cat", "echo", "id", "rm", "ls", "mkdir", "adduser", "addgroup"):
        (tree / "bin" / applet).symlink_to("busybox")
    (tree / "etc").mkdir()
    (tree / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (tree / "etc" / "group").write_text("root:x:0:\n")
    (tree / "etc" / "gone").write_text("removed by the next layer\n")
    subprocess.run(["tar", "-C", str(tree), "-cf", str(tmp_path / "tree.tar"), "."], check=True)
    docker = tier["DOCKER"]
    base, tag = "sandboxlite-tier-bb:base", "sandboxlite-tier-bb:app"
    subprocess.run([docker, "import", str(tmp_path / "tree.tar"), base], check=True, capture_output=True)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {base}\nRUN echo built by dockerd > /etc/built && rm /etc/gone\n"
        "RUN echo 'app:x:4321:4321::/home/app:/bin/sh' >> /etc/passwd && echo 'app:x:4321:' >> /etc/group\n"
        "ENV GREETING=hello\nWORKDIR /srv\nUSER app\nCMD [\"cat\", \"/etc/built\"]\n")  # fmt: skip
    b = subprocess.run([docker, "build", "-q", "--network", "none", "--label", LABEL, "-t", tag, str(tmp_path / "ctx")],
                       capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
    assert b.returncode == 0, b.stderr[-3000:]
    subprocess.run([docker, "save", "-o", str(tmp_path / "app.tar"), tag], check=True)

    def check(ref: str) -> None:
        with Sandbox(image=ref) as sb:
            r = sb.exec("id -u; cat /etc/built; ls /etc/gone; echo $GREETING")
            assert r.stdout == b"4321\nbuilt by dockerd\nhello\n" and b"gone" in r.stderr, r
        out = CliRunner().invoke(main, ["exec", "--image", ref])  # its CMD
        assert (out.exit_code, out.output) == (0, "built by dockerd\n"), out.output

    r = CliRunner().invoke(main, ["image", "import", str(tmp_path / "app.tar")])
    assert r.exit_code == 0 and "docker.io/library/sandboxlite-tier-bb:app" in r.output, r.output
    check(tag)
    saved = subprocess.run([docker, "save", tag], capture_output=True, check=True).stdout
    r = CliRunner().invoke(main, ["image", "import", "--tag", "local/streamed:1", "-"], input=saved)
    assert r.exit_code == 0, r.output
    check("local/streamed:1")
    if tier.get("PODMAN"):  # rootless podman: docker save | podman load, then podman save
        share = Path(tempfile.mkdtemp(prefix="save-", dir=tier["PODMAN_SHARE"]))
        share.chmod(0o777)
        try:
            shutil.copy(tmp_path / "app.tar", share / "app.tar")
            (share / "app.tar").chmod(0o644)
            pod = tier["PODMAN"]
            subprocess.run([pod, "load", "-i", str(share / "app.tar")], check=True, capture_output=True)
            subprocess.run([pod, "save", "-o", str(share / "podman.tar"), f"localhost/{tag}"], check=True,
                           capture_output=True)  # fmt: skip
            r = CliRunner().invoke(main, ["image", "import", "--tag", "local/podman:1", str(share / "podman.tar")])
            assert r.exit_code == 0, r.output
            check("local/podman:1")
        finally:
            shutil.rmtree(share, ignore_errors=True)


def test_harbor_tasks_on_harbors_docker_backend(tier, tmp_path, monkeypatch):
    """The side-by-side of issue 37: the Harbor tasks bench/harbor.py measures (tests/harbor/tasks, adapted as
    it says for this dockerd), run by ``harbor run`` in the Harbor runner on Harbor's own docker backend and on
    sandboxlite's: the oracle agent scores 1.0 on each task and the nop agent 0.0, on both backends alike."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_harbor", ROOT / "bench" / "harbor.py")
    bench_harbor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_harbor)
    monkeypatch.setenv("PATH", f"{Path(tier['DOCKER']).parent}:{os.environ.get('PATH', '')}")  # bench calls `docker`
    bench_harbor.ensure_docker_image()
    tasks = tmp_path / "tasks"
    for name in bench_harbor.OFFLINE_TASKS:
        shutil.copytree(bench_harbor.TASKS / name, tasks / name)
        bench_harbor._for_both(tasks / name)
    results = {}
    for backend in bench_harbor.BACKENDS:
        for agent, want in (("oracle", 1.0), ("nop", 0.0)):
            r = bench_harbor.job(backend, tasks, tmp_path / "jobs", f"{backend}-{agent}", 1, 2, agent=agent)
            results[backend, agent] = r
            (Path(tier["LOGS"]) / f"harbor-{backend}-{agent}.json").write_text(json.dumps(r, indent=1))
            assert r["trials"] == len(bench_harbor.OFFLINE_TASKS) and r["lost"] == 0, r
            assert r["rewards"] == {name: want for name in bench_harbor.OFFLINE_TASKS}, r
    print({k: round(v["wall_s"], 1) for k, v in results.items()})
