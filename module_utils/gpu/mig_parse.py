# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG: parsers for `nvidia-smi mig` listings, and the pure decisions of a declared layout.

Pure stdlib (python >= 3.9), no Ansible imports, no host access.

    parse_lgip(text)   `nvidia-smi mig -lgip`   GPU instance profiles (one row per GPU and profile)
    parse_lgipp(text)  `nvidia-smi mig -lgipp`  where each profile may start, and its size (slots)
    parse_lgi(text)    `nvidia-smi mig -lgi`    GPU instances (GIs) that exist
    parse_lci(text)    `nvidia-smi mig -lci`    compute instances (CIs) that exist
    validate_layout(layout, profiles, placements=None)   problems of a declared layout (empty: it fits)
    layout_diff(declared, live, placements=None, compute_instances=None)   what to destroy / create
    mig_commands(gpu, diff, compute_instances)   the nvidia-smi mig commands that carry the diff out
    mig_mode_status(current, pending)   enabled / disabled / enable_pending / disable_pending / not_supported

MIG devices in `nvidia-smi -L` and MIG mode (current and pending, -q / -q -x / CSV) are parsed by
nvsmi_list.parse_list, nvsmi_q.parse_q and nvsmi_xml.parse_xml: the GPU facts carry `mig_devices`,
`mig_mode` and `mig_mode_pending`.

What the real outputs show (tests/fixtures/mig/README.md names them):
- Every listing is a frame of `|`-delimited rows whose column widths change with the driver (the
  -lgi frame is 54 columns wide at 450.80.02, 57 at 510+; -lgip is 79 columns, 81 on RTX PRO 6000
  Blackwell), so rows are read as whitespace-separated fields, not by column.
- A -lgip profile takes two lines: `GPU  MIG <name>  ID  free/total  GiB  P2P  SM  DEC  ENC`, then
  `CE  JPEG  OFA`. Free drops as instances are created; Total does not.
- Names: `<N>g.<M>gb` with variants `+me`, `+me.all`, `+gfx`, `-me`; N is the number of compute
  slices (GPCs). A compute instance that uses fewer slices than its GI is named `<C>c.<N>g.<M>gb`.
- Profile IDs differ between GPUs (1g is ID 19 on A100/H100/H200, 14 on A30 and RTX PRO 6000), so
  layouts are declared by name, never by ID.
- -lgipp: `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1` / `... Placement : {0}:8`: the start
  slots a GI of that profile may take, and how many memory slots it covers (8 on A100/H100, 4 on A30).
"""
import re

from ansible.module_utils.gpu.nvsmi_common import ParseError, TruncatedInput, clean_text

__all__ = (
    "ParseError", "TruncatedInput", "detect_mig_form", "parse_lgip", "parse_lgipp", "parse_lgi",
    "parse_lci", "profile_name", "split_profile_name", "for_gpu", "validate_layout", "layout_diff",
    "mig_mode_status",
)

# The title line of each framed listing, as nvidia-smi prints it.
_TITLES = (
    ("lgip", re.compile(r"^\|\s*GPU instance profiles:\s*\|$", re.I)),
    ("lgi", re.compile(r"^\|\s*GPU instances:\s*\|$", re.I)),
    ("lcip", re.compile(r"^\|\s*Compute instance profiles:\s*\|$", re.I)),
    ("lci", re.compile(r"^\|\s*Compute instances:\s*\|$", re.I)),
)
_COMMANDS = {"lgip": "nvidia-smi mig -lgip", "lgipp": "nvidia-smi mig -lgipp", "lgi": "nvidia-smi mig -lgi",
             "lcip": "nvidia-smi mig -lcip", "lci": "nvidia-smi mig -lci"}
# "No compute instances found: Not Found" (-lci on a GI without CIs, driver 510.47.03).
_NONE_FOUND = re.compile(r"^No (GPU|compute) instances? found\b", re.I)
_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}\s*:\s*(\d+)\s*$")
_NAME = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(.*)$")
_INT = re.compile(r"^\d+$")
_FREE_TOTAL = re.compile(r"^(\d+)/(\d+)$")
_PLACEMENT = re.compile(r"^(\d+):(\d+)$")


# ---------------------------------------------------------------------------------------------
# profile names


def profile_name(name):
    """'MIG 3g.20gb' / 'mig-3g.20gb' / ' 3G.20GB ' -> '3g.20gb'; ParseError for anything else."""
    if not isinstance(name, str):
        raise ParseError("a MIG profile name must be a string, not %r" % (name,))
    text = name.strip().lower()
    text = re.sub(r"^(?:nvidia\.com/)?mig[ -]", "", text).strip()
    if not _NAME.match(text):
        raise ParseError("%r is not a MIG profile name (like 1g.10gb, 3g.40gb, 1g.24gb+me)" % (name,))
    return text


def split_profile_name(name):
    """'1c.3g.20gb' -> {'compute_slices': 1, 'slices': 3, 'memory_gb': 20, 'variant': '', 'gi_name': '3g.20gb'}.

    `slices` is the N of `<N>g` (compute slices of the GPU instance); `compute_slices` the C of a
    `<C>c.` compute-instance name, else equal to `slices`; `variant` the suffix (`+me`, `+gfx`, ...).
    """
    text = profile_name(name)
    match = _NAME.match(text)
    slices = int(match.group(2))
    gi_name = "%dg.%sgb%s" % (slices, match.group(3), match.group(4))
    return {"compute_slices": int(match.group(1)) if match.group(1) else slices, "slices": slices,
            "memory_gb": int(match.group(3)), "variant": match.group(4), "gi_name": gi_name}


# ---------------------------------------------------------------------------------------------
# the framed listings (-lgip, -lgi, -lci)


def detect_mig_form(data):
    """'lgip', 'lgipp', 'lgi', 'lcip', 'lci', 'none_found' or None for one nvidia-smi mig output."""
    text = clean_text(data)
    for line in text.split("\n"):
        stripped = line.strip()
        for form, regex in _TITLES:
            if regex.match(stripped):
                return form
        if _LGIPP.match(stripped):
            return "lgipp"
        if _NONE_FOUND.match(stripped):
            return "none_found"
    return None


def _frame_rows(data, want):
    """The data rows of a framed listing as token lists, each with its line number.

    Raises ParseError when the text is another listing, TruncatedInput when a row line is cut.
    Returns (rows, none_found, form): none_found for a 'No ... instances found' line, form as
    detect_mig_form says.
    """
    text = clean_text(data)
    form = detect_mig_form(text)
    if form not in (None, want, "none_found"):
        raise ParseError("this is the output of `%s`, not of `%s`" % (_COMMANDS[form], _COMMANDS[want]))
    rows = []
    none_found = False
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if _NONE_FOUND.match(stripped):
            none_found = True
            continue
        if not stripped.startswith("|") or stripped.startswith("|="):
            continue  # frame rules, prompts, blank lines
        if not stripped.endswith("|") or len(stripped) < 2:
            raise TruncatedInput("line %d of the `%s` output is cut short: %r"
                                 % (number, _COMMANDS[want], stripped[:80]))
        rows.append((number, stripped[1:-1].split()))
    return rows, none_found, form


def _number(token):
    try:
        return float(token)
    except ValueError:
        return None


def parse_lgip(data):
    """`nvidia-smi mig -lgip` -> one dict per GPU and profile, in the order printed.

    Keys: gpu, name (without 'MIG '), profile_id, instances_free, instances_total, memory_gib,
    p2p (bool or None), sm, dec, enc, ce, jpeg, ofa (None when the second line is missing),
    slices (the N of <N>g), variant ('', '+me', '+gfx', '+me.all', '-me', ...).
    """
    rows, none_found, form = _frame_rows(data, "lgip")
    profiles = []
    last = None
    for number, tokens in rows:
        if len(tokens) >= 10 and _INT.match(tokens[0]) and tokens[1] == "MIG":
            counts = _FREE_TOTAL.match(tokens[4])
            if not counts or not _INT.match(tokens[3]):
                raise ParseError("line %d is not a -lgip profile row: %s" % (number, " ".join(tokens)))
            parts = split_profile_name(tokens[2])
            last = {
                "gpu": int(tokens[0]), "name": profile_name(tokens[2]), "profile_id": int(tokens[3]),
                "instances_free": int(counts.group(1)), "instances_total": int(counts.group(2)),
                "memory_gib": _number(tokens[5]),
                "p2p": {"yes": True, "no": False}.get(tokens[6].lower()),
                "sm": int(tokens[7]) if _INT.match(tokens[7]) else None,
                "dec": int(tokens[8]) if _INT.match(tokens[8]) else None,
                "enc": int(tokens[9]) if _INT.match(tokens[9]) else None,
                "ce": None, "jpeg": None, "ofa": None,
                "slices": parts["slices"], "variant": parts["variant"],
            }
            profiles.append(last)
        elif last is not None and len(tokens) == 3 and all(_INT.match(t) for t in tokens) \
                and last["ce"] is None:
            last["ce"], last["jpeg"], last["ofa"] = (int(t) for t in tokens)
        elif tokens and _INT.match(tokens[0]):
            raise ParseError("line %d is not a -lgip profile row: %s" % (number, " ".join(tokens)))
    if not profiles and not none_found and form is None:
        raise ParseError("no `nvidia-smi mig -lgip` profile rows (| GPU  MIG <name>  ID  free/total ... |)")
    return profiles


def _placement(token, number):
    match = _PLACEMENT.match(token)
    if not match:
        raise ParseError("line %d: %r is not a Start:Size placement" % (number, token))
    return int(match.group(1)), int(match.group(2))


def parse_lgi(data):
    """`nvidia-smi mig -lgi` -> one dict per GPU instance: gpu, name, profile_id, instance_id,
    placement_start, placement_size (memory slots). [] for 'No GPU instances found'."""
    rows, none_found, form = _frame_rows(data, "lgi")
    instances = []
    for number, tokens in rows:
        if len(tokens) == 6 and _INT.match(tokens[0]) and tokens[1] == "MIG":
            if not (_INT.match(tokens[3]) and _INT.match(tokens[4])):
                raise ParseError("line %d is not a -lgi row: %s" % (number, " ".join(tokens)))
            start, size = _placement(tokens[5], number)
            instances.append({"gpu": int(tokens[0]), "name": profile_name(tokens[2]),
                              "profile_id": int(tokens[3]), "instance_id": int(tokens[4]),
                              "placement_start": start, "placement_size": size})
        elif tokens and _INT.match(tokens[0]):
            raise ParseError("line %d is not a -lgi row: %s" % (number, " ".join(tokens)))
    if not instances and not none_found and form is None:
        raise ParseError("no `nvidia-smi mig -lgi` rows (| GPU  MIG <name>  profile  instance  start:size |)")
    return instances


def parse_lci(data):
    """`nvidia-smi mig -lci` -> one dict per compute instance: gpu, gpu_instance_id, name,
    profile_id (CI profile), instance_id (CI id), placement_start, placement_size (compute slots).
    [] for 'No compute instances found: Not Found'."""
    rows, none_found, form = _frame_rows(data, "lci")
    instances = []
    for number, tokens in rows:
        if len(tokens) == 7 and _INT.match(tokens[0]) and _INT.match(tokens[1]) and tokens[2] == "MIG":
            if not (_INT.match(tokens[4]) and _INT.match(tokens[5])):
                raise ParseError("line %d is not a -lci row: %s" % (number, " ".join(tokens)))
            start, size = _placement(tokens[6], number)
            instances.append({"gpu": int(tokens[0]), "gpu_instance_id": int(tokens[1]),
                              "name": profile_name(tokens[3]), "profile_id": int(tokens[4]),
                              "instance_id": int(tokens[5]), "placement_start": start,
                              "placement_size": size})
        elif tokens and _INT.match(tokens[0]):
            raise ParseError("line %d is not a -lci row: %s" % (number, " ".join(tokens)))
    if not instances and not none_found and form is None:
        raise ParseError("no `nvidia-smi mig -lci` rows (| GPU  GI  MIG <name>  profile  instance  start:size |)")
    return instances


def parse_lgipp(data):
    """`nvidia-smi mig -lgipp` -> one dict per GPU and profile: gpu, profile_id, starts (list of
    start slots), size (slots a GI of the profile covers)."""
    text = clean_text(data)
    form = detect_mig_form(text)
    if form in _COMMANDS and form != "lgipp":
        raise ParseError("this is the output of `%s`, not of `nvidia-smi mig -lgipp`" % _COMMANDS[form])
    rows = []
    for line in text.split("\n"):
        match = _LGIPP.match(line.strip())
        if match:
            starts = [int(s) for s in match.group(3).replace(" ", "").split(",") if s != ""]
            rows.append({"gpu": int(match.group(1)), "profile_id": int(match.group(2)),
                         "starts": starts, "size": int(match.group(4))})
    if not rows:
        raise ParseError("no `nvidia-smi mig -lgipp` lines (GPU  0 Profile ID 19 Placements: {0,1,...}:1)")
    return rows


def for_gpu(rows, gpu):
    """The rows of one GPU (by its nvidia-smi index) from any of the parsers' lists."""
    return [row for row in rows if row.get("gpu") == gpu]


# ---------------------------------------------------------------------------------------------
# layout decisions (pure)


def _one_gpu(rows, what):
    gpus = sorted(set(row.get("gpu") for row in rows))
    if len(gpus) > 1:
        raise ValueError("%s hold rows of GPUs %s: pass one GPU's rows (mig_parse.for_gpu)"
                         % (what, ", ".join(str(g) for g in gpus)))
    return gpus[0] if gpus else None


def _names(layout):
    if isinstance(layout, str) or not isinstance(layout, (list, tuple)):
        raise ParseError("a MIG layout is a list of profile names, not %r" % (layout,))
    return [profile_name(item) for item in layout]


def _pack(items, slots, fixed=0):
    """Can every (starts, size) item take a start of its own without overlap? Backtracking over
    at most 8 slots and 8 items. `fixed` is a bit mask of slots already taken."""
    order = sorted(items, key=lambda item: (-item[1], len(item[0])))

    def place(index, used):
        if index == len(order):
            return True
        starts, size = order[index]
        for start in starts:
            mask = ((1 << size) - 1) << start
            if start + size <= slots and not used & mask and place(index + 1, used | mask):
                return True
        return False

    return place(0, fixed)


def _placement_table(placements, profiles):
    """{profile name: (starts, size)} for the profiles that have a -lgipp row, and the slot count."""
    by_id = {row["profile_id"]: row for row in placements}
    table = {}
    for profile in profiles:
        row = by_id.get(profile["profile_id"])
        if row is not None:
            table[profile["name"]] = (tuple(row["starts"]), row["size"])
    slots = max([max(row["starts"] or [0]) + row["size"] for row in placements] or [0])
    return table, slots


def _compute_slices(profiles):
    """A GPU's compute slices as its -lgip shows them: the Total of its plain 1g profile (7 on
    A100/H100/H200/B200, 4 on A30 and RTX PRO 6000), else the largest <N>g it offers."""
    plain = [p["instances_total"] for p in profiles if p["slices"] == 1 and not p["variant"]]
    if plain:
        return max(plain)
    return max([p["slices"] for p in profiles] or [0])


def validate_layout(layout, profiles, placements=None):
    """Problems of a declared layout for one GPU; an empty list means it fits.

    layout: profile names, one per GPU instance wanted (['3g.20gb', '3g.20gb']).
    profiles: that GPU's parse_lgip rows (mig_parse.for_gpu(parse_lgip(text), index)).
    placements: that GPU's parse_lgipp rows, optional.

    Checks, in order: every name is a profile the GPU offers (else the message lists those it
    offers); no profile is asked for more often than its instance Total (not Free: the layout is
    the whole GPU's); the <N>g compute slices add up to no more than the GPU has (the Total of its
    plain 1g profile); with placements, the GIs can take non-overlapping placements (memory slots).
    Without placements the checks are necessary, not sufficient: A100 [3g, 3g, 1g] has 7 compute
    slices and still does not fit, because two 3g GIs cover all 8 memory slots.
    """
    names = _names(layout)
    gpu = _one_gpu(profiles, "the profiles")
    if placements:
        placement_gpu = _one_gpu(placements, "the placements")
        if gpu is not None and placement_gpu != gpu:
            raise ValueError("profiles of GPU %s but placements of GPU %s" % (gpu, placement_gpu))
    label = "GPU %s" % gpu if gpu is not None else "the GPU"
    offered = [p["name"] for p in profiles]
    by_name = {p["name"]: p for p in profiles}
    problems = []
    unknown = [n for n in dict.fromkeys(names) if n not in by_name]
    for name in unknown:
        problems.append("%s does not offer MIG profile %s; it offers: %s"
                        % (label, name, ", ".join(offered) if offered else "none (is MIG mode enabled?)"))
    if unknown:
        return problems
    counts = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    for name, count in counts.items():
        total = by_name[name]["instances_total"]
        if count > total:
            problems.append("%d x %s asked for, but %s allows at most %d (profile ID %d: %d/%d in -lgip)"
                            % (count, name, label, total, by_name[name]["profile_id"],
                               by_name[name]["instances_free"], total))
    if problems or not names:
        return problems
    have = _compute_slices(profiles)
    need = sum(by_name[name]["slices"] for name in names)
    if have and need > have:
        problems.append("%s has %d compute slices, and %s need %d"
                        % (label, have, ", ".join(names), need))
    table, slots = _placement_table(placements or [], profiles)
    if placements and all(name in table for name in names) and not _pack([table[n] for n in names], slots):
        need = sum(table[name][1] for name in names)
        problems.append("%s cannot hold %s at once: %s (placements from -lgipp: %s)"
                        % (label, ", ".join(names),
                           "they need %d memory slots and it has %d" % (need, slots) if need > slots
                           else "no non-overlapping placement exists",
                           "; ".join("%s at {%s}:%d" % (n, ",".join(str(s) for s in table[n][0]), table[n][1])
                                     for n in dict.fromkeys(names))))
    return problems


def _creation_order(names, by_slices):
    """Largest first: NVIDIA's guide ("Instance Geometry") shows -cgi 19,19,14,9 failing with
    'Insufficient Resources' because the 3g.20gb (ID 9) came last."""
    indexed = list(enumerate(names))
    indexed.sort(key=lambda item: (-by_slices(item[1]), item[0]))
    return [entry[1] for entry in indexed]


def _slices_of(name):
    try:
        return split_profile_name(name)["slices"]
    except ParseError:
        return 0


def _keepable_subsets(candidates, names):
    """Subsets of the candidate GIs whose profiles fit in the declared multiset, largest first;
    among subsets of one size, the one that keeps the lowest placements first."""
    wanted = {}
    for name in names:
        wanted[name] = wanted.get(name, 0) + 1
    found = []
    for mask in range(1 << len(candidates)):
        chosen = [gi for bit, gi in enumerate(candidates) if mask >> bit & 1]
        counts = {}
        for gi in chosen:
            counts[gi["name"]] = counts.get(gi["name"], 0) + 1
        if all(count <= wanted.get(name, 0) for name, count in counts.items()):
            found.append(chosen)
    found.sort(key=lambda chosen: (-len(chosen), [candidates.index(gi) for gi in chosen]))
    return found


def layout_diff(declared, live, placements=None, compute_instances=None, profiles=None):
    """What to change on one GPU so that its GPU instances are the declared ones.

    declared: profile names (['3g.20gb', '2g.10gb', '1g.5gb']); order does not matter.
    live: that GPU's parse_lgi rows. placements and profiles: its parse_lgipp and parse_lgip rows
    (both needed to check placements). compute_instances: its parse_lci rows (optional).

    Returns {changed, keep, destroy, create, create_compute, rebuild, reason}:
    keep / destroy are live GI rows (destroying a GI means destroying its compute instances
    first); create the profile names to create, largest first (for `nvidia-smi mig -cgi
    <names> -C`); create_compute the instance ids of kept GIs without a compute instance (for
    `nvidia-smi mig -gi <id> -cci`). The same multiset of profiles is no change.

    A live GI whose compute instances are not one CI of its own size (a `1c.3g.20gb` CI in a
    3g.20gb GI, or several CIs) is not kept. With placements, the GIs kept are chosen so that the
    ones to create still find free placements (keeping as many as possible); when no GI can be
    kept that way, all are destroyed and the layout created again (rebuild=True, reason says why).
    Without placements the first live GIs of each declared profile are kept.
    """
    names = _names(declared)
    _one_gpu(live, "the live instances")
    ordered = sorted(live, key=lambda row: (row["placement_start"], row["instance_id"]))
    cis_of = {}
    for ci in compute_instances or []:
        cis_of.setdefault(ci["gpu_instance_id"], []).append(ci)
    candidates, no_ci = [], []
    for gi in ordered:
        gi = dict(gi, name=profile_name(gi["name"]))
        if gi["name"] not in names:
            continue
        if compute_instances is not None:
            cis = cis_of.get(gi["instance_id"], [])
            if not cis:
                no_ci.append(gi["instance_id"])
            elif len(cis) != 1 or profile_name(cis[0]["name"]) != gi["name"]:
                continue
        candidates.append(gi)
    subsets = _keepable_subsets(candidates, names)
    keep = subsets[0]
    table, slots = _placement_table(placements or [], profiles or [])
    checkable = bool(placements) and bool(profiles) and all(name in table for name in names)
    rebuild, reason = False, None
    if checkable:
        for chosen in subsets:
            fixed = 0
            for gi in chosen:
                fixed |= ((1 << gi["placement_size"]) - 1) << gi["placement_start"]
            rest = list(names)
            for gi in chosen:
                rest.remove(gi["name"])
            if _pack([table[name] for name in rest], slots, fixed):
                keep = chosen
                break
        else:
            keep = []
        if candidates and not keep:
            rebuild = True
            reason = ("keeping any of %s would leave no placement for the rest of the layout: destroying "
                      "all GPU instances and creating %s again"
                      % (", ".join("%s at %d:%d" % (gi["name"], gi["placement_start"], gi["placement_size"])
                                   for gi in candidates), ", ".join(names)))
    kept_ids = set(gi["instance_id"] for gi in keep)
    keep = [gi for gi in ordered if gi["instance_id"] in kept_ids]
    destroy = [gi for gi in ordered if gi["instance_id"] not in kept_ids]
    remaining = list(names)
    for gi in keep:
        remaining.remove(profile_name(gi["name"]))
    create = _creation_order(remaining, _slices_of)
    create_compute = [gi_id for gi_id in no_ci if gi_id in kept_ids]
    changed = bool(destroy or create or create_compute)
    return {"changed": changed, "keep": keep, "destroy": destroy, "create": create,
            "create_compute": create_compute, "rebuild": rebuild, "reason": reason}


def mig_commands(gpu, diff, compute_instances=()):
    """The `nvidia-smi mig` commands (argv lists, in order) that carry out layout_diff()'s result on GPU
    `gpu`: destroy the compute instances of each GI to destroy (a GI that still holds one refuses: "In use by
    another client"), destroy those GIs, create the new ones with their default compute instance (-C), then
    a default compute instance in each kept GI that has none. compute_instances: that GPU's parse_lci rows.
    The forms are the MIG User Guide's (docs/research/mig.md): `-i 0 -dci -ci 0 -gi 5`, `-i 0 -dgi -gi 5`,
    `-cgi 9,3g.20gb -C`, `-gi 11 -cci`."""
    base = ["nvidia-smi", "mig", "-i", str(gpu)]
    doomed = [gi["instance_id"] for gi in diff["destroy"]]
    commands = [base + ["-dci", "-ci", str(ci["instance_id"]), "-gi", str(ci["gpu_instance_id"])]
                for ci in compute_instances or () if ci["gpu_instance_id"] in doomed]
    if doomed:
        commands.append(base + ["-dgi", "-gi", ",".join(str(i) for i in doomed)])
    if diff["create"]:
        commands.append(base + ["-cgi", ",".join(diff["create"]), "-C"])
    commands += [base + ["-gi", str(gi_id), "-cci"] for gi_id in diff["create_compute"]]
    return commands


def mig_mode_status(current, pending):
    """MIG mode of one GPU from its facts (mig_mode, mig_mode_pending: True/False/None).

    'enabled', 'disabled', 'enable_pending' / 'disable_pending' (set, waits for a GPU reset or a
    reboot), 'not_supported' (nvidia-smi shows N/A: no MIG on this GPU).
    """
    if current is None and pending is None:
        return "not_supported"
    if pending is None or pending == current:
        return "enabled" if current else "disabled"
    return "enable_pending" if pending else "disable_pending"
