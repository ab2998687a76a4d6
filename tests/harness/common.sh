# Shared settings of the test harness. Sourced, never run.
# Everything the harness owns lives under these paths, so it never touches a dockerd of the machine's own.
HARNESS_ROOT="${HARNESS_ROOT:-/var/lib/gpuhost-harness}"
HARNESS_RUN="${HARNESS_RUN:-/run/gpuhost-harness}"
HARNESS_SOCK="$HARNESS_RUN/docker.sock"
export DOCKER_HOST="unix://$HARNESS_SOCK"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE_DIR="$REPO_ROOT/.cache"
# Molecule targets carry this label so cleanup finds exactly the harness's containers.
HARNESS_LABEL="gpuhost.harness=1"

log() { printf '[harness] %s\n' "$*" >&2; }
die() { printf '[harness] ERROR: %s\n' "$*" >&2; exit 1; }
