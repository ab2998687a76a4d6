#!/usr/bin/env bash
# Base images for molecule targets, built with debootstrap from this machine's own apt mirror
# (read from its apt sources at run time: no registry host name lives in the repo).
# An image is rebuilt only when its recipe (this file) changes: the recipe hash is an image label.
# Usage: images.sh [bookworm] [trixie]     (default: both)
set -euo pipefail
. "$(dirname "$0")/common.sh"

RECIPE_HASH="$(sha256sum "$0" | cut -c1-16)"
# sudo: the product becomes root as it does on real hosts.
PACKAGES="python3,systemd,systemd-sysv,dbus,procps,sudo,ca-certificates,gnupg,apt-transport-https"

# First URI in the machine's apt sources for the main archive / the security archive.
mirror_uri() {
  local want="$1" uri=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    uri="$(awk -v want="$want" '
      BEGIN { RS=""; FS="\n" }
      { u=""; s="";
        for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/,"",$i); split($i,a," "); u=a[1] }
                              if ($i ~ /^Suites:/) s=$i }
        sec = (s ~ /-security/)
        if (u != "" && ((want=="security") == sec)) { print u; exit } }' /etc/apt/sources.list.d/*.sources)"
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri="$(awk -v want="$want" '$1=="deb" { u=$2; if ($2 ~ /^\[/) u=$3; s=$0;
             sec=(s ~ /-security/); if ((want=="security")==sec) { print u; exit } }' /etc/apt/sources.list)"
  fi
  printf '%s' "$uri"
}

build_one() {
  local suite="$1" name="local/debian:$1-systemd"
  if [ "$(docker image inspect -f '{{ index .Config.Labels "gpuhost.recipe" }}' "$name" 2>/dev/null || true)" = "$RECIPE_HASH" ]; then
    log "$name is current (recipe $RECIPE_HASH)"; return 0
  fi
  local mirror security
  mirror="$(mirror_uri main)"; security="$(mirror_uri security)"
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list(.d)"
  [ -n "$security" ] || security="${mirror%/debian}/debian-security"
  command -v debootstrap >/dev/null || die "debootstrap not found: run 'make sysdeps' as root"
  local dir; dir="$(mktemp -d "${TMPDIR:-/tmp}/gpuhost-rootfs-$suite.XXXXXX")"
  trap 'rm -rf "$dir"' RETURN
  log "debootstrap $suite from the machine's mirror (about a minute)"
  debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$dir" "$mirror" >"$dir.log" 2>&1 \
    || { tail -n 20 "$dir.log" >&2; rm -f "$dir.log"; die "debootstrap $suite failed"; }
  rm -f "$dir.log"
  cat > "$dir/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  rm -f "$dir/etc/apt/sources.list"
  : > "$dir/etc/machine-id"
  rm -f "$dir/etc/systemd/system/getty.target.wants/getty@tty1.service" \
        "$dir"/etc/systemd/system/timers.target.wants/apt-daily*.timer
  # No docs or man pages: smaller image, faster apt in every scenario.
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
    > "$dir/etc/dpkg/dpkg.cfg.d/01-nodoc"
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import \
      --change 'ENV container=docker' --change 'CMD ["/lib/systemd/systemd"]' - "$name-import" >/dev/null
  # import cannot set STOPSIGNAL or labels; an offline one-line build can.
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL gpuhost.recipe=%s\n' "$name-import" "$RECIPE_HASH" \
    | docker build -q -t "$name" - >/dev/null
  docker rmi "$name-import" >/dev/null
  log "built $name (recipe $RECIPE_HASH)"
}

suites=("$@"); [ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)
for s in "${suites[@]}"; do build_one "$s"; done
