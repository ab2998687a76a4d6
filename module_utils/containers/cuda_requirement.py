# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Will the host's driver run this image's CUDA?  The image's NVIDIA_REQUIRE_* against the driver.

Pure stdlib, no Ansible imports (shipped to hosts as module_utils; library/cuda_image_check.py is the
thin shell).  Input: the image's environment as `docker image inspect` gives it (Config.Env, a list
of "NAME=value") and the driver facts nvidia_gpu_facts already reports (cuda_driver_version: what
nvidia-smi prints as "CUDA Version"; driver_version).

    result = check(env, "12.4", driver_version="550.144.03", gpu_brands=["GeForce"])
    result["verdict"]  # ok | forward_compat | refused | skipped | unknown

How NVIDIA's container toolkit reads the requirement (the rules mirrored here):
- Which strings: NVIDIA/nvidia-container-toolkit internal/config/image/cuda_image.go
  (GetRequirements, HasDisableRequire, IsLegacy, legacyVersion; commit d34b3046, 2026-08-21):
  every NVIDIA_REQUIRE_* variable except NVIDIA_REQUIRE_JETPACK*; none at all when
  NVIDIA_DISABLE_REQUIRE parses true with Go's strconv.ParseBool; an image with CUDA_VERSION and no
  (or an empty) NVIDIA_REQUIRE_CUDA is "legacy" and gets "cuda>=<major>.<minor>" of CUDA_VERSION.
  Each string is one `--require=` of nvidia-container-cli (cmd/nvidia-container-runtime-hook/main.go);
  all of them must hold (AND).  Only the legacy hook (and CSV mode) checks them: in CDI mode the
  container starts and CUDA meets the driver at initialisation instead.
- How one string is evaluated: NVIDIA/libnvidia-container src/cli/dsl.c dsl_evaluate (commit
  5823754b): SPACE-separated terms are ALTERNATIVES (OR), COMMA-separated terms inside one
  alternative are all REQUIRED (AND).  So in "cuda>=12.8 brand=tesla,driver>=535,driver<536 ..."
  cuda>=12.8 is not mandatory: it is the first alternative, and each brand/driver group is another
  one (a datacenter driver branch on which NVIDIA's CUDA forward compatibility package runs this
  CUDA).  Properties cuda, driver, arch, brand (names case-insensitive); operators = != < <= > >=;
  versions are digits and dots compared number by number, trailing .0 ignored (dsl_compare_version);
  brand allows only = and !=, case-insensitive (dsl_compare_string).  Anything else is "invalid
  expression".  src/cli/configure.c (commit 09df17a2) evaluates every string for every visible GPU
  (brand and arch are the GPU's; with no GPU known they are assumed to hold), and the error names
  only the string's FIRST term: "unsatisfied condition: cuda>=12.8, please update your driver to a
  newer version, or use an earlier cuda container".
- The driver's CUDA version it compares with is NVML's nvmlSystemGetCudaDriverVersion as major.minor
  (src/driver.c, commit 06deb20d): the number nvidia-smi prints as "CUDA Version".
Differences on purpose: every term is validated before anything is evaluated (the C code stops at
the first alternative that holds, so a malformed later term can go unnoticed there).
"""
import re

from ansible.module_utils.driver.debian_version import compare_versions
from ansible.module_utils.gpu.host_parse import driver_branch
from ansible.module_utils.gpu.gpu_arch import CONSUMER_BRANDS, datacenter_class


class CudaRequirementError(ValueError):
    """The image's requirement or a version cannot be read; the message names the variable and the term."""


DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
CUDA_VERSION = "CUDA_VERSION"
LEGACY = "CUDA_VERSION (legacy image)"

VERDICTS = ("ok", "forward_compat", "refused", "skipped", "unknown")

# Minimum Linux x86_64 driver per CUDA version: NVIDIA CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit
# and Corresponding Driver Versions" (CUDA 13.2 Update 2 release notes,
# https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/). The earliest row of each
# major.minor (its GA, or 11.0's RC): the first driver whose "CUDA Version" reaches it.
CUDA_MIN_DRIVER = (
    ("13.2", "595.45.04"), ("13.1", "590.44.01"), ("13.0", "580.65.06"),
    ("12.9", "575.51.03"), ("12.8", "570.26"), ("12.6", "560.28.03"), ("12.5", "555.42.02"),
    ("12.4", "550.54.14"), ("12.3", "545.23.06"), ("12.2", "535.54.03"), ("12.1", "530.30.02"),
    ("12.0", "525.60.13"), ("11.8", "520.61.05"), ("11.7", "515.43.04"), ("11.6", "510.39.01"),
    ("11.5", "495.29.05"), ("11.4", "470.42.01"), ("11.3", "465.19.01"), ("11.2", "460.27.03"),
    ("11.1", "455.23"), ("11.0", "450.36.06"), ("10.2", "440.33"), ("10.1", "418.39"), ("10.0", "410.48"),
    ("9.2", "396.26"), ("9.1", "390.46"), ("9.0", "384.81"), ("8.0", "367.48"), ("7.5", "352.31"),
    ("7.0", "346.46"),
)
CUDA_TABLE_SOURCE = "CUDA Toolkit Release Notes Table 3, as of CUDA 13.2 Update 2"

_PROPERTIES = ("cuda", "driver", "arch", "brand")
_OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_VERSION = re.compile(r"^\d+(?:\.\d+)*$")
# dsl.c evaluate_rule: the name runs to the first operator character, the operator is the whole run
# of them (strspn), the value is the non-empty rest.
_TERM = re.compile(r"^([^<>=!]+)([<>=!]+)([^<>=!].*)$")
# Go strconv.ParseBool, which HasDisableRequire uses; anything else (and its error) means false.
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
# Masterminds semver.NewVersion (legacyVersion), lenient: "v" prefix, 1-3 numbers, pre-release, build.
_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
# nvidia-smi's "Product Brand" -> the token NVIDIA's images use in brand= terms.  The plain names are
# the same word (compared case-insensitively); the virtual-GPU names are spelled out by nvidia-smi.
# (libnvidia-container src/driver.c at 06deb20d names only Quadro, Tesla, NVS, GRID, GeForce, TITAN and
# "Unknown" for the rest; NVIDIA's 12.x lists carry unknown wherever they carry nvidia, so both
# readings admit the same GPUs.)
_BRAND_TOKENS = {
    "nvidia virtual applications": "vapps", "nvidia virtual pc": "vpc",
    "nvidia virtual compute server": "vcs", "nvidia rtx virtual workstation": "vws",
    "nvidia cloud gaming": "cloudgaming", "nvidia vgaming": "cloudgaming",
}
# Brands that are never datacenter parts (gpu_arch.CONSUMER_BRANDS): NVIDIA's forward compatibility is
# "applicable only for systems with NVIDIA Data Center GPUs, select NGC Server Ready SKUs of RTX cards, Jetson
# boards" (CUDA Compatibility guide, Forward Compatibility); on others CUDA fails with error 804.
_CONSUMER_BRANDS = CONSUMER_BRANDS


# ---------------------------------------------------------------------------------------------
# Reading the image's environment


def env_map(env):
    """Config.Env list ("NAME=value") or a dict -> dict; later entries win, as in the toolkit's map."""
    if isinstance(env, dict):
        return dict((str(k), "" if v is None else str(v)) for k, v in env.items())
    result = {}
    for entry in env or []:
        name, sep, value = str(entry).partition("=")
        if not sep:  # the toolkit's WithEnv: "invalid environment variable"
            raise CudaRequirementError("image environment: entry %r has no '=' (expected NAME=value)" % entry)
        result[name] = value
    return result


def disabled(env):
    """NVIDIA_DISABLE_REQUIRE read like the toolkit: true only for what Go's ParseBool calls true."""
    return env_map(env).get(DISABLE_REQUIRE, "") in _GO_TRUE


def cuda_major_minor(version, what=CUDA_VERSION):
    """'12.8.1' -> '12.8', '12' -> '12.0' (the toolkit's parseMajorMinorVersion)."""
    match = _SEMVER.match((version or "").strip())
    if not match:
        raise CudaRequirementError("%s %r is not a version (expected e.g. 12.8.1)" % (what, version))
    return "%d.%d" % (int(match.group(1)), int(match.group(2) or 0))


def requirement_strings(env):
    """[(variable, requirement)] the toolkit passes to nvidia-container-cli, in variable-name order."""
    env = env_map(env)
    if disabled(env):
        return []
    found = [(name, value) for name, value in sorted(env.items())
             if name.startswith(REQUIRE_PREFIX) and not name.startswith(REQUIRE_JETPACK) and value.strip()]
    if env.get(CUDA_VERSION) and not env.get(REQUIRE_CUDA):
        found.append((LEGACY, "cuda>=" + cuda_major_minor(env[CUDA_VERSION])))
    return found


# ---------------------------------------------------------------------------------------------
# Parsing and evaluating one requirement string (libnvidia-container dsl.c)


def parse_requirement(text, variable=REQUIRE_CUDA):
    """'cuda>=12.8 brand=tesla,driver>=535' -> [[('cuda','>=','12.8')], [('brand','=','tesla'), ...]].

    Alternatives (space) of conjunctions (comma). Raises CudaRequirementError naming the term.
    """
    alternatives = []
    for alternative in text.split(" "):
        if not alternative:
            continue
        terms = []
        for term in alternative.split(","):
            if term:
                terms.append(_parse_term(term, text, variable))
        if terms:
            alternatives.append(terms)
    return alternatives


def _parse_term(term, text, variable):
    def bad(why):
        return CudaRequirementError('%s: invalid term "%s" in "%s": %s' % (variable, term, text, why))

    match = _TERM.match(term)
    if not match:
        raise bad("expected <property><operator><value>, e.g. cuda>=12.8 (spaces separate alternatives)")
    name, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if name not in _PROPERTIES:
        raise bad("unknown property %r (the toolkit knows %s)" % (match.group(1), ", ".join(_PROPERTIES)))
    if op not in _OPERATORS:
        raise bad("unknown operator %r" % op)
    if name == "brand":
        if op not in ("=", "!="):
            raise bad("brand compares only with = or !=")
    elif not _VERSION.match(value):
        raise bad("%s takes a version of digits and dots, not %r" % (name, value))
    return (name, op, value)


def _trim(version):
    """dsl_compare_version ignores trailing zero components: 12.0 == 12."""
    return re.sub(r"(?:\.0+)+$", "", version) or "0"


def version_cmp(left, right):
    """<0, 0, >0 for two dotted numeric versions (debian_version.compare_versions, trailing .0 ignored)."""
    return compare_versions(_trim(left), _trim(right))


def _holds(cmp, op):
    return {"=": cmp == 0, "!=": cmp != 0, "<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[op]


def brand_token(brand):
    """nvidia-smi's Product Brand -> the brand= token of NVIDIA's images ('NVIDIA RTX' -> 'nvidiartx')."""
    text = " ".join((brand or "").lower().split())
    return _BRAND_TOKENS.get(text, text.replace(" ", ""))


def _term_holds(term, host, device):
    """(holds, assumed): assumed when the fact it needs is unknown and the toolkit would let it pass."""
    name, op, value = term
    if name == "brand":
        if not device or not device.get("brand"):
            return True, True
        same = brand_token(device["brand"]) == value.lower()
        return (same if op == "=" else not same), False
    actual = {"cuda": host.get("cuda"), "driver": host.get("driver"),
              "arch": (device or {}).get("arch")}[name]
    if not actual:
        return True, True
    return _holds(version_cmp(actual, value), op), False


def evaluate(alternatives, host, device=None):
    """The first alternative that holds (a list of terms) and the terms it assumed, or (None, [])."""
    for terms in alternatives:
        assumed = []
        for term in terms:
            ok, guess = _term_holds(term, host, device)
            if not ok:
                break
            if guess:
                assumed.append(term)
        else:
            return terms, assumed
    return None, []


def term_text(terms):
    return ",".join("%s%s%s" % term for term in terms)


def toolkit_error(text):
    """The message nvidia-container-cli prints when `text` fails (dsl.c: only its first term)."""
    first = text.split(" ")[0]
    if first.startswith("cuda>="):
        return ("unsatisfied condition: %s, please update your driver to a newer version, or use an "
                "earlier cuda container" % first)
    return "unsatisfied condition: %s" % first


# ---------------------------------------------------------------------------------------------
# The image's CUDA and the driver that runs it


def image_cuda(env):
    """The CUDA version the image was built for: NVIDIA_REQUIRE_CUDA's cuda>= term, else CUDA_VERSION."""
    env = env_map(env)
    text = env.get(REQUIRE_CUDA, "")
    for terms in parse_requirement(text) if text.strip() else []:
        for name, op, value in terms:
            if name == "cuda" and op in (">=", ">", "="):
                return value
    return cuda_major_minor(env[CUDA_VERSION]) if env.get(CUDA_VERSION) else None


def min_driver(cuda):
    """Lowest driver (CUDA release notes Table 3) whose CUDA Version is >= `cuda`; None past the table."""
    best = None
    for version, driver in CUDA_MIN_DRIVER:
        if version_cmp(version, cuda) >= 0:
            best = driver
    return best


def forward_compat_branches(alternatives):
    """Driver branches an image's brand/driver alternatives admit (535 from driver>=535,driver<536)."""
    branches = set()
    for terms in alternatives:
        if any(term[0] == "cuda" for term in terms):
            continue
        for name, op, value in terms:
            if name == "driver" and op == ">=":
                branches.add(int(value.split(".")[0]))
    return sorted(branches)


def forward_compat_gpu(datacenter=None, gpu_brands=None):
    """True/False/None (unknown): whether CUDA forward compatibility can work on these GPUs."""
    if datacenter is False or any(brand_token(b) in _CONSUMER_BRANDS for b in gpu_brands or []):
        return False
    return True if datacenter else None


def gpu_classes(gpus):
    """(gpu_brands, datacenter) of the GPUs a container gets, from nvidia_gpu_facts' GPU entries.

    gpu_brands: each GPU's product_brand (nvidia-smi "Product Brand"), once, in order; None when no GPU names
    one (the CSV form of the facts has none). datacenter: False when any GPU is not a datacenter part (the
    toolkit checks every GPU of the container, and forward compatibility fails on any that cannot use it),
    True when every GPU is one, None otherwise (unknown, or no GPU). A GPU's class is its facts' datacenter,
    else gpu_arch.datacenter_class of its PCI device id, name and brand.
    """
    brands, classes = [], []
    for gpu in gpus or []:
        if not isinstance(gpu, dict):
            raise CudaRequirementError("gpus: each entry must be a GPU of ansible_facts.nvidia.gpus (a dict), "
                                       "not %r" % (gpu,))
        brand = gpu.get("product_brand")
        if brand and brand not in brands:
            brands.append(brand)
        if "datacenter" in gpu:
            classes.append(gpu["datacenter"])
        else:
            classes.append(datacenter_class(gpu.get("pci_device_id"), gpu.get("name"), brand))
    if any(value is False for value in classes):
        datacenter = False
    elif classes and all(value is True for value in classes):
        datacenter = True
    else:
        datacenter = None
    return brands or None, datacenter


# ---------------------------------------------------------------------------------------------
# The verdict


def judge_images(images, facts):
    """Each image's check() against the host's driver and every GPU of the host (the check containers and
    gpu_validate's view of the serving ones get them all).

    images: [(image reference, its Config.Env list)], each image the host has. facts: nvidia_gpu_facts'
    facts (cuda_driver_version, driver_version_userspace, gpus). Returns check()'s results in the same
    order, each with `summary` (see summary()). An image whose
    requirement cannot be read is verdict unknown, naming why.
    """
    brands, datacenter = gpu_classes(facts.get("gpus"))
    judged = []
    for image, env in images:
        try:
            result = check(env or [], facts.get("cuda_driver_version"),
                           driver_version=facts.get("driver_version_userspace"),
                           gpu_brands=brands, datacenter=datacenter, image=image)
        except CudaRequirementError as exc:
            result = {"verdict": "unknown", "image": image, "message": "image layer: %s: %s" % (image, exc),
                      "fixes": []}
        result["summary"] = summary(result)
        judged.append(result)
    return judged


def summary(result):
    """check()'s message, and for a refused image its fixes: what a refusal says to the operator."""
    fixes = result.get("fixes") if result.get("verdict") == "refused" else None
    return ". ".join([result["message"]] + (["; ".join("fix: %s" % fix for fix in fixes)] if fixes else []))


def check(env, driver_cuda, driver_version=None, gpu_brands=None, datacenter=None, image="image"):
    """Judge an image's CUDA requirement against the host driver.

    env: Config.Env list or dict. driver_cuda: nvidia-smi's "CUDA Version" (facts cuda_driver_version).
    driver_version: e.g. '550.144.03' (driver= terms). gpu_brands: nvidia-smi "Product Brand" of the
    GPUs the container gets (brand= terms; None: assumed to hold, as the toolkit does without a GPU).
    datacenter: True/False/None, whether the GPUs are datacenter parts (forward compatibility).
    Returns a dict: verdict (VERDICTS), image_cuda, driver_cuda, driver_version, requirements,
    satisfied_by, assumed, failed_requirement, toolkit_error, message, fixes, gpu_brands, datacenter.
    Raises CudaRequirementError. (gpu_classes turns nvidia_gpu_facts' GPU entries into gpu_brands/datacenter.)
    """
    env = env_map(env)
    strings = requirement_strings(env)
    parsed = [(var, text, parse_requirement(text, var)) for var, text in strings]
    try:
        wanted = image_cuda(env)
    except CudaRequirementError:
        if not disabled(env):
            raise
        wanted = None  # the toolkit reads nothing of a disabled requirement, so neither do we
    if driver_cuda:
        driver_cuda = _checked_version(driver_cuda, "driver CUDA version")
    if driver_version:
        driver_version = _checked_version(driver_version, "driver version")
    result = {"verdict": None, "image": image, "image_cuda": wanted, "driver_cuda": driver_cuda,
              "driver_version": driver_version, "requirements": [entry[1] for entry in parsed],
              "satisfied_by": [], "assumed": [], "failed_requirement": None, "toolkit_error": None,
              "message": "", "fixes": [], "gpu_brands": list(gpu_brands) if gpu_brands else None,
              "datacenter": datacenter}
    native = wanted is None or (driver_cuda is not None and version_cmp(driver_cuda, wanted) >= 0)
    if disabled(env):
        return _finish(result, "skipped", _skipped_message(result, native))
    if not parsed:
        return _finish(result, "ok", "%s declares no NVIDIA_REQUIRE_* and no CUDA_VERSION: nothing to check"
                       % image)
    if not driver_cuda:
        return _finish(result, "unknown", "%s %s; the driver's CUDA version is unknown (nvidia-smi printed "
                       "none): not checked" % (image, "needs CUDA %s" % wanted if wanted else "has requirements"))
    failed = _evaluate_all(parsed, {"cuda": driver_cuda, "driver": driver_version}, gpu_brands, result)
    if failed:
        var, text, alternatives, device = failed
        result["failed_requirement"] = {"variable": var, "requirement": text, "brand": (device or {}).get("brand")}
        result["toolkit_error"] = toolkit_error(text)
        result["fixes"] = _fixes(result, alternatives, gpu_brands, datacenter)
        message = _refused_message(result)
        if forward_compat_branches(alternatives) and forward_compat_gpu(datacenter, gpu_brands) is False \
                and not native:
            message += ". " + _datacenter_only(alternatives, gpu_brands)
        return _finish(result, "refused", message)
    if native:
        return _finish(result, "ok", "%s needs CUDA %s; %s" % (image, wanted, _driver_text(result)))
    # Admitted through a brand/driver alternative: CUDA runs only through the image's cuda-compat.
    alternatives = _cuda_alternatives(parsed)
    result["fixes"] = _fixes(result, alternatives, gpu_brands, datacenter)
    if forward_compat_gpu(datacenter, gpu_brands) is False:
        return _finish(result, "refused", _no_forward_compat_message(result, alternatives, gpu_brands))
    return _finish(result, "forward_compat", _forward_compat_message(result, datacenter))


def _evaluate_all(parsed, host, gpu_brands, result):
    """Every requirement for every GPU (configure.c); records what held; the first failure or None."""
    for var, text, alternatives in parsed:
        for device in [{"brand": b} for b in gpu_brands] if gpu_brands else [None]:
            terms, assumed = evaluate(alternatives, host, device)
            if terms is None:
                return var, text, alternatives, device
            _add(result["satisfied_by"], term_text(terms))
            for term in assumed:
                _add(result["assumed"], term_text([term]))
    return None


def _checked_version(value, what):
    text = str(value).strip()
    if not _VERSION.match(text):
        raise CudaRequirementError("%s %r is not a version of digits and dots" % (what, value))
    return text


def _add(items, item):
    if item not in items:
        items.append(item)


def _finish(result, verdict, message):
    result["verdict"] = verdict
    result["message"] = message
    return result


def _cuda_alternatives(parsed):
    for var, _text, alternatives in parsed:
        if var in (REQUIRE_CUDA, LEGACY):
            return alternatives
    return []


def _driver_text(result):
    if result["driver_version"]:
        return "the host driver %s supports CUDA %s" % (result["driver_version"], result["driver_cuda"])
    return "the host driver supports CUDA %s" % result["driver_cuda"]


def _refused_message(result):
    failed = result["failed_requirement"]
    on = " for GPU brand %s" % failed["brand"] if failed.get("brand") else ""
    needs = ("needs CUDA %s but %s (nvidia-smi \"CUDA Version\")" % (result["image_cuda"], _driver_text(result))
             if result["image_cuda"] and version_cmp(result["driver_cuda"], result["image_cuda"]) < 0
             else "does not fit this host: %s" % _driver_text(result))
    return ("image layer: %s %s, and none of the alternatives of %s=\"%s\" holds%s. NVIDIA's toolkit (legacy "
            "mode) refuses to start it: \"%s\"; where it does not check (CDI mode) the container starts and CUDA "
            "fails at initialisation unless a compatibility path applies (\"CUDA driver version is insufficient "
            "for CUDA runtime version\", error 803, or 804)"
            % (result["image"], needs, failed["variable"], _shorten(failed["requirement"]), on,
               result["toolkit_error"]))


def _forward_compat_message(result, datacenter):
    gpu = "" if datacenter else " if the GPU is a datacenter part (unknown here)"
    return ("%s needs CUDA %s; %s, below it. The toolkit admits it through the alternative \"%s\" (CUDA "
            "forward compatibility): CUDA runs through the image's cuda-compat libraries%s; on other GPUs "
            "it fails with error 804" % (result["image"], result["image_cuda"], _driver_text(result),
                                         result["satisfied_by"][0], gpu))


def _no_forward_compat_message(result, alternatives, gpu_brands):
    return ("image layer: %s needs CUDA %s but %s. The toolkit admits it through \"%s\", but %s: CUDA fails "
            "with error 804 \"forward compatibility was attempted on non supported HW\""
            % (result["image"], result["image_cuda"], _driver_text(result), result["satisfied_by"][0],
               _datacenter_only(alternatives, gpu_brands)))


def _datacenter_only(alternatives, gpu_brands):
    """Why the image's brand/driver alternatives cannot help here."""
    branches = ", ".join(str(b) for b in forward_compat_branches(alternatives))
    consumer = [b for b in gpu_brands or [] if brand_token(b) in _CONSUMER_BRANDS]
    gpu = "a %s GPU" % "/".join(consumer) if consumer else "a GPU that is not a datacenter part"
    return ("CUDA forward compatibility (the image's brand/driver alternatives, driver branches %s, run through "
            "its cuda-compat libraries) works only on datacenter GPUs (NVIDIA's CUDA Compatibility guide), and "
            "this is %s" % (branches, gpu))


def _skipped_message(result, native):
    text = "%s sets NVIDIA_DISABLE_REQUIRE: the toolkit checks no requirement" % result["image"]
    if result["image_cuda"] and result["driver_cuda"] and not native:
        text += ("; it was built for CUDA %s and %s, so CUDA runs only through a compatibility path "
                 "(minor-version or forward compatibility) and otherwise fails at initialisation"
                 % (result["image_cuda"], _driver_text(result)))
    return text


def _shorten(text, limit=120):
    return text if len(text) <= limit else text[:limit] + " ..."


def _fixes(result, alternatives, gpu_brands, datacenter):
    """The ways out, most direct first: a newer driver branch, an older-CUDA image, forward compatibility."""
    fixes = []
    wanted, have = result["image_cuda"], result["driver_cuda"]
    if wanted:
        minimum = min_driver(wanted)
        if minimum:
            branch = driver_branch(minimum)
            fixes.append("driver: install branch %d or newer (CUDA %s needs driver >= %s, %s): "
                         "nvidia_driver_branch: %d and nvidia_driver_upgrade: true, then reboot"
                         % (branch, wanted, minimum, CUDA_TABLE_SOURCE, branch))
        else:
            fixes.append("driver: CUDA %s is newer than the driver table (%s): install the driver NVIDIA "
                         "lists for it" % (wanted, CUDA_TABLE_SOURCE))
    if have:
        fixes.append("image: use an older tag of the image, one built for CUDA %s or older (the CUDA this driver "
                     "supports)" % have)
    # The vLLM image puts cuda-compat in the loader's path itself: vllm-project/vllm docker/Dockerfile
    # (commit 0000977e) runs `ldconfig /usr/local/cuda-<major.minor>/compat/` in its final stage.
    branches = forward_compat_branches(alternatives)
    possible = forward_compat_gpu(datacenter, gpu_brands)
    if branches and possible is not False:
        current = driver_branch(result["driver_version"] or "")
        where = "" if possible else " (datacenter GPUs only)"
        if current in branches:
            fixes.append("forward compatibility%s: the driver's branch %d is one the image lists; the image's "
                         "cuda-compat libraries must be used (the vLLM image runs ldconfig on them)"
                         % (where, current))
        else:
            fixes.append("forward compatibility%s: move the driver to a branch the image lists (%s); the image "
                         "carries cuda-compat" % (where, ", ".join(str(b) for b in branches)))
    return fixes
