"""MIG (Multi-Instance GPU) for the simulated nvidia-smi: GPU-instance profiles per model, the instances in the
state, `nvidia-smi mig -lgip/-lgipp/-lgi/-lci/-cgi [-C]/-dgi/-cci/-dci`, `-mig 0|1` with its pending states,
`--gpu-reset`, and what a boot does to MIG.

Sources (docs/research/mig.md, tests/fixtures/mig/README.md, corpus nvidia_smi/ 002, 003, 010, 028, 039, 068-070):
- profiles: the real `nvidia-smi mig -lgip` rows: H100 80GB HBM3 (research §1, fixture
  lgip_H100-80GB-HBM3_all-free.txt), A100-SXM4-80GB (research §1, third-party doc; the 1g.20gb row (ID 15) is not
  in that capture: its values are 039's 1g.20gb MIG device (14 SMs, 19968 MiB, CE 1, DEC 1) and the A100-40GB
  guide's ID 15 row for the counts), H200 (mig-parted#120), RTX PRO 6000 Blackwell Server Edition (cubecos#312:
  only the three complete 1g.24gb rows; placements {0,1,2,3}:1 derived from "max 4 instances", not captured).
  Memory is kept in MiB (GiB x 1024: 002/003 show 9984, 20096, 40448 MiB for the 9.75, 19.62, 39.50 GiB profiles).
- placements (`-lgipp`): fixtures lgipp_H100-80GB-HBM3.txt / lgipp_A100-SXM4-40GB_nvidia-guide.txt.
- GPU-instance ids: fixed per placement, 0 for 0:8, 1-2 for the halves, 3-6 for the quarters, 7-14 for the
  eighths (research §2: seven 1g.10gb on an H100 are IDs 7..13 at 0:1..6:1; 002/010: 3g 2, 2g 3, 1g 9 and 10;
  A30 070: IDs 3..6 at 0:1..3:1). Where NVML puts an instance when -cgi names no placement: the free placement
  that spoils the fewest larger placements, lowest start on a tie -- that reproduces the real order of research
  §2 (13, 11, 12, 7, 8, 9, 10 for seven 1g; the guide's Insufficient Resources for 19,19,14,9).
- texts: research §2 and §3, verbatim; exit codes of the `mig` errors are NOT FOUND in captures: they follow
  nvidia-smi(1)'s RETURN VALUE (6 not found, 2 invalid argument, 4 no permission, 255 other error: In use,
  Insufficient Resources; mig-parted#181 shows exit status 255 for a failed --gpu-reset).
"""
import os
import stat as _stat

from .cliargs import Options

# ----- profiles -------------------------------------------------------------------------------------------------
# (id, name, total, mib, sm, dec, enc, ce, jpeg, ofa, starts, size)
_SLOTS8 = {1: list(range(7)), 2: [0, 2, 4], 4: [0, 4], 8: [0]}


def _p(pid, name, total, mib, sm, dec, enc, ce, jpeg, ofa, starts, size):
    return {"id": pid, "name": name, "total": total, "mib": mib, "sm": sm, "dec": dec, "enc": enc, "ce": ce,
            "jpeg": jpeg, "ofa": ofa, "starts": list(starts), "size": size,
            "slices": int(name.split("g.")[0])}


MODELS = {
    # research §1, fixture lgip_H100-80GB-HBM3_all-free.txt / lgipp_H100-80GB-HBM3.txt
    "h100": {"frame": 77, "slots": 8, "compute": 7, "bar1_slot": 6184.75, "gi_overhead": (8, 1), "profiles": [
        _p(19, "1g.10gb", 7, 9984, 16, 1, 0, 1, 1, 0, range(7), 1),
        _p(20, "1g.10gb+me", 1, 9984, 16, 1, 0, 1, 1, 1, range(7), 1),
        _p(15, "1g.20gb", 4, 20096, 26, 1, 0, 1, 1, 0, [0, 2, 4, 6], 2),
        _p(14, "2g.20gb", 3, 20096, 32, 2, 0, 2, 2, 0, [0, 2, 4], 2),
        _p(9, "3g.40gb", 2, 40448, 60, 3, 0, 3, 3, 0, [0, 4], 4),
        _p(5, "4g.40gb", 1, 40448, 64, 4, 0, 4, 4, 0, [0], 4),
        _p(0, "7g.80gb", 1, 81152, 132, 7, 0, 8, 7, 1, [0], 8)]},
    # research §1 (NVIDIA/mig-parted#120)
    "h200": {"frame": 77, "slots": 8, "compute": 7, "bar1_slot": 14809.25, "gi_overhead": (8, 1), "profiles": [
        _p(19, "1g.18gb", 7, 16384, 16, 1, 0, 1, 1, 0, range(7), 1),
        _p(20, "1g.18gb+me", 1, 16384, 16, 1, 0, 1, 1, 1, range(7), 1),
        _p(15, "1g.35gb", 4, 33024, 26, 1, 0, 1, 1, 0, [0, 2, 4, 6], 2),
        _p(14, "2g.35gb", 3, 33024, 32, 2, 0, 2, 2, 0, [0, 2, 4], 2),
        _p(9, "3g.71gb", 2, 71168, 60, 3, 0, 3, 3, 0, [0, 4], 4),
        _p(5, "4g.71gb", 1, 71168, 64, 4, 0, 4, 4, 0, [0], 4),
        _p(0, "7g.141gb", 1, 143104, 132, 7, 0, 8, 7, 1, [0], 8)]},
    # research §1 (A100 80GB third-party doc) + 039 for 1g.20gb
    "a100-80gb": {"frame": 77, "slots": 8, "compute": 7, "bar1_slot": 16383.5, "gi_overhead": (6, 0), "profiles": [
        _p(19, "1g.10gb", 7, 9728, 14, 0, 0, 1, 0, 0, range(7), 1),
        _p(20, "1g.10gb+me", 1, 9728, 14, 1, 0, 1, 1, 1, range(7), 1),
        _p(15, "1g.20gb", 4, 19968, 14, 1, 0, 1, 0, 0, [0, 2, 4, 6], 2),
        _p(14, "2g.20gb", 3, 19968, 28, 1, 0, 2, 0, 0, [0, 2, 4], 2),
        _p(9, "3g.40gb", 2, 40192, 42, 2, 0, 3, 0, 0, [0, 4], 4),
        _p(5, "4g.40gb", 1, 40192, 56, 2, 0, 4, 0, 0, [0], 4),
        _p(0, "7g.80gb", 1, 80896, 98, 5, 0, 7, 1, 1, [0], 8)]},
    # research §1 / §7 (cubecos#312; only the three complete rows; 4 slots, max 4 instances)
    "rtx-pro-6000-bse": {"frame": 79, "slots": 4, "compute": 4, "bar1_slot": None, "gi_overhead": (8, 1),
                         "profiles": [
        _p(14, "1g.24gb", 4, 23680, 46, 1, 1, 1, 1, 0, range(4), 1),
        _p(21, "1g.24gb+me", 1, 23680, 46, 1, 1, 1, 1, 1, range(4), 1),
        _p(47, "1g.24gb+gfx", 4, 23680, 46, 1, 1, 1, 1, 0, range(4), 1)]},
}

# CI profile id by compute slices (NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0 ... 7_SLICE = 4, 8_SLICE = 5,
# 6_SLICE = 6): research §2 (a 3g GI's full CI is profile 2, a 1g GI's 0; fixture lci 1c partial CI is 0).
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
SLICES_BY_CI_PROFILE = {v: k for k, v in CI_PROFILE_BY_SLICES.items()}

RC_OK, RC_INVALID, RC_NOPERM, RC_NOTFOUND, RC_OTHER = 0, 2, 4, 6, 255
IN_USE = "In use by another client"


def model_mig(gpu):
    return MODELS.get(_resolve(gpu.get("model")))


def _resolve(key):
    from . import catalogue
    try:
        return catalogue.resolve(key or "")
    except KeyError:
        return key


def is_ampere(gpu):
    from . import catalogue
    try:
        return catalogue.get(gpu["model"])["architecture"] == "Ampere"
    except KeyError:
        return False


def profile_by_id(gpu, pid):
    for p in (model_mig(gpu) or {}).get("profiles", []):
        if p["id"] == pid:
            return p
    return None


def find_profile(gpu, token):
    """A -cgi / -lgip token: an id, a name (`3g.40gb`, `MIG 3g.40gb`); None when the GPU has no such profile."""
    t = token.strip()
    if t.isdigit():
        return profile_by_id(gpu, int(t))
    name = t.lower()
    for prefix in ("mig ", "mig-"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    for p in (model_mig(gpu) or {}).get("profiles", []):
        if p["name"] == name:
            return p
    return None


def gi_id_for(start, size, slots=8):
    """GPU-instance id of a placement (the heap numbering of the memory slots: 0:8 -> 0, 0:4 -> 1, 4:4 -> 2,
    0:2 -> 3, ..., 0:1 -> 7, ..., 6:1 -> 13; on a 4-slot GPU 0:4 -> 0, 0:2 -> 1, 0:1 -> 3 as the A30's 070)."""
    return (slots // size) - 1 + start // size


def instances(gpu):
    return gpu.setdefault("mig_instances", []) if isinstance(gpu, dict) else []


def pending(gpu):
    p = gpu.get("mig_pending")
    return bool(gpu.get("mig_mode")) if p is None else bool(p)


def mig_uuid(gpu_uuid, gi, ci):
    """A MIG device's UUID: version-5 UUIDs as the real ones (`MIG-feb88891-0321-5fef-...`, 068), stable for the
    same GPU / GI / CI."""
    import uuid as _uuid  # pylint: disable=import-outside-toplevel  # only where a MIG UUID is made
    return "MIG-" + str(_uuid.uuid5(_uuid.NAMESPACE_OID, "%s/%d/%d" % (gpu_uuid, gi, ci)))


# ----- capability device nodes ---------------------------------------------------------------------------------
# /dev/nvidia-caps/nvidia-cap<N> guard each GPU / compute instance (toolkit internal/nvcaps: research §5). NVML has
# nvidia-modprobe make them when instances are created; the container toolkit injects a MIG device's two. Major:
# dynamic on a real host ("nvidia-caps" in /proc/devices); mode 0444 (the capability's DeviceFileMode 292).
CAPS_MAJOR = 236


def caps_dir():
    return os.environ.get("GPUSIM_CAPS_DIR") or "/dev/nvidia-caps"


def cap_minors(gpu, gi, ci):
    """Minors for `gpu<minor>/gi<gi>/access` and `.../ci<ci>/access` in the driver's mig-minors layout (config 1,
    monitor 2, then per GPU 15 GIs of one access cap + 8 CI caps). Recalled, not from a capture (DESIGN.md, MIG)."""
    base = 3 + int(gpu.get("minor", gpu.get("index", 0))) * 15 * 9 + gi * 9
    return base, base + 1 + ci


def _reachable(gpu, gi, ci):
    """Where a /dev/nvidia-caps directory exists (a booted simulated host, or a container given MIG devices
    through CDI) a MIG device is reachable only through its two capability nodes, as for NVML."""
    d = caps_dir()
    if not os.path.isdir(d):
        return True
    return all(os.path.exists(os.path.join(d, "nvidia-cap%d" % m)) for m in cap_minors(gpu, gi, ci))


def make_cap_nodes(state):
    """On a booted simulated host (root, /proc/driver/nvidia there): the capability nodes of every MIG device, as
    nvidia-modprobe makes them for NVML. A no-op elsewhere (unit tests, containers)."""
    if os.geteuid() != 0 or not os.path.isdir("/proc/driver/nvidia") or os.environ.get("GPUSIM_CAPS_DIR"):
        return []
    made = []
    d = caps_dir()
    os.makedirs(d, exist_ok=True)
    for gpu in state.get("gpus", []):
        for gi in gpu.get("mig_instances") or []:
            for ci in gi.get("cis") or []:
                for m in cap_minors(gpu, gi["id"], ci["id"]):
                    path = os.path.join(d, "nvidia-cap%d" % m)
                    if not os.path.exists(path):
                        try:
                            os.mknod(path, _stat.S_IFCHR | 0o444, os.makedev(CAPS_MAJOR, m))
                            os.chmod(path, 0o444)
                            made.append(path)
                        except OSError:
                            pass
    return made


def devices(gpu):
    """The MIG devices of a GPU in NVML order (by GI id, then CI id) that this process can reach: dicts with
    index, gi, ci, profile, uuid, name (the -L / CI profile name)."""
    out = []
    if not gpu.get("mig_mode"):
        return out
    for gi in sorted(gpu.get("mig_instances") or [], key=lambda g: g["id"]):
        prof = profile_by_id(gpu, gi["profile_id"])
        if prof is None:
            continue
        for ci in sorted(gi.get("cis") or [], key=lambda c: c["id"]):
            if not _reachable(gpu, gi["id"], ci["id"]):
                continue
            out.append({"index": len(out), "gi": gi, "ci": ci, "profile": prof,
                        "uuid": ci.get("uuid") or mig_uuid(gpu["uuid"], gi["id"], ci["id"]),
                        "name": ci_name(prof, ci)})
    return out


def ci_name(prof, ci):
    slices = SLICES_BY_CI_PROFILE.get(ci["profile_id"], prof["slices"])
    if slices == prof["slices"]:
        return prof["name"]
    return "%dc.%s" % (slices, prof["name"])


def gi_overhead(gpu, prof):
    per, extra = (model_mig(gpu) or {}).get("gi_overhead", (8, 1))
    return per * prof["size"] + extra


def bar1_total(gpu, prof, bar1_gpu):
    unit = (model_mig(gpu) or {}).get("bar1_slot")
    if unit is None:
        unit = bar1_gpu / float((model_mig(gpu) or {}).get("slots", 8))
    return int(unit * prof["size"])


def procs_on_gi(procs, gi_id, ci_id=None):
    return [p for p in procs if p.get("gi_id") == gi_id and (ci_id is None or p.get("ci_id") == ci_id)]


# ----- placement ------------------------------------------------------------------------------------------------
def _occupied(gpu):
    used = set()
    for gi in instances(gpu):
        used.update(range(gi["start"], gi["start"] + gi["size"]))
    return used


def _compute_used(gpu):
    total = 0
    for gi in instances(gpu):
        prof = profile_by_id(gpu, gi["profile_id"])
        total += prof["slices"] if prof else 0
    return total


def free_starts(gpu, prof):
    used = _occupied(gpu)
    mm = model_mig(gpu)
    if sum(1 for gi in instances(gpu) if gi["profile_id"] == prof["id"]) >= prof["total"]:
        return []
    if prof["name"].endswith("+me") and any(
            (profile_by_id(gpu, gi["profile_id"]) or {}).get("ofa") for gi in instances(gpu)):
        return []
    if _compute_used(gpu) + prof["slices"] > mm["compute"]:
        return []
    return [s for s in prof["starts"] if not used & set(range(s, s + prof["size"]))]


def instances_free(gpu, prof):
    """How many more GIs of the profile fit (placed greedily on a copy)."""
    trial = {"model": gpu["model"], "uuid": gpu.get("uuid", ""),
             "mig_instances": [dict(g) for g in instances(gpu)]}
    n = 0
    while True:
        starts = free_starts(trial, prof)
        if not starts:
            return n
        trial["mig_instances"].append({"id": -1, "profile_id": prof["id"], "start": starts[0],
                                       "size": prof["size"], "cis": []})
        n += 1


def _cost(gpu, start, prof):
    """How much a GI of prof at start spoils: the free placements of every profile (its own other starts
    included) that it overlaps, its own placement excepted."""
    used = _occupied(gpu)
    cells = set(range(start, start + prof["size"]))
    cost = 0
    for p in model_mig(gpu)["profiles"]:
        for s in p["starts"]:
            span = set(range(s, s + p["size"]))
            if (p["id"], s) != (prof["id"], start) and span & cells and not span & used:
                cost += 1
    return cost


def choose_start(gpu, prof):
    starts = free_starts(gpu, prof)
    if not starts:
        return None
    return min(starts, key=lambda s: (_cost(gpu, s, prof), s))


def create_gi(gpu, prof, start=None):
    """-> the new GI dict, or None (Insufficient Resources)."""
    starts = free_starts(gpu, prof)
    if start is None:
        start = choose_start(gpu, prof)
    elif start not in starts:
        start = None
    if start is None:
        return None
    gi = {"id": gi_id_for(start, prof["size"], model_mig(gpu)["slots"]), "profile_id": prof["id"],
          "start": start, "size": prof["size"], "cis": []}
    instances(gpu).append(gi)
    return gi


def create_ci(gpu, gi, slices=None):
    """-> the new CI dict or None (Insufficient Resources). slices None: the GI's full CI."""
    prof = profile_by_id(gpu, gi["profile_id"])
    slices = prof["slices"] if slices is None else slices
    if slices > prof["slices"] or slices not in CI_PROFILE_BY_SLICES:
        return None
    used = set()
    for ci in gi["cis"]:
        used.update(range(ci["start"], ci["start"] + ci["size"]))
    if len(used) + slices > prof["slices"]:
        return None
    start = None
    for s in range(0, prof["slices"] - slices + 1, slices):
        if not used & set(range(s, s + slices)):
            start = s
            break
    if start is None:
        return None
    ids = {ci["id"] for ci in gi["cis"]}
    cid = min(i for i in range(8) if i not in ids)
    ci = {"id": cid, "profile_id": CI_PROFILE_BY_SLICES[slices], "start": start, "size": slices}
    gi["cis"].append(ci)
    return ci


# ----- boot and reset -------------------------------------------------------------------------------------------
def reset_gpu(gpu):
    """A GPU reset: the pending mode takes effect, every GPU/compute instance is gone (research §6)."""
    gpu["mig_mode"] = pending(gpu)
    gpu.pop("mig_pending", None)
    gpu.pop("mig_instances", None)


def reset_at_boot(state):
    """A reboot (research §3, §6): no GPU keeps its instances; Ampere keeps MIG mode in the InfoROM (and a
    pending change takes effect); from Hopper on the mode is lost with the driver (Disabled)."""
    for gpu in state.get("gpus", []):
        if is_ampere(gpu):
            reset_gpu(gpu)
        else:
            gpu.pop("mig_instances", None)
            gpu.pop("mig_pending", None)
            if gpu.get("mig_mode"):
                gpu["mig_mode"] = False


# ----- nvidia-smi mig: rendering --------------------------------------------------------------------------------
_RULE = {77: "+" + "-" * 77 + "+", 79: "+" + "-" * 79 + "+"}
_LGIP_HEAD = {
    77: ["| GPU instance profiles:                                                      |",
         "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
         "|                              Free/Total   GiB              CE    JPEG  OFA  |",
         "|=============================================================================|"],
    79: ["| GPU instance profiles:                                                        |",
         "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
         "|                                Free/Total   GiB              CE    JPEG  OFA  |",
         "|===============================================================================|"],
}
_LGI_RULE = "+" + "-" * 55 + "+"
_LGI_HEAD = ["| GPU instances:                                        |",
             "| GPU   Name             Profile  Instance   Placement  |",
             "|                          ID       ID       Start:Size |",
             "|=======================================================|"]
_LCI_RULE = "+" + "-" * 68 + "+"
_LCI_HEAD = ["| Compute instances:                                                 |",
             "| GPU     GPU       Name             Profile   Instance   Placement  |",
             "|       Instance                       ID        ID       Start:Size |",
             "|         ID                                                         |",
             "|====================================================================|"]


def lgip_rows(index, gpu, frame):
    out = []
    for p in model_mig(gpu)["profiles"]:
        head = "|%4d  MIG %-*s%3d%8s        %-11s%s     " % (
            index, 13 if frame == 77 else 15, p["name"], p["id"],
            "%d/%d" % (instances_free(gpu, p), p["total"]), "%.2f" % (p["mib"] / 1024.0), "No")
        out.append(head + "%-3s%5s%6s   |" % (p["sm"], p["dec"], p["enc"]))
        out.append("|" + " " * (len(head) - 1) + "%2s%6s%6s   |" % (p["ce"], p["jpeg"], p["ofa"]))
        out.append(_RULE[frame])
    return out


def render_lgip(pairs):
    frame = max(model_mig(g)["frame"] for _i, g in pairs)
    lines = [_RULE[frame]] + _LGIP_HEAD[frame]
    for index, gpu in pairs:
        lines += lgip_rows(index, gpu, frame)
    return "\n".join(lines) + "\n"


def render_lgipp(pairs):
    lines = []
    for index, gpu in pairs:
        for p in model_mig(gpu)["profiles"]:
            many = len(p["starts"]) > 1
            lines.append("GPU %2d Profile ID %2d Placement%s: {%s}:%d" % (
                index, p["id"], "s" if many else " ", ",".join(str(s) for s in p["starts"]), p["size"]))
    return "\n".join(lines) + "\n"


def render_lgi(rows):
    lines = [_LGI_RULE] + _LGI_HEAD
    for index, gpu, gi in rows:
        prof = profile_by_id(gpu, gi["profile_id"])
        lines.append("|%4d  MIG %-16s%2d%9d%13s     |" % (index, prof["name"], prof["id"], gi["id"],
                                                      "%d:%d" % (gi["start"], gi["size"])))
        lines.append(_LGI_RULE)
    return "\n".join(lines) + "\n"


def render_lci(rows):
    lines = [_LCI_RULE] + _LCI_HEAD
    for index, gpu, gi, ci in rows:
        prof = profile_by_id(gpu, gi["profile_id"])
        lines.append("|%4d%7d       MIG %-16s%2d%10d%13s     |" % (
            index, gi["id"], ci_name(prof, ci), ci["profile_id"], ci["id"], "%d:%d" % (ci["start"], ci["size"])))
        lines.append(_LCI_RULE)
    return "\n".join(lines) + "\n"


# ----- nvidia-smi mig: the command ------------------------------------------------------------------------------
MSG_NO_MIG = "No MIG-enabled devices found."
_OPTS = {"-lgip": "lgip", "--list-gpu-instance-profiles": "lgip",
         "-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
         "-lgi": "lgi", "--list-gpu-instances": "lgi", "-lci": "lci", "--list-compute-instances": "lci",
         "-cgi": "cgi", "--create-gpu-instance": "cgi", "-dgi": "dgi", "--destroy-gpu-instance": "dgi",
         "-cci": "cci", "--create-compute-instance": "cci", "-dci": "dci", "--destroy-compute-instance": "dci"}


def parse_mig_args(argv):
    """-> dict(action, ids, gi, ci, value, default_ci) or raises ValueError (Invalid combination...)."""
    a = {"action": None, "ids": None, "gi": None, "ci": None, "value": None, "default_ci": False}
    opts = Options(argv)
    val = opts.value
    for name in opts:
        if name in ("-i", "--id"):
            a["ids"] = [s.strip() for s in val().split(",") if s.strip()]
        elif name in ("-gi", "--gpu-instance-id"):
            a["gi"] = [int(s) for s in val().split(",") if s.strip()]
        elif name in ("-ci", "--compute-instance-id"):
            a["ci"] = [int(s) for s in val().split(",") if s.strip()]
        elif name in ("-C", "--default-compute-instance"):
            a["default_ci"] = True
        elif name in _OPTS:
            if a["action"] is not None:
                raise ValueError(name)
            a["action"] = _OPTS[name]
            if a["action"] == "cgi":
                a["value"] = val()
            elif a["action"] == "cci" and opts.has_value():
                a["value"] = val()
        else:
            raise ValueError(opts.arg)
    if a["action"] is None or (a["default_ci"] and a["action"] != "cgi"):
        raise ValueError("mig")
    return a


def run_mig(smi, views, argv, path, st):
    """`nvidia-smi mig ...` -> (text, rc). views: the selected GPUs' views (smi.view)."""
    try:
        a = parse_mig_args(argv)
    except ValueError:
        return None
    if a["ids"]:
        from .smi import select
        views = select(smi, views, a["ids"])
        if views is None:
            return "No devices were found\n", RC_NOTFOUND
    enabled = [v for v in views if v["gpu"].get("mig_mode") and model_mig(v["gpu"])]
    if not enabled:
        return MSG_NO_MIG + "\n", RC_NOTFOUND
    act = a["action"]
    if act == "lgip":
        return render_lgip([(v["index"], v["gpu"]) for v in enabled]), RC_OK
    if act == "lgipp":
        return render_lgipp([(v["index"], v["gpu"]) for v in enabled]), RC_OK
    if act == "lgi":
        rows = [(v["index"], v["gpu"], gi) for v in enabled
                for gi in sorted(instances(v["gpu"]), key=lambda g: g["id"])
                if a["gi"] is None or gi["id"] in a["gi"]]
        if not rows:
            return "No GPU instances found: Not Found\n", RC_NOTFOUND
        return render_lgi(rows), RC_OK
    if act == "lci":
        rows = [(v["index"], v["gpu"], gi, ci) for v in enabled
                for gi in sorted(instances(v["gpu"]), key=lambda g: g["id"])
                if a["gi"] is None or gi["id"] in a["gi"]
                for ci in sorted(gi["cis"], key=lambda c: c["id"]) if a["ci"] is None or ci["id"] in a["ci"]]
        if not rows:
            return "No compute instances found: Not Found\n", RC_NOTFOUND
        return render_lci(rows), RC_OK
    # changes: root only (the texts: research §2, "Insufficient Permissions" as nvidia-smi's -pm says it)
    holder = {}

    def change(s):
        by_uuid = {g["uuid"]: g for g in s["gpus"]}
        holder["result"] = _change(smi, enabled, by_uuid, a, s)
    new = st.update(change, path)
    if path is None:
        make_cap_nodes(new)
    return holder["result"]


def _fmt_out(out, rc):
    return "".join(line + "\n" for line in out), rc


def _change(smi, views, by_uuid, a, state):
    act = a["action"]
    out = []
    procs = state.get("processes", [])
    for v in views:
        gpu = by_uuid[v["gpu"]["uuid"]]
        idx = v["index"]
        gpu_procs = smi.processes_on(gpu)
        if act == "cgi":
            for token in [t for t in a["value"].split(",") if t.strip()]:
                prof_tok, _c, start_tok = token.partition(":")
                prof = find_profile(gpu, prof_tok)
                if smi.euid != 0:
                    out += ["Unable to create a GPU instance on GPU %2d using profile %s: Insufficient Permissions"
                            % (idx, prof_tok.strip()), "Failed to create GPU instances: Insufficient Permissions"]
                    return _fmt_out(out, RC_NOPERM)
                if prof is None or (start_tok and not start_tok.strip().isdigit()):
                    out += ["Unable to create a GPU instance on GPU %2d using profile %s: Invalid Argument"
                            % (idx, prof_tok.strip()), "Failed to create GPU instances: Invalid Argument"]
                    return _fmt_out(out, RC_INVALID)
                gi = create_gi(gpu, prof, int(start_tok) if start_tok.strip() else None)
                if gi is None:
                    out += ["Unable to create a GPU instance on GPU %2d using profile %s: Insufficient Resources"
                            % (idx, prof_tok.strip()), "Failed to create GPU instances: Insufficient Resources"]
                    return _fmt_out(out, RC_OTHER)
                out.append("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)"
                           % (gi["id"], idx, prof["name"], prof["id"]))
                if a["default_ci"]:
                    ci = create_ci(gpu, gi)
                    out.append("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d "
                               "using profile MIG %s (ID %2d)" % (ci["id"], idx, gi["id"], ci_name(prof, ci),
                                                                  ci["profile_id"]))
        elif act == "dgi":
            targets = sorted([g for g in instances(gpu) if a["gi"] is None or g["id"] in a["gi"]],
                             key=lambda g: g["id"])
            if not targets:
                out.append("Failed to destroy GPU instances: Not Found")
                return _fmt_out(out, RC_NOTFOUND)
            for gi in targets:
                if smi.euid != 0:
                    out += ["Unable to destroy GPU instance ID %2d from GPU %2d: Insufficient Permissions"
                            % (gi["id"], idx), "Failed to destroy GPU instances: Insufficient Permissions"]
                    return _fmt_out(out, RC_NOPERM)
                if gi["cis"] or procs_on_gi(gpu_procs, gi["id"]):
                    out += ["Unable to destroy GPU instance ID %2d from GPU %2d: %s" % (gi["id"], idx, IN_USE),
                            "Failed to destroy GPU instances: %s" % IN_USE]
                    return _fmt_out(out, RC_OTHER)
                gpu["mig_instances"] = [g for g in instances(gpu) if g is not gi]
                out.append("Successfully destroyed GPU instance ID %2d from GPU %2d" % (gi["id"], idx))
        elif act == "cci":
            gis = sorted([g for g in instances(gpu) if a["gi"] is None or g["id"] in a["gi"]], key=lambda g: g["id"])
            if not gis:
                out.append("Failed to create compute instances: Not Found")
                return _fmt_out(out, RC_NOTFOUND)
            for gi in gis:
                prof = profile_by_id(gpu, gi["profile_id"])
                tokens = [t.strip() for t in (a["value"] or "").split(",") if t.strip()] or [None]
                for tok in tokens:
                    slices = _ci_slices(tok, prof)
                    if smi.euid != 0:
                        out += ["Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile "
                                "%s: Insufficient Permissions" % (idx, gi["id"], tok),
                                "Failed to create compute instances: Insufficient Permissions"]
                        return _fmt_out(out, RC_NOPERM)
                    ci = None if slices is False else create_ci(gpu, gi, slices)
                    if ci is None:
                        why = "Invalid Argument" if slices is False else "Insufficient Resources"
                        out += ["Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile "
                                "%s: %s" % (idx, gi["id"], tok, why), "Failed to create compute instances: %s" % why]
                        return _fmt_out(out, RC_INVALID if slices is False else RC_OTHER)
                    out.append("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using "
                               "profile MIG %s (ID %2d)" % (ci["id"], idx, gi["id"], ci_name(prof, ci),
                                                            ci["profile_id"]))
        elif act == "dci":
            pairs = [(gi, ci) for gi in sorted(instances(gpu), key=lambda g: g["id"])
                     if a["gi"] is None or gi["id"] in a["gi"]
                     for ci in sorted(gi["cis"], key=lambda c: c["id"]) if a["ci"] is None or ci["id"] in a["ci"]]
            if not pairs:
                out.append("Failed to destroy compute instances: Not Found")
                return _fmt_out(out, RC_NOTFOUND)
            for gi, ci in pairs:
                if smi.euid != 0:
                    out += ["Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: "
                            "Insufficient Permissions" % (ci["id"], idx, gi["id"]),
                            "Failed to destroy compute instances: Insufficient Permissions"]
                    return _fmt_out(out, RC_NOPERM)
                if procs_on_gi(gpu_procs, gi["id"], ci["id"]):
                    out += ["Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: %s"
                            % (ci["id"], idx, gi["id"], IN_USE), "Failed to destroy compute instances: %s" % IN_USE]
                    return _fmt_out(out, RC_OTHER)
                gi["cis"] = [c for c in gi["cis"] if c is not ci]
                out.append("Successfully destroyed compute instance ID %2d from GPU %2d GPU instance ID %2d"
                           % (ci["id"], idx, gi["id"]))
    return _fmt_out(out, RC_OK)


def _ci_slices(tok, prof):
    """A -cci token -> compute slices (None: the GI's full CI), False when it names no CI profile."""
    if tok is None:
        return None
    if tok.isdigit():
        return SLICES_BY_CI_PROFILE.get(int(tok), False)
    name = tok.lower().replace("mig ", "")
    if name == prof["name"]:
        return prof["slices"]
    if name.endswith("c." + prof["name"]) and name.split("c.")[0].isdigit():
        return int(name.split("c.")[0])
    return False


# ----- nvidia-smi -mig 0|1 and --gpu-reset ----------------------------------------------------------------------
def _long_in_use(bus):
    return ("%s is currently being used by one or more other processes (e.g. CUDA application or a monitoring "
            "application such as another instance of nvidia-smi). Please first kill all processes using the "
            "device and retry the command or reboot the system to make MIG mode effective." % bus)


def _dcgm_holds(state, gpu):
    """DCGM's nv-hostengine has the GPU open through NVML (gpusim/hostengine.py): NVIDIA's MIG manager stops
    nvidia-dcgm.service (with nvsm.service, its "driver_services") before it changes a MIG mode, which resets the
    GPU (NVIDIA/mig-parted deployments/systemd/hooks.sh, pre-apply-mode)."""
    from . import dcgm  # pylint: disable=import-outside-toplevel  # gpusim.dcgm imports this module
    return dcgm.holds(state, gpu)


def holds_gpu(smi, gpu, state):
    """Something holds the GPU open: a compute process or DCGM's host engine; on Ampere (which needs a reset) also
    nvidia-persistenced / persistence mode (gpu-operator#118: persistenced held the GPU)."""
    if smi.processes_on(gpu) or _dcgm_holds(state, gpu):
        return True
    if gpu.get("mig_instances") and gpu.get("mig_mode"):
        return True
    if is_ampere(gpu) and gpu.get("persistence_mode"):
        return True
    return False


def set_mode(smi, gpu, enable, state):
    """Apply `-mig` to the state's GPU; -> its lines (research §3)."""
    bus = gpu["pci_bus_id"]
    word = "enable" if enable else "disable"
    if bool(gpu.get("mig_mode")) == enable:
        gpu.pop("mig_pending", None)
        return ["%s MIG Mode for GPU %s" % ("Enabled" if enable else "Disabled", bus)]
    if holds_gpu(smi, gpu, state):
        gpu["mig_pending"] = enable
        return ["Warning: MIG mode is in pending %s state for GPU %s:%s" % (word, bus, IN_USE), _long_in_use(bus)]
    if is_ampere(gpu) and gpu.get("reset_unsupported"):
        gpu["mig_pending"] = enable
        return ["Warning: MIG mode is in pending %s state for GPU %s:Not Supported" % (word, bus),
                "Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU %s" % bus]
    gpu["mig_mode"] = enable
    gpu.pop("mig_pending", None)
    gpu.pop("mig_instances", None)
    return ["%s MIG Mode for GPU %s" % ("Enabled" if enable else "Disabled", bus)]


def gpu_reset(smi, gpus, state):
    """`nvidia-smi -r [-i N]` as 535 and later print it (tests/fixtures/gpu_reset: Yandex Cloud's MIG guide,
    k8s-test-infra#759): every GPU reset, then "All done."; or, when any of them cannot be, none, and the list of
    those that cannot with why: in use (a process, persistence mode) or not supported; exit 255 as mig-parted#181
    and NVSentinel#1690 saw (3 where every refusal is "Not Supported": not captured, nvidia-smi's code for an
    operation the device does not support)."""
    refused = [(g, "In use by another client") for g in gpus
               if smi.processes_on(g) or g.get("persistence_mode") or _dcgm_holds(state, g)]
    refused += [(g, "Not Supported") for g in gpus if g.get("reset_unsupported") and g not in [r[0] for r in refused]]
    if refused:
        out = ["The following GPUs could not be reset:"] + ["  GPU %s: %s" % (g["pci_bus_id"], why) for g, why in refused]
        n = len([g for g, why in refused if why.startswith("In use")])
        if n:
            out += ["", "%d device%s currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                    "application, graphics application such as an X server, or a monitoring application such as "
                    "another instance of nvidia-smi). Please first kill all processes using %s device%s and all "
                    "compute applications running in the system." % (
                        n, " is" if n == 1 else "s are", "this" if n == 1 else "these", "" if n == 1 else "s")]
        return out, RC_OTHER if n else 3
    out = []
    for g in gpus:
        reset_gpu(g)
        out.append("GPU %s was successfully reset." % g["pci_bus_id"])
    return out + ["All done."], RC_OK
