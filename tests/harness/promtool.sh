#!/usr/bin/env bash
# promtool, Prometheus' rule and metrics checker, for the lint tests (tests/lint/test_prometheus.py): taken
# out of Debian's `prometheus` package from the machine's own apt sources into .cache/tools/, never installed
# (installing the package would start a Prometheus server on the machine). Prints the binary's path.
set -euo pipefail
. "$(dirname "$0")/common.sh"

TOOL="$CACHE_DIR/tools/promtool"
if [ -x "$TOOL" ] && "$TOOL" --version >/dev/null 2>&1; then
  echo "$TOOL"; exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"   # apt's _apt user writes the download here
fetch() { (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); }
if ! fetch; then
  # A machine whose package lists were never read (or are stale) knows no `prometheus` yet.
  [ "$(id -u)" -eq 0 ] || die "promtool: 'apt-get download prometheus' failed; run 'sudo apt-get update' and retry"
  apt-get update -qq
  fetch || die "promtool: 'apt-get download prometheus' failed: is Debian's main archive in the apt sources?"
fi
dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/promtool
mkdir -p "$(dirname "$TOOL")"
install -m 0755 "$work/usr/bin/promtool" "$TOOL.new"
mv -f "$TOOL.new" "$TOOL"
log "promtool from $(basename "$work"/prometheus_*.deb)"
echo "$TOOL"
