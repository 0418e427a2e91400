#!/usr/bin/env bash
# The container tier's setup (issue 16, "tested for real"): a Docker daemon, rootless podman and an image
# to run sandboxlite in, made without any registry (no Docker Hub: only Debian's apt and PyPI are used).
#
#   sudo tools/container_tier.sh            # set up (idempotent; seconds when nothing changed)
#   sudo tools/container_tier.sh --rebuild  # build the image again even if one with the same inputs exists
#   sudo tools/container_tier.sh --stop     # stop the dockerd that bench/setup_docker.sh started, and podman's pause process
#   SANDBOXLITE_CONTAINER_TIER=1 .venv/bin/python -m pytest tests/test_container_tier.py   # runs this, then the scenarios
#
# What it does:
#   1. a Docker daemon: bench/setup_docker.sh --podman (Debian's docker.io, dockerd started by hand; podman and
#      uidmap installed) unless one answers and podman is there;
#   2. the base image: the project's `lean` rootfs (built with `sandboxlite rootfs build lean` if missing),
#      `docker import`ed from a tarball of its tree (owned by root in the image), tagged by the rootfs digest;
#   3. the packages sandboxlite needs inside (bubblewrap, gcc, libc6-dev, musl-tools, python3-venv): the .debs
#      apt would install over *that* image (apt-get -s against the image's own dpkg status), fetched on the host;
#   4. wheels made on the host: sandboxlite from this tree, and its dependencies (PyPI), so that `docker build`
#      and every container run need no network (the containers run with --network none);
#   5. `docker build` (legacy builder, FROM the imported image: nothing is pulled): dpkg -i the .debs, a venv in
#      /opt/sandboxlite with the wheels, the users `sandboxlite` (as tools/setup.sh makes it) and `agent`
#      (uid 1000), and the executor compiled by sandboxlite itself for both (as at first use).
#   6. podman, rootless as $SANDBOXLITE_TIER_PODMAN_USER (default plainuser; made, with subordinate ids, if
#      missing), on storage of its own in podman/: the same image `docker save | podman load`ed (overlay storage;
#      where rootless overlay is refused, vfs, with the image flattened to one layer: `docker export | podman
#      import`), run by the OCI runtime that can start it here (podman's default, crun, refuses machines with
#      cgroup v1 and v2 both mounted: then runc). podman-rootless is the command: runuser, then podman with them.
# The image is tagged sandboxlite-tier:<digest of all its inputs>; when that tag exists nothing is rebuilt.
# Everything is kept in $SANDBOXLITE_CONTAINER_TIER_DIR (default /var/tmp/sandboxlite-container-tier):
# logs in logs/, the build context in ctx/, podman's storage in podman/, and env (what the tests read: DOCKER,
# IMAGE, LEAN_DIR, PODMAN, ...: one KEY=VALUE a line, unquoted).
# Exit status: 0 ready; 3 Docker is ready but rootless podman is not (PODMAN_ERROR in env says why; the podman
# scenarios fail with it); anything else: nothing is ready.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${SANDBOXLITE_CONTAINER_TIER_DIR:-/var/tmp/sandboxlite-container-tier}
LOGS=$STATE/logs
CTX=$STATE/ctx
VENV_PY=${SANDBOXLITE_TIER_PYTHON:-$ROOT/.venv/bin/python}
LABEL=sandboxlite-container-tier
# rootless podman's run-time state (its runroot and XDG_RUNTIME_DIR): in /run, gone at a restart as it should be,
# and short (podman refuses an overlay runroot longer than 50 characters)
PRUN=/run/sandboxlite-tier-$(printf '%s' "$STATE" | sha256sum | cut -c1-8)
# what sandboxlite needs inside the container (as tools/setup.sh installs it), less what `lean` already has
APT_PKGS=(bubblewrap libseccomp2 gcc libc6-dev musl-tools python3-venv)
TIER_VERSION=1  # bump when this script changes what goes into the image

say() { echo "container_tier: $*"; }
die() { echo "container_tier: error: $*" >&2; echo "container_tier: logs in $LOGS" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

mkdir -p "$LOGS" "$CTX"
T0=$(now)

# Debian's CLI matches Debian's daemon; another `docker` earlier in PATH may be a newer client without buildx
if [ -n "${SANDBOXLITE_DOCKER:-}" ]; then DOCKER=$SANDBOXLITE_DOCKER
elif [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker
else DOCKER=$(command -v docker || echo /usr/bin/docker); fi

daemon_up() { "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

rebuild=0
case "${1:-}" in
    --stop)
        # the pause process rootless podman leaves behind (it holds the user namespace its containers share;
        # it ignores SIGTERM)
        pause=$PRUN/xdg/libpod/tmp/pause.pid
        if [ -f "$pause" ] && kill -KILL "$(cat "$pause")" 2>/dev/null; then say "stopped podman's pause process"; fi
        rm -f "$pause"
        exec "$ROOT/bench/setup_docker.sh" --stop ;;
    --rebuild) rebuild=1 ;;
    "") ;;
    *) die "unknown option $1 (use --rebuild or --stop)" ;;
esac

# -- 1. the daemon (and podman) -----------------------------------------------------------------------
have_podman() { command -v podman >/dev/null 2>&1 && command -v newuidmap >/dev/null 2>&1; }
if ! daemon_up || { ! have_podman && [ "$(id -u)" = 0 ]; }; then
    [ "$(id -u)" = 0 ] || die "no Docker daemon answers and starting one needs root: sudo $0"
    say "starting dockerd / installing podman: bench/setup_docker.sh --podman (log: $LOGS/setup_docker.log)"
    "$ROOT/bench/setup_docker.sh" --podman >"$LOGS/setup_docker.log" 2>&1 || { tail -n 20 "$LOGS/setup_docker.log" >&2; die "bench/setup_docker.sh failed"; }
    [ -x /usr/bin/docker ] && [ -z "${SANDBOXLITE_DOCKER:-}" ] && DOCKER=/usr/bin/docker
    daemon_up || die "dockerd started but $DOCKER cannot reach it"
fi
SERVER=$("$DOCKER" version --format '{{.Server.Version}}')
say "docker $SERVER ($DOCKER)"

# -- 2. the lean rootfs and the base image ------------------------------------------------------------
[ -x "$VENV_PY" ] || die "$VENV_PY missing: run tools/setup.sh first"
SL_HOME=$("$VENV_PY" -c 'from sandboxlite import paths; print(paths.home())')
LEAN=$SL_HOME/rootfs/lean
if [ ! -f "$LEAN/manifest.json" ] || [ ! -d "$LEAN/root" ]; then
    say "building the lean rootfs (sandboxlite rootfs build lean; log: $LOGS/rootfs.log)"
    "$ROOT/.venv/bin/sandboxlite" rootfs build lean >"$LOGS/rootfs.log" 2>&1 || die "rootfs build failed"
fi
LEAN_DIGEST=$("$VENV_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"].split(":")[-1])' "$LEAN/manifest.json")
BASE=sandboxlite-tier-base:${LEAN_DIGEST:0:16}
if ! "$DOCKER" image inspect "$BASE" >/dev/null 2>&1; then
    t=$(now)
    # the tree belongs to the sandboxes' uid on the host (`rootfs chown`); in the image it is root's
    owner=$(stat -c %u "$LEAN/root"); group=$(stat -c %g "$LEAN/root")
    printf '+%s root:0\n' "$owner" >"$STATE/owner.map"
    printf '+%s root:0\n' "$group" >"$STATE/group.map"
    tar -C "$LEAN/root" --numeric-owner --owner-map="$STATE/owner.map" --group-map="$STATE/group.map" -c . \
        | "$DOCKER" import --change 'CMD ["/bin/bash"]' --change "LABEL $LABEL=base" - "$BASE" >"$LOGS/import.log" 2>&1 || die "docker import failed"
    say "imported $LEAN/root as $BASE in $(since "$t") s"
fi

# -- 3. the .debs, as apt would install them over that image ------------------------------------------
STATUS=$LEAN/root/var/lib/dpkg/status
plan_debs() {  # debs=(NAME=VERSION ...): what `apt-get install` would add over the image, from the host's apt lists
    local sim
    sim=$(apt-get -s -o Dir::State::status="$STATUS" install --no-install-recommends "${APT_PKGS[@]}" 2>"$LOGS/apt-simulate.err") || return 1
    # "Inst NAME [OLD] (VERSION ...": an upgrade has [OLD]
    mapfile -t debs < <(printf '%s\n' "$sim" | awk '$1 == "Inst" { v = ""; for (i = 3; i <= NF; i++) if ($i ~ /^\(/) { v = substr($i, 2); break }; print $2 "=" v }' | sort)
    [ "${#debs[@]}" -gt 0 ] || { echo "apt-get -s plans nothing over the lean image: $sim" >>"$LOGS/apt-simulate.err"; return 1; }
}
fetch_debs() {
    printf '%s\n' "${debs[@]}" >"$STATE/debs.want"
    cmp -s "$STATE/debs.want" "$CTX/debs/.list" && return 0
    local t; t=$(now)
    rm -f "$CTX/debs"/*.deb "$CTX/debs/.list"
    (cd "$CTX/debs" && apt-get download "${debs[@]}" >"$LOGS/apt-download.log" 2>&1) || return 1
    cp "$STATE/debs.want" "$CTX/debs/.list"
    say "downloaded ${#debs[@]} packages in $(since "$t") s"
}
mkdir -p "$CTX/debs"
if ! { plan_debs && fetch_debs; }; then  # missing or stale apt lists: update them once
    [ "$(id -u)" = 0 ] || die "apt-get -s or download failed (see $LOGS/apt-simulate.err, $LOGS/apt-download.log); as root this script runs apt-get update"
    apt-get update -qq >"$LOGS/apt-update.log" 2>&1 || die "apt-get update failed"
    plan_debs || die "apt-get -s failed (see $LOGS/apt-simulate.err)"
    fetch_debs || die "apt-get download failed (see $LOGS/apt-download.log)"
fi

# -- 4. wheels ------------------------------------------------------------------------------------------
host_py=$("$VENV_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
image_py=$(cd "$LEAN/root/usr/bin" && ls python3.* 2>/dev/null | grep -E '^python3\.[0-9]+$' | sort -V | tail -n 1 | sed 's/^python//')
[ "$host_py" = "$image_py" ] || die "the wheels are made by $VENV_PY (Python $host_py), the image has Python $image_py: set SANDBOXLITE_TIER_PYTHON to a Python $image_py"
# the source that goes into the wheel (tracked and untracked files, not ignored ones)
if git -C "$ROOT" rev-parse >/dev/null 2>&1; then
    src_files=$(cd "$ROOT" && git ls-files -co --exclude-standard -- pyproject.toml setup.py MANIFEST.in README.md sandboxlite rootfs | sort)
else
    src_files=$(cd "$ROOT" && { echo pyproject.toml; echo setup.py; echo MANIFEST.in; echo README.md; find sandboxlite rootfs -type f ! -name '*.pyc'; } | sort)
fi
src_files=$(cd "$ROOT" && printf '%s\n' "$src_files" | while read -r f; do [ -f "$f" ] && echo "$f"; done)  # not deleted ones
SRC_DIGEST=$(cd "$ROOT" && printf '%s\n' "$src_files" | xargs -d '\n' sha256sum | sha256sum | cut -c1-64)
# pip builds a project in its own tree (build/, *.egg-info): build from a copy of exactly those files instead
export_src() {
    rm -rf "$STATE/src" && mkdir -p "$STATE/src"
    (cd "$ROOT" && printf '%s\n' "$src_files" | tar -c -T - -f -) | tar -C "$STATE/src" -x -f -
}
DEPS_DIGEST=$( { sha256sum <"$ROOT/pyproject.toml"; echo "$host_py"; } | sha256sum | cut -c1-64)
mkdir -p "$CTX/deps" "$CTX/wheel"
if [ "$(cat "$CTX/deps/.digest" 2>/dev/null)" != "$DEPS_DIGEST" ]; then
    t=$(now)
    rm -rf "$STATE/wheels.tmp" && mkdir -p "$STATE/wheels.tmp"
    export_src
    "$VENV_PY" -m pip wheel -q -w "$STATE/wheels.tmp" "$STATE/src" >"$LOGS/pip-deps.log" 2>&1 || die "pip wheel (dependencies) failed"
    rm -f "$STATE"/wheels.tmp/sandboxlite-*.whl "$CTX"/deps/*.whl
    mv "$STATE"/wheels.tmp/*.whl "$CTX/deps/"
    echo "$DEPS_DIGEST" >"$CTX/deps/.digest"
    say "made $(ls "$CTX/deps" | grep -c '\.whl$') dependency wheels in $(since "$t") s"
fi
if [ "$(cat "$CTX/wheel/.digest" 2>/dev/null)" != "$SRC_DIGEST" ]; then
    t=$(now)
    rm -f "$CTX"/wheel/*.whl
    export_src
    "$VENV_PY" -m pip wheel -q --no-deps -w "$CTX/wheel" "$STATE/src" >"$LOGS/pip-wheel.log" 2>&1 || die "pip wheel (sandboxlite) failed"
    echo "$SRC_DIGEST" >"$CTX/wheel/.digest"
    say "made $(basename "$CTX"/wheel/sandboxlite-*.whl) in $(since "$t") s"
fi

# -- 5. the image ---------------------------------------------------------------------------------------
SL_UID=$(id -u sandboxlite 2>/dev/null || echo 999)   # the same uid as the host's: its images can be bound in
SL_GID=$(id -g sandboxlite 2>/dev/null || echo 999)
cat >"$CTX/Dockerfile.new" <<EOF
# made by tools/container_tier.sh (tier version $TIER_VERSION); FROM the imported lean rootfs: nothing is pulled
FROM $BASE
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
COPY debs/ /tmp/debs/
RUN dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs
RUN groupadd --system --gid $SL_GID sandboxlite \\
 && useradd --system --uid $SL_UID --gid $SL_GID --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sandboxlite \\
 && useradd --uid 1000 --user-group --create-home --shell /bin/bash agent
COPY deps/ /tmp/deps/
RUN python3 -m venv /opt/sandboxlite && /opt/sandboxlite/bin/pip install -q --no-index --no-cache-dir /tmp/deps/*.whl \\
 && rm -rf /tmp/deps
COPY wheel/ /tmp/wheel/
RUN /opt/sandboxlite/bin/pip install -q --no-index --no-cache-dir --no-deps /tmp/wheel/sandboxlite-*.whl && rm -rf /tmp/wheel
ENV PATH=/opt/sandboxlite/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# the executor and the launcher, compiled by sandboxlite as at first use, for root and for agent
RUN python -c "from sandboxlite import executor; print(executor.executor_path(), executor.launcher()[0])"
USER agent
RUN python -c "from sandboxlite import executor; print(executor.executor_path(), executor.launcher()[0])"
USER root
WORKDIR /root
LABEL $LABEL=$TIER_VERSION
EOF
mv "$CTX/Dockerfile.new" "$CTX/Dockerfile"
IMAGE_DIGEST=$( { echo "$TIER_VERSION"; echo "$BASE"; cat "$CTX/debs/.list"; cat "$CTX/deps/.digest"; echo "$SRC_DIGEST"; cat "$CTX/Dockerfile"; } | sha256sum | cut -c1-16)
IMAGE=sandboxlite-tier:$IMAGE_DIGEST
if [ $rebuild = 1 ] || ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    t=$(now)
    say "building $IMAGE (log: $LOGS/build.log)"
    DOCKER_BUILDKIT=0 "$DOCKER" build --network none -t "$IMAGE" "$CTX" >"$LOGS/build.log" 2>&1 \
        || { tail -n 30 "$LOGS/build.log" >&2; die "docker build failed"; }
    say "built $IMAGE in $(since "$t") s"
    # older images of this tier (other inputs, an older lean rootfs) and their dangling layers
    old=$("$DOCKER" image ls --filter "label=$LABEL" --format '{{.Repository}}:{{.Tag}}' \
          | grep -v -x -F -e "$IMAGE" -e "$BASE" | grep -v '<none>' || true)
    [ -z "$old" ] || "$DOCKER" rmi $old >/dev/null 2>&1 || true
    "$DOCKER" image prune -f --filter "label=$LABEL" >/dev/null 2>&1 || true
else
    say "image $IMAGE is up to date"
fi

# -- 6. podman, rootless -----------------------------------------------------------------------------------
PODMAN_USER=${SANDBOXLITE_TIER_PODMAN_USER:-plainuser}
PSTATE=$STATE/podman
PWRAP=$STATE/podman-rootless
PODMAN_IMAGE=localhost/$IMAGE
PLOG=$LOGS/podman.log
podman_error="" podman_note="" PODMAN_VERSION="" P_RUNTIME="" P_DRIVER="" P_UID="" P_HOME=""
pfail() { podman_error="$*"; return 1; }
oneline() { grep -v 'is not a shared mount' | tail -n 3 | tr '\n' ' ' | sed 's/ *$//'; }  # podman's own noise left out

podman_user() {  # the user, with subordinate uids and gids (Debian's useradd gives them; usermod otherwise)
    if ! id -u "$PODMAN_USER" >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] || { pfail "there is no user $PODMAN_USER to run rootless podman as, and making one needs root"; return 1; }
        useradd --create-home --shell /bin/bash "$PODMAN_USER" >>"$PLOG" 2>&1 || { pfail "useradd $PODMAN_USER failed (see $PLOG)"; return 1; }
        say "made the user $PODMAN_USER (rootless podman runs as it)"
    fi
    P_UID=$(id -u "$PODMAN_USER")
    P_HOME=$(getent passwd "$PODMAN_USER" | cut -d: -f6)
    local f start
    for f in subuid subgid; do
        grep -qE "^($PODMAN_USER|$P_UID):" "/etc/$f" 2>/dev/null && continue
        [ "$(id -u)" = 0 ] || { pfail "$PODMAN_USER has no range in /etc/$f (rootless podman needs one), and adding it needs root"; return 1; }
        start=$(cat "/etc/$f" 2>/dev/null | awk -F: 'BEGIN { m = 100000 } NF >= 3 { e = $2 + $3; if (e > m) m = e } END { print m }')
        usermod "--add-sub${f#sub}s" "$start-$((start + 65535))" "$PODMAN_USER" >>"$PLOG" 2>&1 \
            || { pfail "usermod --add-sub${f#sub}s $start-$((start + 65535)) $PODMAN_USER failed (see $PLOG)"; return 1; }
        say "gave $PODMAN_USER the subordinate ${f#sub}s $start-$((start + 65535))"
    done
}

write_wrapper() {  # $1: storage driver, $2: OCI runtime ("": podman's default); written to $PWRAP.new
    local cmd
    cmd=$(printf '%q ' env HOME="$P_HOME" XDG_RUNTIME_DIR="$PRUN/xdg" TMPDIR="$PSTATE/tmp" podman \
          --root "$PSTATE/storage-$1" --runroot "$PRUN/$1" --storage-driver "$1" \
          --cgroup-manager cgroupfs --events-backend file ${2:+--runtime "$2"})
    cat >"$PWRAP.new" <<EOW
#!/bin/sh
# made by tools/container_tier.sh: podman $PODMAN_VERSION, rootless as $PODMAN_USER (uid $P_UID), on the tier's own
# storage ($1, in $PSTATE)${2:+, OCI runtime $2}. E.g.: $PWRAP run --rm --network none $PODMAN_IMAGE id
cd / || exit 1
set -- $cmd"\$@"
[ "\$(id -u)" = $P_UID ] && exec "\$@"
exec runuser -u $PODMAN_USER -- "\$@"
EOW
    chmod 755 "$PWRAP.new"
}

podman_image() {  # the tier's image in this storage (once per image digest)
    "$PWRAP.new" image exists "$PODMAN_IMAGE" 2>/dev/null && return 0
    local t cid rc old changes=()
    t=$(now)
    if [ "$P_DRIVER" = vfs ]; then
        # vfs copies every layer whole: the image flattened to one layer, its settings given again
        mapfile -t changes < <("$DOCKER" image inspect "$IMAGE" --format \
            '{{range .Config.Env}}ENV {{.}}{{"\n"}}{{end}}WORKDIR {{.Config.WorkingDir}}{{"\n"}}USER {{.Config.User}}')
        cid=$("$DOCKER" create --label "$LABEL=export" "$IMAGE" true 2>>"$PLOG") || return 1
        "$DOCKER" export "$cid" | "$PWRAP.new" import --change 'CMD ["/bin/bash"]' --change "LABEL $LABEL=$TIER_VERSION" \
            "${changes[@]/#/--change=}" - "$PODMAN_IMAGE" >>"$PLOG" 2>&1
        rc=$?
        "$DOCKER" rm "$cid" >/dev/null 2>&1 || true
    else
        "$DOCKER" save "$IMAGE" | "$PWRAP.new" load >>"$PLOG" 2>&1
        rc=$?
    fi
    [ $rc = 0 ] || return 1
    say "podman: loaded $PODMAN_IMAGE into $P_DRIVER storage in $(since "$t") s"
    # older images of this tier in this storage, and the layers only they used
    old=$("$PWRAP.new" images --filter "label=$LABEL" --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
          | grep -v -x -F -e "$PODMAN_IMAGE" | grep -v '<none>' || true)
    [ -z "$old" ] || "$PWRAP.new" rmi $old >>"$PLOG" 2>&1 || true
    "$PWRAP.new" image prune -f >>"$PLOG" 2>&1 || true
}

podman_setup() {
    command -v podman >/dev/null 2>&1 || { pfail "podman is not installed (as root this script installs it: bench/setup_docker.sh --podman)"; return 1; }
    command -v newuidmap >/dev/null 2>&1 || { pfail "newuidmap is missing (apt-get install uidmap)"; return 1; }
    [ "$(id -u)" = 0 ] || [ "$(id -un)" = "$PODMAN_USER" ] || { pfail "running podman as $PODMAN_USER needs root (runuser)"; return 1; }
    podman_user || return 1
    PODMAN_VERSION=$(podman --version | awk '{ print $NF }')
    local pgid; pgid=$(id -g "$PODMAN_USER")
    install -d -o "$P_UID" -g "$pgid" -m 755 "$PSTATE"
    install -d -o "$P_UID" -g "$pgid" -m 700 "$PSTATE/tmp" "$PRUN" "$PRUN/xdg"
    install -d -m 755 "$PSTATE/share"  # the tests' probe and profile: root's, readable by the user
    # where /run outlived a restart of the machine: a pause process that is gone
    local pause=$PRUN/xdg/libpod/tmp/pause.pid
    if [ -f "$pause" ] && ! kill -0 "$(cat "$pause")" 2>/dev/null; then rm -f "$pause"; fi
    local driver rt out tried=()
    for driver in ${SANDBOXLITE_TIER_PODMAN_STORAGE:-overlay vfs}; do
        P_DRIVER=$driver
        write_wrapper "$driver" ""
        if ! out=$("$PWRAP.new" info --format '{{.Store.GraphDriverName}}' 2>&1); then
            printf '%s: podman info (%s storage): %s\n' "$(date -Is)" "$driver" "$out" >>"$PLOG"
            tried+=("$driver storage: podman info: $(printf '%s\n' "$out" | oneline);"); continue
        fi
        if ! podman_image; then
            tried+=("$driver storage: loading the image failed: $(oneline <"$PLOG");"); continue
        fi
        for rt in "" runc; do
            [ -z "$rt" ] || command -v "$rt" >/dev/null 2>&1 || continue
            write_wrapper "$driver" "$rt"
            if out=$("$PWRAP.new" run --rm --network none --label "$LABEL" "$PODMAN_IMAGE" true 2>&1); then
                P_RUNTIME=${rt:-default}
                [ ${#tried[@]} = 0 ] || podman_note="not used: ${tried[*]}"
                mv "$PWRAP.new" "$PWRAP"
                # the storage of a driver tried before and no longer used (its files belong to subordinate ids)
                local d
                for d in "$PSTATE"/storage-*; do
                    [ "$d" = "$PSTATE/storage-$driver" ] || [ ! -d "$d" ] || "$PWRAP" unshare rm -rf "$d" >>"$PLOG" 2>&1 || true
                done
                return 0
            fi
            printf '%s: podman run (%s storage, runtime %s): %s\n' "$(date -Is)" "$driver" "${rt:-default}" "$out" >>"$PLOG"
            tried+=("$driver storage, runtime ${rt:-default (crun or runc)}: $(printf '%s\n' "$out" | oneline);")
        done
    done
    rm -f "$PWRAP.new" "$PWRAP"
    pfail "rootless podman (as $PODMAN_USER) cannot start a container: ${tried[*]} (log: $PLOG)"
}
t=$(now) P_CMD=""
if podman_setup; then
    P_CMD=$PWRAP
    say "podman $PODMAN_VERSION rootless as $PODMAN_USER: $P_DRIVER storage, runtime $P_RUNTIME${podman_note:+ ($podman_note)}; $(since "$t") s"
else
    echo "container_tier: podman: error: $podman_error" >&2
fi

cat >"$STATE/env" <<EOF
DOCKER=$DOCKER
DOCKER_SERVER=$SERVER
IMAGE=$IMAGE
BASE_IMAGE=$BASE
LEAN_DIR=$LEAN
SL_UID=$SL_UID
LOGS=$LOGS
PODMAN=$P_CMD
PODMAN_VERSION=$PODMAN_VERSION
PODMAN_USER=$PODMAN_USER
PODMAN_IMAGE=$PODMAN_IMAGE
PODMAN_STORAGE=$P_DRIVER
PODMAN_RUNTIME=$P_RUNTIME
PODMAN_NOTE=$podman_note
PODMAN_SHARE=$PSTATE/share
PODMAN_ERROR=$podman_error
EOF
say "ready in $(since "$T0") s: image $IMAGE; logs in $LOGS; settings in $STATE/env"
echo "IMAGE=$IMAGE"
[ -z "$podman_error" ] || exit 3
