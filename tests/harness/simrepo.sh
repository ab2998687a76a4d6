#!/usr/bin/env bash
# The simulated NVIDIA apt repositories: built from molecule/simulator/packages (rebuilt only when
# their inputs change) and served over HTTP on 127.0.0.1, so roles take the same get_url/deb822 path
# they take against NVIDIA's real repositories. Usage: simrepo.sh start|stop|url
set -euo pipefail
. "$(dirname "$0")/common.sh"

OUT="$CACHE_DIR/simrepo"
PIDFILE="$HARNESS_RUN/simrepo.pid"
PORTFILE="$HARNESS_RUN/simrepo.port"
DIRFILE="$HARNESS_RUN/simrepo.dir"

# Serving, and serving this checkout's repo (another clone's repo has another signing key).
serving() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ -f "$PORTFILE" ] \
    && [ "$(cat "$DIRFILE" 2>/dev/null)" = "$OUT" ]
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  mkdir -p "$HARNESS_RUN"
  if serving; then
    port="$(cat "$PORTFILE")"
  else
    stop
    port="$(free_port)"
  fi
  python3 "$REPO_ROOT/molecule/simulator/packages/build_repo.py" --out "$OUT" --base-url "http://127.0.0.1:$port" >&2
  if serving; then log "simulated repo served at http://127.0.0.1:$port"; return 0; fi
  # The server outlives this run: it must not keep the caller's descriptors (a lock held around `make
  # molecule` would stay held as long as it serves).
  (
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec nohup python3 -m http.server --bind 127.0.0.1 --directory "$OUT" "$port" >"$HARNESS_RUN/simrepo.log" 2>&1
  ) &
  echo $! > "$PIDFILE"
  echo "$port" > "$PORTFILE"
  echo "$OUT" > "$DIRFILE"
  for _ in $(seq 1 40); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" 2>/dev/null; then
      log "simulated repo served at http://127.0.0.1:$port"; return 0
    fi
    sleep 0.25
  done
  die "simulated repo server did not come up (log: $HARNESS_RUN/simrepo.log)"
}

stop() {
  if [ -f "$PIDFILE" ]; then kill "$(cat "$PIDFILE")" 2>/dev/null || true; fi; rm -f "$PIDFILE" "$PORTFILE" "$DIRFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) serving && echo "http://127.0.0.1:$(cat "$PORTFILE")" ;;
  *) die "usage: $0 start|stop|url" ;;
esac
