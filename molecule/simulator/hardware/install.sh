#!/bin/sh
# Lay the simulated GPU hardware down on a molecule target (run ON the target, as root, before any
# product role). One entry point:
#
#   install.sh --gpus MODEL[,MODEL...] [--branches 570,580] [--bus 17,31] [--driver VER[:open|proprietary]]
#              [--nvswitches N] [--src DIR] [--no-boot] [--keep-state]
#
#   --gpus      catalogue keys: rtx-pro-6000-bse, h100, h200, l4, a100-80gb, rtx-4090 (gpusim/catalogue.py)
#   --branches  NVIDIA driver branches the (simulated) apt repo offers; ubuntu-drivers lists these
#   --bus       PCI buses of the GPUs (hex), default 17,31,4b,...
#   --driver    pre-install a driver in the state (default: none — a fresh host)
#   --nvswitches  NVSwitch functions of an HGX board (H100/H200: 4; default none)
#   --src       the molecule/simulator directory copied to the target (default: this script's ../)
#   --no-boot   do not run gpusim-boot now (it runs at the next boot anyway)
#   --keep-state  keep an existing /var/lib/gpu-sim/state.json (re-run of prepare)
#   --root DIR  install under DIR instead of / (unit tests; no systemctl, no mount/mknod)
#
# Puts: /usr/lib/gpu-sim/gpusim/ (library), /usr/local/sbin/lspci, /usr/local/sbin/modprobe, /usr/local/sbin/gpusim-boot,
# /usr/local/bin/gpusim, /etc/systemd/system/gpusim-boot.service (enabled), /var/lib/gpu-sim/state.json,
# /usr/lib/systemd/system-generators/gpusim-daemon-reload (gpusim/reload.py).
# Idempotent. Prints "changed" on its last line when it changed anything, "ok" otherwise.
set -eu

SRC=$(cd "$(dirname "$0")/.." && pwd)
GPUS=""
BRANCHES=""
BUS=""
DRIVER=""
NVSWITCHES=""
BOOT=1
KEEP=0
ROOT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) GPUS=$2; shift 2 ;;
        --gpus=*) GPUS=${1#*=}; shift ;;
        --branches) BRANCHES=$2; shift 2 ;;
        --branches=*) BRANCHES=${1#*=}; shift ;;
        --bus) BUS=$2; shift 2 ;;
        --bus=*) BUS=${1#*=}; shift ;;
        --driver) DRIVER=$2; shift 2 ;;
        --driver=*) DRIVER=${1#*=}; shift ;;
        --nvswitches) NVSWITCHES=$2; shift 2 ;;
        --nvswitches=*) NVSWITCHES=${1#*=}; shift ;;
        --src) SRC=$2; shift 2 ;;
        --src=*) SRC=${1#*=}; shift ;;
        --no-boot) BOOT=0; shift ;;
        --keep-state) KEEP=1; shift ;;
        --root) ROOT=$2; shift 2 ;;
        --root=*) ROOT=${1#*=}; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -n "$GPUS" ] || { echo "install.sh: --gpus is required" >&2; exit 2; }
[ -d "$SRC/gpusim" ] || { echo "install.sh: no gpusim package under $SRC" >&2; exit 2; }

LIB=$ROOT/usr/lib/gpu-sim
STATE=$ROOT${GPUSIM_STATE:-/var/lib/gpu-sim/state.json}
SYSD=$ROOT/etc/systemd/system
changed=0
stamp() { [ -e "$1" ] && md5sum "$1" 2>/dev/null | cut -d' ' -f1; }

put() {  # put SRC DEST MODE
    before=$(stamp "$2" || true)
    install -D -m "$3" "$1" "$2"
    [ "$before" = "$(stamp "$2")" ] || changed=1
}

mkdir -p "$LIB/gpusim/templates"
for f in "$SRC"/gpusim/*.py; do put "$f" "$LIB/gpusim/$(basename "$f")" 0644; done
for f in "$SRC"/gpusim/templates/*; do put "$f" "$LIB/gpusim/templates/$(basename "$f")" 0644; done
# the thin executables the packages install at the NVIDIA paths, kept here for them to copy
for f in "$SRC"/bin/*; do put "$f" "$LIB/bin/$(basename "$f")" 0755; done
put "$SRC/bin/lspci" "$ROOT/usr/local/sbin/lspci" 0755
# modprobe for the NVIDIA modules (gpusim/kmod.py), ahead of kmod's on root's PATH; other modules go to kmod's
put "$SRC/bin/modprobe" "$ROOT/usr/local/sbin/modprobe" 0755
put "$SRC/bin/gpusim-boot" "$ROOT/usr/local/sbin/gpusim-boot" 0755
put "$SRC/bin/gpusim" "$ROOT/usr/local/bin/gpusim" 0755
put "$SRC/units/gpusim-boot.service" "$SYSD/gpusim-boot.service" 0644
put "$SRC/units/gpusim-daemon-reload.generator" "$ROOT/usr/lib/systemd/system-generators/gpusim-daemon-reload" 0755
mkdir -p "$SYSD/sysinit.target.wants"
if [ "$(readlink "$SYSD/sysinit.target.wants/gpusim-boot.service" 2>/dev/null)" != /etc/systemd/system/gpusim-boot.service ]; then
    ln -sf /etc/systemd/system/gpusim-boot.service "$SYSD/sysinit.target.wants/gpusim-boot.service"
    changed=1
fi
SYSTEMD=0
if [ -z "$ROOT" ] && [ -d /run/systemd/system ]; then SYSTEMD=1; systemctl daemon-reload || true; fi

if [ "$KEEP" = 0 ] || [ ! -e "$STATE" ]; then
    set -- init --gpus "$GPUS"
    [ -z "$BRANCHES" ] || set -- "$@" --branches "$BRANCHES"
    [ -z "$BUS" ] || set -- "$@" --bus "$BUS"
    [ -z "$DRIVER" ] || set -- "$@" --driver "$DRIVER"
    [ -z "$NVSWITCHES" ] || set -- "$@" --nvswitches "$NVSWITCHES"
    GPUSIM_STATE=$STATE python3 "$SRC/bin/gpusim" "$@"
    changed=1
fi
if [ "$BOOT" = 1 ]; then
    if [ "$SYSTEMD" = 1 ]; then
        systemctl restart gpusim-boot.service
    else
        GPUSIM_STATE=$STATE python3 "$SRC/bin/gpusim-boot" --root="${ROOT:-/}"
    fi
fi
if [ "$changed" = 1 ]; then echo changed; else echo ok; fi
