#!/usr/bin/env bash
# System packages the harness needs on the control machine. Installs with apt when run as root;
# otherwise names what is missing and how to get it.
set -euo pipefail
. "$(dirname "$0")/common.sh"

# command -> Debian package that provides it
declare -A NEED=(
  [dockerd]=docker.io [debootstrap]=debootstrap [apt-ftparchive]=apt-utils
  [gpg]=gnupg [gpgv]=gpgv [dpkg-deb]=dpkg [ip]=iproute2 [iptables]=iptables
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && { log "system packages present"; exit 0; }

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  die "missing system packages: ${missing[*]} — run 'sudo apt-get install ${missing[*]}' or 'sudo make sysdeps'"
fi
log "installing ${missing[*]}"
# Keep the package's own dockerd from starting: on a host whose init honours policy-rc.d it would come
# up with a docker0 bridge and NAT rules. The harness runs a private dockerd instead.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; created_policy=1
fi
trap '[ $created_policy -eq 1 ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
