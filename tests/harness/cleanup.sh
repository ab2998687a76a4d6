#!/usr/bin/env bash
# Remove every molecule target of the harness (also after a failure or an interrupt) and the empty
# cgroup directories force-killed targets leave behind. Touches only the private dockerd.
set -uo pipefail
. "$(dirname "$0")/common.sh"

if docker version >/dev/null 2>&1; then
  ids="$(docker ps -aq --filter "label=$HARNESS_LABEL")"
  if [ -n "$ids" ]; then
    log "removing harness containers: $(echo $ids)"
    # systemd ignores SIGTERM; docker stop sends the image's STOPSIGNAL (SIGRTMIN+3).
    docker stop -t 10 $ids >/dev/null 2>&1 || true
    docker rm -f -v $ids >/dev/null 2>&1 || true
  fi
  running="$(docker ps -q --no-trunc)"
else
  running=""
fi
# rmdir only removes empty cgroups, so a live container (ours or the machine's) is never affected.
for dir in /sys/fs/cgroup/*/docker/* /sys/fs/cgroup/*/gpuhost-harness/* /sys/fs/cgroup/docker/* /sys/fs/cgroup/gpuhost-harness/*; do
  [ -d "$dir" ] || continue
  id="$(basename "$dir")"
  case "$running" in *"$id"*) continue ;; esac
  find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
done
exit 0
