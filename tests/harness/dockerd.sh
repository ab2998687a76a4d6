#!/usr/bin/env bash
# Private dockerd for molecule: own socket, data-root, exec-root and containerd namespace;
# no bridge, no iptables, so it adds no docker0, no NAT rule and no route on the machine.
# Usage: dockerd.sh start|stop|status
set -euo pipefail
. "$(dirname "$0")/common.sh"

PIDFILE="$HARNESS_RUN/dockerd.pid"
CONFIG="$HARNESS_RUN/daemon.json"
LOGFILE="$HARNESS_ROOT/dockerd.log"

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && docker version >/dev/null 2>&1
}

start() {
  if running; then log "private dockerd already running ($HARNESS_SOCK)"; return 0; fi
  command -v dockerd >/dev/null || die "dockerd not found: run 'make sysdeps' as root (installs docker.io)"
  mkdir -p "$HARNESS_RUN" "$HARNESS_ROOT/docker"
  # A config file of our own, so the machine's /etc/docker/daemon.json is neither read nor needed.
  cat > "$CONFIG" <<JSON
{"bridge": "none", "iptables": false, "ip6tables": false, "ip-forward": false,
 "ip-masq": false, "storage-driver": "overlay2", "userland-proxy": false,
 "cgroup-parent": "/gpuhost-harness"}
JSON
  rm -f "$HARNESS_SOCK" "$PIDFILE"
  nohup dockerd --config-file "$CONFIG" \
    --host "unix://$HARNESS_SOCK" --data-root "$HARNESS_ROOT/docker" \
    --exec-root "$HARNESS_RUN/exec" --pidfile "$PIDFILE" \
    --containerd-namespace gpuhost-harness --containerd-plugins-namespace gpuhost-harness-plugins \
    >"$LOGFILE" 2>&1 &
  for _ in $(seq 1 60); do
    if running; then log "private dockerd up ($HARNESS_SOCK)"; return 0; fi
    sleep 0.5
  done
  tail -n 30 "$LOGFILE" >&2 || true
  die "private dockerd did not start (log: $LOGFILE)"
}

stop() {
  if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    rm -f "$PIDFILE"
  fi
  log "private dockerd stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo running; else echo stopped; exit 1; fi ;;
  *) die "usage: $0 start|stop|status" ;;
esac
