#!/usr/bin/env bash
# The image `docker run --gpus` checks use inside a target: built offline from the bookworm base image
# (it has python3, which the simulated nvidia-smi the hook injects needs), saved as a tarball that
# scenarios copy into a target and `docker load` (the target has no registry either). It also carries
# the stand-in for NVIDIA's vectorAdd CUDA sample at the sample image's path (/cuda-samples/vectorAdd),
# the CUDA probe of the stack check.
set -euo pipefail
. "$(dirname "$0")/common.sh"

NAME="local/gpuhost-cuda-check:1"
TARBALL="$CACHE_DIR/images/gpuhost-cuda-check.tar"
CONTEXT="$(cd "$(dirname "$0")/../../molecule/simulator/images/cuda-check" && pwd)"
base_id="$(docker image inspect -f '{{.Id}}' local/debian:bookworm-systemd) $(cat "$CONTEXT"/* | sha256sum | cut -c1-16)"
stamp="$TARBALL.base"
if [ -f "$TARBALL" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$base_id" ]; then
  log "$NAME is current"; exit 0
fi
mkdir -p "$(dirname "$TARBALL")"
# A plain process image, not a systemd one: the check runs one command and exits.
printf 'FROM local/debian:bookworm-systemd\nSTOPSIGNAL SIGTERM\nENV container=\nCOPY vectorAdd /cuda-samples/vectorAdd\nCMD ["/bin/sh"]\n' \
  | docker build -q -t "$NAME" -f - "$CONTEXT" >/dev/null
docker save -o "$TARBALL.tmp" "$NAME"
mv "$TARBALL.tmp" "$TARBALL"
echo "$base_id" > "$stamp"
log "saved $NAME to $TARBALL ($(du -h "$TARBALL" | cut -f1))"
