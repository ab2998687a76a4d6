#!/usr/bin/env bash
# make demo: provision one simulated GPU host with site.yml and print its layer report.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cd "$REPO_ROOT"
trap '"$REPO_ROOT/tests/harness/cleanup.sh"' EXIT INT TERM
log "provisioning the simulated GPU host 'gpuhost-demo' with site.yml (a few minutes)"
out="$(mktemp)"
if ! molecule test -s demo >"$out" 2>&1; then
  tail -n 80 "$out" >&2
  rm -f "$out"
  die "the demo failed; the log tail is above"
fi
log "layer report of gpuhost-demo:"
sed -n '/TASK \[Print the layer report\]/,/PLAY RECAP/p' "$out" | grep -v -e '^PLAY RECAP' -e '^TASK'
rm -f "$out"
