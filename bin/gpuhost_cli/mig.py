"""gpuhost mig: does a MIG layout fit a GPU, and what would change to get it.

  gpuhost mig [--json] [--gpu N] [--layout NAME,NAME,...] FILE [FILE ...]

Reads saved `nvidia-smi mig` listings of one host, each FILE one of -lgip (the profiles the GPU offers:
needed for --layout), -lgipp (where each profile may start), -lgi (the GPU instances that exist) and
-lci (their compute instances); the form is told from the content. Without --layout: the profiles and
instances of GPU N (default 0). With --layout (profile names, one per GPU instance wanted, as
`3g.40gb,3g.40gb,1g.10gb`): the problems that keep it from fitting (a profile the GPU does not offer,
more instances than its Total, more compute slices than the GPU has, no free placements), and with
-lgi the instances to keep, destroy and create, and the `nvidia-smi mig` commands that would do it.

Exit 0 when the layout fits (or none was asked), 1 when it does not, 2 when an input cannot be read
(one line on stderr, or {"error": ...} with --json).
"""
import sys

from ansible.module_utils.gpu import mig_parse
from gpuhost_cli.cli_io import UsageError, read_input, run_subcommand

PARSERS = {"lgip": mig_parse.parse_lgip, "lgipp": mig_parse.parse_lgipp, "lgi": mig_parse.parse_lgi,
           "lci": mig_parse.parse_lci}


def _headerless_lgip(text):
    """The -lgip rows of an excerpt without the listing's title and header (a post that starts at a GPU's
    first profile row), or []."""
    try:
        return mig_parse.parse_lgip(text)
    except mig_parse.ParseError:
        return []


def read_listings(texts):
    """{form: rows} from the listings' texts; "No ... found" listings count as empty -lgi / -lci."""
    found = {}
    for text in texts:
        form = mig_parse.detect_mig_form(text)
        if form == "none_found":
            form = "lci" if "compute instance" in mig_parse.clean_text(text).lower() else "lgi"
        if form is None:
            rows = _headerless_lgip(text)
            if rows:
                found.setdefault("lgip", []).extend(rows)
                continue
        if form not in PARSERS:
            raise mig_parse.ParseError("not an `nvidia-smi mig -lgip/-lgipp/-lgi/-lci` listing")
        found.setdefault(form, []).extend(PARSERS[form](text))
    return found


def gpus_listed(found):
    """The GPU indexes the listings name, in order."""
    return sorted(set(row["gpu"] for rows in found.values() for row in rows if row.get("gpu") is not None))


def report(found, gpu=0, layout=None):
    """The JSON object `gpuhost mig --json` prints."""
    rows = {form: mig_parse.for_gpu(found.get(form, []), gpu) for form in PARSERS}
    out = {"gpu": gpu, "profiles": [{"name": p["name"], "free": p["instances_free"], "total": p["instances_total"],
                                     "memory_gib": p["memory_gib"]} for p in rows["lgip"]],
           "instances": [{"id": gi["instance_id"], "name": gi["name"],
                          "placement": "%d:%d" % (gi["placement_start"], gi["placement_size"])}
                         for gi in rows["lgi"]],
           "layout": None}
    if layout:
        if not rows["lgip"]:
            raise UsageError("--layout needs the GPU's `nvidia-smi mig -lgip` listing")
        problems = mig_parse.validate_layout(layout, rows["lgip"], rows["lgipp"] or None)
        out["layout"] = {"names": layout, "fits": not problems, "problems": problems, "change": None}
        if not problems and "lgi" in found:
            cis = rows["lci"] if "lci" in found else None
            diff = mig_parse.layout_diff(layout, rows["lgi"], rows["lgipp"] or None, cis, rows["lgip"])
            out["layout"]["change"] = {
                "keep": [gi["instance_id"] for gi in diff["keep"]],
                "destroy": [gi["instance_id"] for gi in diff["destroy"]],
                "create": diff["create"], "reason": diff["reason"],
                "commands": [" ".join(c) for c in mig_parse.mig_commands(gpu, diff, cis or ())]}
    return out


def render_text(out):
    lines = ["GPU %d profiles: %s" % (out["gpu"], ", ".join("%s %d/%d" % (p["name"], p["free"], p["total"])
                                                            for p in out["profiles"]) or "-")]
    lines.append("GPU %d instances: %s" % (out["gpu"], ", ".join("%s (GI %d at %s)" % (i["name"], i["id"], i["placement"])
                                                               for i in out["instances"]) or "-"))
    layout = out["layout"]
    if layout:
        lines.append("layout %s: %s" % (",".join(layout["names"]), "fits" if layout["fits"] else "does not fit"))
        lines += ["  %s" % problem for problem in layout["problems"]]
        change = layout["change"]
        if change:
            lines.append("  keep GIs %s; destroy GIs %s; create %s" % (
                ",".join(map(str, change["keep"])) or "-", ",".join(map(str, change["destroy"])) or "-",
                ",".join(change["create"]) or "-"))
            if change["reason"]:
                lines.append("  %s" % change["reason"])
            lines += ["  $ %s" % command for command in change["commands"]]
    return "\n".join(lines) + "\n"


def _arguments(parser):
    parser.add_argument("--gpu", type=int, default=0, help="the GPU index (default 0)")
    parser.add_argument("--layout", help="profile names, comma-separated, one per GPU instance")
    parser.add_argument("files", nargs="+", help="saved nvidia-smi mig listings (-lgip, -lgipp, -lgi, -lci)")


def _produce(args):
    layout = [name.strip() for name in args.layout.split(",") if name.strip()] if args.layout else None
    out = report(read_listings([read_input(path) for path in args.files]), args.gpu, layout)
    return out, render_text(out), 1 if out["layout"] and not out["layout"]["fits"] else 0


def main(argv):
    return run_subcommand("mig", __doc__, argv, _arguments, _produce, errors=(mig_parse.ParseError, ValueError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
