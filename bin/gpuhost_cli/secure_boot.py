"""gpuhost secure-boot: will the nvidia module load under this host's Secure Boot, now and after a reboot.

  gpuhost secure-boot [--json] (--sb-state FILE | --efivar FILE) [--lockdown FILE] [--modinfo FILE]
                      [--packages FILE] [--test-key FILE] [--dkms FILE] [--kernels FILE --running KVER]
                      [--kernel-log FILE] [--distribution NAME] [--branch N]

Reads saved outputs of one host: `mokutil --sb-state` (stdout and stderr), or where mokutil is absent a
copy of the SecureBoot EFI variable file (/sys/firmware/efi/efivars/SecureBoot-8be4df61-...), and
/sys/kernel/security/lockdown (a kernel in lockdown loads only signed modules, Secure Boot or not);
`modinfo nvidia`, `dpkg -l`, `mokutil --test-key <the DKMS key>`, `dkms status`, the installed kernels
(`ls /lib/modules`, `dpkg -l 'linux-image-*'` or `dkms status`) with the running one (`uname -r`), and
the kernel log (`dmesg`, `journalctl -k`). Says whether Secure Boot enforces module signatures, which package provides the module
(Canonical's signed prebuilt linux-modules-nvidia-* or a DKMS build), whether it loads and why (a DKMS
module needs its key enrolled as a MOK, which only the console can finish), any signature rejection in
the kernel log, and the installed kernels a reboot could start without a module.

Exit 0 when the module loads and no kernel is stranded, 1 otherwise (or when it cannot be told), 2 when
an input cannot be read (one line on stderr, or {"error": ...} with --json).
"""
import sys

from ansible.module_utils.driver import secure_boot as sb
from gpuhost_cli.cli_io import read_input, run_subcommand


def _text(path):
    return read_input(path) if path else None


def report(args):
    """The JSON object `gpuhost secure-boot --json` prints."""
    return report_texts(sb_state=_text(args.sb_state), efivar=_text(args.efivar), lockdown=_text(args.lockdown),
                        packages=_text(args.packages), modinfo=_text(args.modinfo), test_key=_text(args.test_key),
                        kernel_log=_text(args.kernel_log), kernels=_text(args.kernels), dkms=_text(args.dkms),
                        running=args.running, distribution=args.distribution, branch=args.branch)


def report_texts(sb_state=None, efivar=None, lockdown=None, packages=None, modinfo=None, test_key=None,
                 kernel_log=None, kernels=None, dkms=None, running=None, distribution=None, branch=None):
    """report() from the outputs themselves (None for each one not given); `gpuhost smi` answers a pasted
    mokutil output or lockdown file with it."""
    state, lockdown = sb.effective_state(sb_state, efivar, None, lockdown)
    source = sb.module_source(packages=packages, modinfo=modinfo, kver=running)
    test_key = sb.parse_test_key(test_key) if test_key is not None else None
    verdict = sb.load_verdict(state, source["kind"], test_key["enrolled"] if test_key else None,
                              distribution, branch)
    events = sb.module_signature_events(kernel_log) if kernel_log is not None else None
    stranded = None
    if kernels is not None:
        # The installed signed package names the branch and variant the other kernels need.
        signed = sb.signed_package(source["package"]) or {}
        stranded = sb.stranded_kernels(kernels, running, dkms_status=dkms,
                                       packages=packages, module_kind=source["kind"],
                                       branch=signed.get("branch") or branch,
                                       open_modules=signed.get("open", False), server=signed.get("server", True))
    return {"secure_boot": state, "lockdown": lockdown, "module": source, "mok": test_key, "loads": verdict["loads"],
            "reason": verdict["reason"], "fix": verdict["fix"], "console_required": verdict["console_required"],
            "kernel_log_rejections": [e["line"] for e in events["rejected"]] if events else None,
            "stranded_kernels": stranded}


def render_text(out):
    lines = ["module signatures: %s%s" % ({True: "enforced", False: "not enforced", None: "unknown"}[
        out["secure_boot"]["enforcing"]], " (kernel lockdown: %s)" % out["lockdown"] if out["lockdown"] else ""),
        "module: %s%s" % (out["module"]["kind"] or "unknown",
                          " (%s)" % out["module"]["evidence"] if out["module"]["evidence"] else ""),
        "loads: %s: %s" % ({True: "yes", False: "no", None: "cannot tell"}[out["loads"]], out["reason"])]
    if out["mok"] and out["mok"]["line"]:
        lines.append("MOK: %s" % out["mok"]["line"])
    if out["fix"]:
        lines.append("fix: %s%s" % (out["fix"], " (at the console: MOK enrolment)" if out["console_required"] else ""))
    for line in out["kernel_log_rejections"] or ():
        lines.append("kernel log: %s" % line)
    for kernel in out["stranded_kernels"] or ():
        lines.append("kernel %s%s has no nvidia module: %s" % (kernel["kver"], " (newer)" if kernel["newer"] else "",
                                                              kernel["fix"]))
    return "\n".join(lines) + "\n"


def _arguments(parser):
    sources = parser.add_mutually_exclusive_group(required=True)
    sources.add_argument("--sb-state", help="a file with `mokutil --sb-state` output")
    sources.add_argument("--efivar", help="a copy of the SecureBoot EFI variable file (where mokutil is absent)")
    parser.add_argument("--lockdown", help="a copy of /sys/kernel/security/lockdown")
    for name, what in (("--modinfo", "`modinfo nvidia`"), ("--packages", "`dpkg -l`"),
                       ("--test-key", "`mokutil --test-key <the DKMS key>`"), ("--dkms", "`dkms status`"),
                       ("--kernels", "the installed kernels (`ls /lib/modules`, `dpkg -l 'linux-image-*'`)"),
                       ("--kernel-log", "`dmesg` or `journalctl -k`")):
        parser.add_argument(name, help="a file with %s" % what)
    parser.add_argument("--running", help="the running kernel (`uname -r`)")
    parser.add_argument("--distribution", help="ubuntu, debian, ... (names the fix)")
    parser.add_argument("--branch", type=int, help="the driver branch (names the signed package)")


def _produce(args):
    out = report(args)
    fine = out["loads"] is True and not out["stranded_kernels"] and not out["kernel_log_rejections"]
    return out, render_text(out), 0 if fine else 1


def main(argv):
    return run_subcommand("secure-boot", __doc__, argv, _arguments, _produce)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
