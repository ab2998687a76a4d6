#!/usr/bin/env python3
"""Build the simulated NVIDIA apt repositories (test code; runs on the CONTROL machine).

Stdlib Python 3.9+ plus the Debian tools dpkg-deb, apt-ftparchive (apt-utils) and gpg.

    python3 molecule/simulator/packages/build_repo.py [--out DIR] [--base-url URL] [--force]

Output (default <repo>/.cache/simrepo), to be served with `python3 -m http.server --bind 127.0.0.1 PORT`
from DIR:

  ubuntu/                       Ubuntu archive style: dists/noble-updates/{restricted,main}/binary-amd64
  debian/                       Debian style: dists/{bookworm,trixie}/{non-free,non-free-firmware}/binary-amd64
  libnvidia-container/gpgkey    NVIDIA's key URL (ASCII-armored public key; roles dearmor it)
  libnvidia-container/stable/deb/nvidia-container-toolkit.list   (written when --base-url is given)
  libnvidia-container/stable/deb/amd64/   flat repo (Packages, Release, InRelease, Release.gpg, *.deb)
  keys/gpusim-archive-keyring.gpg / .asc  the public key, binary and armored
  keys/FINGERPRINT              40 hex digits + newline
  repo.json                     fingerprint, URLs relative to the server root, suites, components

One signing key (ed25519) is generated per build. The build is skipped when nothing it is made from
changed (sha256 over packages/, ../gpusim/, ../bin/ recorded in DIR/.stamp); --force rebuilds.
The last line on stdout is a JSON object: {"out": ..., "fingerprint": ..., "rebuilt": true|false}.
"""
import argparse
import concurrent.futures
import copy
import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(SIM))
DEFAULT_OUT = os.path.join(REPO_ROOT, ".cache", "simrepo")
KEY_UID = "gpuhost simulated NVIDIA repository (test key) <gpusim@localhost.invalid>"
DEFAULT_MAINTAINER = "Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>"
ARCH = "amd64"


# ==================================================================================================
# specs
# ==================================================================================================

def load_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def substitute(value, ctx):
    if isinstance(value, str):
        for k, v in ctx.items():
            value = value.replace("{%s}" % k, v)
        return value
    if isinstance(value, list):
        return [substitute(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, ctx) for k, v in value.items()}
    return value


def _apply_variants(spec, entry):
    spec = copy.deepcopy(spec)
    for variant in spec.pop("variants", []):
        if all(entry.get(k) == v for k, v in variant.get("when", {}).items()):
            for key, val in variant.items():
                if key == "when":
                    continue
                if key.endswith("+"):
                    spec.setdefault(key[:-1], [])
                    spec[key[:-1]] = spec[key[:-1]] + val
                else:
                    spec[key] = val
    return spec


def kernel_release():
    """The kernel the test containers run (they share the harness's): Ubuntu's per-kernel signed-module
    packages and the kernel image are named after it. GPUSIM_KERNEL_RELEASE overrides it (tests)."""
    release = os.environ.get("GPUSIM_KERNEL_RELEASE") or os.uname().release
    if not re.match(r"^[a-z0-9][a-z0-9.+-]*$", release):
        raise SystemExit("build_repo: the kernel release %r cannot be part of a Debian package name; set "
                         "GPUSIM_KERNEL_RELEASE to a lower-case form" % release)
    return release


def kernel_context(drivers):
    """{KVER, KABI, KVER_NEXT, KABI_NEXT} and, per driver of the matrix, its {KV}: the version Ubuntu gives a kernel's packages
    (the ABI, '6.8.0-149.149'), with '+N' for the N-th upload of the restricted modules built against the
    drivers in order ('6.8.0-149.149+2'), as the real linux-restricted-modules versions run."""
    kver = kernel_release()
    match = re.match(r"^(\d+\.\d+(?:\.\d+)?)(?:-(\d+))?", kver)
    base, abi = (match.group(1), match.group(2) or "1") if match else ("0.0.0", "1")
    kabi = "%s-%s.%s" % (base, abi, abi)
    ordered = sorted(range(len(drivers)), key=lambda i: [int(x) for x in drivers[i]["V"].split(".")])
    upload = {i: n + 1 for n, i in enumerate(ordered)}
    # A newer kernel of the flavour that the restricted modules were not built for yet (the archive's lag that
    # strands a reboot): the next major release.
    major = int(base.split(".")[0]) + 1
    context = {"KVER": kver, "KABI": kabi, "KVER_NEXT": "%d.0.0-1-generic" % major, "KABI_NEXT": "%d.0.0-1.1" % major}
    return context, {i: "%s+%d" % (kabi, upload[i]) for i in range(len(drivers))}


def expand_specs(pkg_dir=HERE):
    """All concrete packages: the specs expanded over the version matrix."""
    versions = load_json(os.path.join(pkg_dir, "versions.json"))
    kernel, kernel_uploads = kernel_context(versions.get("drivers") or [])
    out = []
    spec_dir = os.path.join(pkg_dir, "specs")
    for name in sorted(os.listdir(spec_dir)):
        if not name.endswith(".json"):
            continue
        spec = load_json(os.path.join(spec_dir, name))
        matrix = spec.get("matrix", "once")
        entries = [{}] if matrix == "once" else versions[matrix]
        # "repos": the same package in several archives (NVIDIA's CUDA repositories carry DCGM for every distro)
        for repo_name in spec.get("repos") or [spec["repo"]]:
            repo = versions["repos"][repo_name]
            for index, entry in enumerate(entries):
                s = _apply_variants(spec, entry)
                s.pop("repos", None)
                s["repo"] = repo_name
                ctx = dict(entry, **kernel)
                if matrix == "drivers":
                    ctx["KV"] = kernel_uploads[index]
                if "V" in ctx or "TV" in ctx:
                    ctx["DV"] = repo["version_format"].format(**ctx)
                pkg = substitute(s, ctx)
                pkg["version"] = pkg.get("version") or ctx.get("DV")
                pkg["upstream_version"] = ctx.get("V") or ctx.get("T") or pkg["version"]
                pkg["toolkit_version"] = ctx.get("T")
                pkg["component"] = s.get("component") or repo.get("default_component")
                pkg["spec_file"] = name
                out.append(pkg)
    # a family: each member Conflicts with and Replaces every other member (e.g. the module flavours)
    families = {}
    for p in out:
        if p.get("family"):
            families.setdefault(p["family"], set()).add(p["name"])
    for p in out:
        fam = p.get("family")
        if fam:
            others = sorted(families[fam] - {p["name"]})
            p["conflicts"] = list(p.get("conflicts", [])) + others
            p["replaces"] = list(p.get("replaces", [])) + others
    return out, versions


# ==================================================================================================
# file content
# ==================================================================================================

def elf_shared_object(soname, note=""):
    """A minimal ELF64 x86-64 shared object: one PT_LOAD, a PT_DYNAMIC with DT_SONAME.

    Enough for ldconfig (it reads the SONAME, links and caches it, no "not an ELF file" warning);
    not loadable code. The note string ends up in the string table.
    """
    strtab = b"\0" + soname.encode() + b"\0" + note.encode() + b"\0"
    ph_off, ph_num = 64, 2
    str_off = ph_off + 56 * ph_num
    sym_off = (str_off + len(strtab) + 7) & ~7
    dyn_off = sym_off + 24
    dyn = b"".join(struct.pack("<qQ", tag, val) for tag, val in (
        (14, 1),                # DT_SONAME (offset in strtab)
        (5, str_off),           # DT_STRTAB
        (6, sym_off),           # DT_SYMTAB
        (10, len(strtab)),      # DT_STRSZ
        (11, 24),               # DT_SYMENT
        (0, 0)))                # DT_NULL
    total = dyn_off + len(dyn)
    ehdr = struct.pack("<4sBBBBB7sHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7,
                       3, 62, 1, 0, ph_off, 0, 0, 64, 56, ph_num, 64, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, total, total, 0x1000)
    dynamic = struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
    body = ehdr + load + dynamic + strtab
    body += b"\0" * (sym_off - len(body)) + b"\0" * 24 + dyn
    assert len(body) == total
    return body


def read_source(src):
    kind, _, rel = src.partition(":")
    base = {"sim": SIM, "pkg": HERE}[kind]
    with open(os.path.join(base, rel), "rb") as fh:
        return fh.read()


def file_bytes(f, pkg):
    if "elf_soname" in f:
        return elf_shared_object(f["elf_soname"], "gpusim simulated %s %s" % (
            os.path.basename(f["dest"]), pkg["upstream_version"]))
    if "content" in f:
        return f["content"].encode("utf-8")
    data = read_source(f["src"])
    if f.get("substitute") and pkg.get("toolkit_version"):
        commits = {"1.17.8": "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
                   "1.18.0": "f8daa5e26de9fd7eb79259040b6dd5a52060048c"}
        data = data.replace(b"@TOOLKIT_VERSION@", pkg["toolkit_version"].encode())
        data = data.replace(b"@TOOLKIT_COMMIT@", commits.get(pkg["toolkit_version"], "").encode())
    return data


# ==================================================================================================
# maintainer scripts
# ==================================================================================================

def _ere_escape(s):
    return re.sub(r"([.\[\]()*+?^$|\\{}])", r"\\\1", s)


def maintainer_scripts(pkg):
    """(postinst, postrm) text or None."""
    post_inst_extra = ""
    if pkg.get("postinst"):
        post_inst_extra = read_source("pkg:" + pkg["postinst"]).decode()
    if pkg.get("postinst_script") or pkg.get("postrm_script"):
        # the toolkit's own scripts, as upstream ships them (debhelper adds nothing for these units)
        def clean(path):
            text = read_source("pkg:" + path).decode()
            return text.replace("#DEBHELPER#\n", "")
        return (clean(pkg["postinst_script"]) if pkg.get("postinst_script") else None,
                clean(pkg["postrm_script"]) if pkg.get("postrm_script") else None)
    state = pkg.get("driver_state")
    mods = pkg.get("kernel_modules")
    if state is None and not mods and not post_inst_extra:
        return None, None
    funcs = []
    inst_cmds, rm_cmds = [], []
    if mods:
        d = mods["dir"].strip("/")
        names = mods["names"]
        regex = "^%s/(%s)\\.ko:" % (_ere_escape(d), "|".join(_ere_escape(n) for n in names))
        dep_lines = []
        for n, name in enumerate(names):
            dep_lines.append("%s/%s.ko:%s" % (d, name, "" if n == 0 else " %s/%s.ko" % (d, names[0])))
        funcs.append("""\
# the kernel modules, as depmod registers them for the running kernel
gpusim_modules_install() {
    moddir="${GPUSIM_ROOT:-}/lib/modules/%(kver)s"
    mkdir -p "$moddir/%(d)s"
    for m in %(names)s; do
        printf 'simulated NVIDIA kernel module %%s %(ver)s\\n' "$m" > "$moddir/%(d)s/$m.ko"
    done
    touch "$moddir/modules.dep"
    { grep -v -E '%(regex)s' "$moddir/modules.dep" || true
      printf '%%s\\n' %(lines)s
    } > "$moddir/modules.dep.gpusim-tmp"
    mv "$moddir/modules.dep.gpusim-tmp" "$moddir/modules.dep"
}

gpusim_modules_remove() {
    moddir="${GPUSIM_ROOT:-}/lib/modules/%(kver)s"
    for m in %(names)s; do
        rm -f "$moddir/%(d)s/$m.ko"
    done
    rmdir "$moddir/%(d)s" 2>/dev/null || true
    if [ -f "$moddir/modules.dep" ]; then
        { grep -v -E '%(regex)s' "$moddir/modules.dep" || true; } > "$moddir/modules.dep.gpusim-tmp"
        mv "$moddir/modules.dep.gpusim-tmp" "$moddir/modules.dep"
    fi
}
""" % {"d": d, "names": " ".join(names), "ver": pkg["upstream_version"], "regex": regex,
       # a per-kernel package's modules belong to its kernel; DKMS builds for the running one
       "kver": mods["kver"] if mods.get("kver") else "$(uname -r)",
       "lines": " ".join("'%s'" % l for l in dep_lines)})
        inst_cmds.append("gpusim_modules_install")
        rm_cmds.append("gpusim_modules_remove")
    if state is not None:
        script = read_source("pkg:maint/driver-state.py").decode()
        funcs.append("""\
# the installed part of the simulated host's state (/var/lib/gpu-sim/state.json)
gpusim_driver_state() {
    command -v python3 >/dev/null 2>&1 || return 0
    python3 - "$1" '%s' '%s' '%s' <<'GPUSIM_EOF'
%sGPUSIM_EOF
}
""" % (pkg["name"], pkg["upstream_version"], state.get("flavour") or "-", script))
        inst_cmds.append("gpusim_driver_state add")
        rm_cmds.append("gpusim_driver_state remove")
    head = "#!/bin/sh\nset -e\n\n" + "\n".join(funcs)
    postinst = head + """
case "$1" in
    configure)
%s
    ;;
    abort-upgrade|abort-remove|abort-deconfigure)
    ;;
esac
%s
exit 0
""" % ("\n".join("        " + c for c in inst_cmds) or "        :", post_inst_extra)
    postrm = None
    if rm_cmds:
        postrm = head + """
case "$1" in
    remove)
%s
    ;;
    purge|upgrade|failed-upgrade|abort-install|abort-upgrade|disappear)
    ;;
esac

exit 0
""" % "\n".join("        " + c for c in rm_cmds)
    return postinst, postrm


# ==================================================================================================
# .deb
# ==================================================================================================

def control_text(pkg, installed_kb):
    fields = [("Package", pkg["name"]), ("Version", pkg["version"]),
              ("Architecture", pkg.get("architecture", ARCH)),
              ("Maintainer", pkg.get("maintainer", DEFAULT_MAINTAINER)),
              ("Installed-Size", str(installed_kb))]
    if pkg.get("multi_arch"):
        fields.append(("Multi-Arch", pkg["multi_arch"]))
    for key, field in (("pre_depends", "Pre-Depends"), ("depends", "Depends"), ("recommends", "Recommends"),
                       ("provides", "Provides"),
                       ("conflicts", "Conflicts"), ("breaks", "Breaks"), ("replaces", "Replaces")):
        if pkg.get(key):
            fields.append((field, ", ".join(pkg[key])))
    fields.append(("Section", pkg.get("section", "misc")))
    fields.append(("Priority", pkg.get("priority", "optional")))
    if pkg.get("homepage"):
        fields.append(("Homepage", pkg["homepage"]))
    desc = pkg.get("description", pkg["name"]).split("\n")
    fields.append(("Description", desc[0]))
    text = "".join("%s: %s\n" % kv for kv in fields)
    for line in desc[1:]:
        text += (line if line.startswith(" ") else " " + line) + "\n"
    return text


def deb_filename(pkg):
    version = pkg["version"].split(":", 1)[-1]
    return "%s_%s_%s.deb" % (pkg["name"], version, pkg.get("architecture", ARCH))


def stage_package(pkg, stage):
    """Write the package tree under stage; return the Installed-Size in KiB."""
    total = 0
    conffiles = []
    md5 = []
    for f in pkg.get("files", []):
        dest = f["dest"]
        path = os.path.join(stage, dest.lstrip("/"))
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if "symlink" in f:
            os.symlink(f["symlink"], path)
            continue
        data = file_bytes(f, pkg)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, int(f.get("mode", "0644"), 8))
        total += (len(data) + 1023) // 1024
        md5.append("%s  %s\n" % (hashlib.md5(data).hexdigest(), dest.lstrip("/")))
        if dest.startswith("/etc/"):
            conffiles.append(dest)
    for dirpath, dirnames, _files in os.walk(stage):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
    debian = os.path.join(stage, "DEBIAN")
    os.makedirs(debian, mode=0o755, exist_ok=True)
    postinst, postrm = maintainer_scripts(pkg)
    for name, text in (("postinst", postinst), ("postrm", postrm)):
        if text:
            p = os.path.join(debian, name)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(p, 0o755)
    if conffiles:
        with open(os.path.join(debian, "conffiles"), "w") as fh:
            fh.write("".join(c + "\n" for c in sorted(conffiles)))
    if md5:
        with open(os.path.join(debian, "md5sums"), "w") as fh:
            fh.write("".join(sorted(md5)))
    kb = max(total, 1)
    with open(os.path.join(debian, "control"), "w", encoding="utf-8") as fh:
        fh.write(control_text(pkg, kb))
    return kb


def build_deb(pkg, workdir, out_path):
    stage = tempfile.mkdtemp(prefix="stage-", dir=workdir)
    os.chmod(stage, 0o755)
    stage_package(pkg, stage)
    res = subprocess.run(["dpkg-deb", "--build", "--root-owner-group", "-Zxz", stage, out_path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if res.returncode != 0:
        raise RuntimeError("dpkg-deb failed for %s: %s" % (pkg["name"], res.stderr.strip()))
    shutil.rmtree(stage)
    return out_path


# ==================================================================================================
# repositories
# ==================================================================================================

def run(cmd, cwd=None, env=None, stdout=None):
    res = subprocess.run(cmd, cwd=cwd, env=env, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=stdout is None)
    if res.returncode != 0:
        err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode(errors="replace")
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), res.returncode, err.strip()))
    return res.stdout


def write_packages(cwd, scan_dir, dest_dir):
    os.makedirs(dest_dir, exist_ok=True)
    text = run(["apt-ftparchive", "packages", scan_dir], cwd=cwd)
    with open(os.path.join(dest_dir, "Packages"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with gzip.GzipFile(os.path.join(dest_dir, "Packages.gz"), "wb", mtime=0) as fh:
        fh.write(text.encode("utf-8"))


def write_release(directory, fields, tmpdir):
    cmd = ["apt-ftparchive"]
    for k, v in fields.items():
        cmd += ["-o", "APT::FTPArchive::Release::%s=%s" % (k, v)]
    cmd += ["release", "."]
    text = run(cmd, cwd=directory)
    tmp = os.path.join(tmpdir, "Release.%d" % os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    shutil.move(tmp, os.path.join(directory, "Release"))


class Signer:
    def __init__(self):
        # In the system's temp directory, not under workdir: gpg-agent's socket lives in the home and its path
        # must fit a UNIX socket address (108 bytes), which a deep workdir (pytest-xdist's tmp_path) overflows.
        self.home = tempfile.mkdtemp(prefix="gnupg-")
        os.chmod(self.home, 0o700)
        self.base = ["gpg", "--homedir", self.home, "--batch", "--no-tty", "--pinentry-mode", "loopback",
                     "--passphrase", ""]
        run(self.base + ["--quick-gen-key", KEY_UID, "ed25519", "sign", "never"])
        out = run(["gpg", "--homedir", self.home, "--batch", "--with-colons", "--list-secret-keys"])
        self.fingerprint = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def sign(self, release_path):
        d = os.path.dirname(release_path)
        run(self.base + ["--yes", "--digest-algo", "SHA512", "--local-user", self.fingerprint, "--clearsign",
                         "--output", os.path.join(d, "InRelease"), release_path])
        run(self.base + ["--yes", "--digest-algo", "SHA512", "--local-user", self.fingerprint, "--armor",
                         "--detach-sign", "--output", os.path.join(d, "Release.gpg"), release_path])

    def export(self, armored):
        args = ["--armor"] if armored else []
        res = subprocess.run(["gpg", "--homedir", self.home, "--batch", "--export"] + args + [self.fingerprint],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if res.returncode != 0 or not res.stdout:
            raise RuntimeError("gpg --export failed: %s" % res.stderr.decode(errors="replace"))
        return res.stdout

    def close(self):
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "all"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.home, ignore_errors=True)


def pool_path(pkg):
    src = pkg.get("source") or pkg["name"]
    letter = src[:4] if src.startswith("lib") else src[0]
    return os.path.join("pool", pkg["component"] or "main", letter, src)


def build(out, base_url=None, jobs=None):
    packages, versions = expand_specs()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".simrepo-build-", dir=parent)
    new = os.path.join(work, "out")
    os.makedirs(new)
    signer = None
    try:
        # 1. the .debs, in each repository's pool
        jobs_list = []
        for pkg in packages:
            rcfg = versions["repos"][pkg["repo"]]
            if rcfg["layout"] == "flat":
                rel = os.path.join(rcfg["dir"], deb_filename(pkg))
            else:
                rel = os.path.join(rcfg["dir"], pool_path(pkg), deb_filename(pkg))
            dest = os.path.join(new, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            jobs_list.append((pkg, dest))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or min(8, (os.cpu_count() or 2))) as ex:
            for fut in [ex.submit(build_deb, p, work, d) for p, d in jobs_list]:
                fut.result()

        # 2. indexes and signatures
        signer = Signer()
        summary = {"fingerprint": signer.fingerprint, "repos": {}}
        for name, rcfg in versions["repos"].items():
            root = os.path.join(new, rcfg["dir"])
            if rcfg["layout"] == "flat":
                write_packages(root, ".", root)
                write_release(root, {"Origin": rcfg["origin"], "Label": rcfg["label"],
                                     "Architectures": ARCH, "Description": rcfg["description"]}, work)
                signer.sign(os.path.join(root, "Release"))
                summary["repos"][name] = {"layout": "flat", "path": rcfg["dir"] + "/", "suites": ["/"],
                                          "components": []}
                continue
            components = sorted({p["component"] for p in packages if p["repo"] == name})
            for suite in rcfg["suites"]:
                sdir = os.path.join(root, "dists", suite)
                for comp in components:
                    scan = os.path.join("pool", comp)
                    write_packages(root, scan, os.path.join(sdir, comp, "binary-%s" % ARCH))
                codename = suite.split("-")[0]
                write_release(sdir, {"Origin": rcfg["origin"], "Label": rcfg["label"], "Suite": suite,
                                     "Codename": codename, "Architectures": ARCH,
                                     "Components": " ".join(components),
                                     "Description": rcfg["description"]}, work)
                signer.sign(os.path.join(sdir, "Release"))
            summary["repos"][name] = {"layout": "dists", "path": rcfg["dir"] + "/", "suites": rcfg["suites"],
                                      "components": components}

        # 3. keys
        keys = os.path.join(new, "keys")
        os.makedirs(keys)
        armored, binary = signer.export(True), signer.export(False)
        for path, data in ((os.path.join(keys, "gpusim-archive-keyring.asc"), armored),
                           (os.path.join(keys, "gpusim-archive-keyring.gpg"), binary),
                           (os.path.join(new, "libnvidia-container", "gpgkey"), armored)):
            with open(path, "wb") as fh:
                fh.write(data)
            os.chmod(path, 0o644)
        with open(os.path.join(keys, "FINGERPRINT"), "w") as fh:
            fh.write(signer.fingerprint + "\n")
        summary["keys"] = {"armored": "keys/gpusim-archive-keyring.asc", "binary": "keys/gpusim-archive-keyring.gpg",
                           "nvidia_gpgkey": "libnvidia-container/gpgkey", "fingerprint_file": "keys/FINGERPRINT"}
        summary["packages"] = sorted("%s=%s" % (p["name"], p["version"]) for p in packages)
        summary["inputs"] = inputs_hash()
        with open(os.path.join(new, "repo.json"), "w") as fh:
            json.dump(summary, fh, indent=2, sort_keys=True)
            fh.write("\n")
        with open(os.path.join(new, ".stamp"), "w") as fh:
            fh.write(summary["inputs"] + "\n")

        # 4. into place
        if os.path.exists(out):
            old = os.path.join(work, "old")
            os.rename(out, old)
        os.rename(new, out)
    finally:
        if signer is not None:
            signer.close()
        shutil.rmtree(work, ignore_errors=True)
    if base_url:
        write_list(out, base_url)
    return summary


def write_list(out, base_url):
    """NVIDIA's nvidia-container-toolkit.list with this server's URL (depends on the port: not stamped)."""
    base = base_url.rstrip("/")
    path = os.path.join(out, "libnvidia-container", "stable", "deb", "nvidia-container-toolkit.list")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write("deb %s/libnvidia-container/stable/deb/$(ARCH) /\n"
                 "#deb %s/libnvidia-container/experimental/deb/$(ARCH) /\n" % (base, base))
    return path


def inputs_hash():
    h = hashlib.sha256()
    h.update(kernel_release().encode() + b"\0")
    roots = [HERE, os.path.join(SIM, "gpusim"), os.path.join(SIM, "bin")]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, SIM).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read())
                h.update(b"\0")
    return h.hexdigest()


def up_to_date(out):
    try:
        with open(os.path.join(out, ".stamp")) as fh:
            stamp = fh.read().strip()
        with open(os.path.join(out, "repo.json")) as fh:
            summary = json.load(fh)
    except (OSError, ValueError):
        return None
    return summary if stamp == inputs_hash() else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--base-url", help="URL the repo is served at; writes nvidia-container-toolkit.list")
    ap.add_argument("--force", action="store_true", help="rebuild even when the inputs did not change")
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    for tool in ("dpkg-deb", "apt-ftparchive", "gpg"):
        if shutil.which(tool) is None:
            sys.stderr.write("build_repo: %s not found (install dpkg, apt-utils, gpg)\n" % tool)
            return 2
    summary = None if args.force else up_to_date(out)
    rebuilt = summary is None
    if rebuilt:
        summary = build(out, args.base_url, args.jobs)
    elif args.base_url:
        write_list(out, args.base_url)
    print(json.dumps({"out": out, "fingerprint": summary["fingerprint"], "rebuilt": rebuilt}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
