#!/bin/sh
# Opt-in: Docker (and runc) for the baselines of `sandboxlite bench`.
#
#   sudo bench/setup_docker.sh            # install docker.io from Debian apt if missing, start dockerd
#   sudo bench/setup_docker.sh --podman   # the same, and install podman too (and uidmap, for rootless podman)
#   sudo bench/setup_docker.sh --stop     # remove the bench's containers, stop the dockerd started here
#
# There is no systemd on the machines this targets (CI VMs, containers), so dockerd is started by
# hand: no iptables rules, no default bridge (the benchmark runs containers with --network none),
# its log in $LOG, its pid in $PIDFILE. `--stop` only stops a dockerd that this script started.
# The bench imports the rootfs image itself (`docker import`, cached by the image's digest).
set -eu

LOG=${SANDBOXLITE_DOCKERD_LOG:-/var/log/sandboxlite-bench-dockerd.log}
PIDFILE=${SANDBOXLITE_DOCKERD_PIDFILE:-/run/sandboxlite-bench-dockerd.pid}
LABEL=sandboxlite-bench

die() { echo "setup_docker: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (sudo $0 $*)"

daemon_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

stop() {
    if daemon_up; then
        ids=$(docker ps -aq --filter "label=$LABEL" 2>/dev/null || true)
        [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
    fi
    if [ -f "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            i=0
            while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
            kill -0 "$pid" 2>/dev/null && die "dockerd (pid $pid) did not stop within 30 s"
        fi
        rm -f "$PIDFILE"
        echo "setup_docker: dockerd stopped"
    else
        echo "setup_docker: no dockerd started by this script ($PIDFILE missing)"
    fi
}

podman=0
case "${1:-}" in
    --stop) stop; exit 0 ;;
    --podman) podman=1 ;;
    "") ;;
    *) die "unknown option $1 (use --podman or --stop)" ;;
esac

pkgs=""
command -v dockerd >/dev/null 2>&1 || pkgs="docker.io"
[ $podman = 0 ] || command -v podman >/dev/null 2>&1 || pkgs="$pkgs podman"
# newuidmap/newgidmap: rootless podman maps the user's subordinate ids with them (only Recommended by podman)
[ $podman = 0 ] || command -v newuidmap >/dev/null 2>&1 || pkgs="$pkgs uidmap"
if [ -n "$pkgs" ]; then
    echo "setup_docker: apt-get install $pkgs"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi

if daemon_up; then
    echo "setup_docker: a Docker daemon is already running: $(docker version --format '{{.Server.Version}}')"
    exit 0
fi
[ -w /sys/fs/cgroup ] || echo "setup_docker: warning: /sys/fs/cgroup is not writable; dockerd may fail" >&2
echo "setup_docker: starting dockerd (log: $LOG)"
# setsid: not in this shell's session or process group, so it outlives the caller
setsid dockerd --iptables=false --ip-masq=false --bridge=none --pidfile "$PIDFILE" >"$LOG" 2>&1 </dev/null &
i=0
until daemon_up; do
    i=$((i + 1))
    if [ $i -gt 150 ]; then
        tail -n 20 "$LOG" >&2
        die "dockerd did not answer within 30 s (log above)"
    fi
    sleep 0.2
done
echo "setup_docker: dockerd $(docker version --format '{{.Server.Version}}') is up ($(docker info --format '{{.Driver}}') storage); stop it with: $0 --stop"
