# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM startup-log report: how far did the start get, with which numbers, and why did it stop?

Pure functions, stdlib only, Python >= 3.9 (shipped to hosts as module_utils).

Stages, in vLLM's order (docs/domain.md §5):
    engine_start        'Initializing a V1 LLM engine (vX)' / 'Initializing an LLM engine'
    weights_loaded      'Model loading took X GiB' / 'Loading model weights took X GB'
    memory_profiled     'Memory profiling ...' / 'Available KV cache memory: X GiB'
    kv_cache_allocated  'GPU KV cache size: N tokens' / '# GPU blocks: N'
    graphs_captured     'Graph capturing finished in N secs' (absent with enforce_eager)
    api_server_started  'Starting vLLM API server on' / '... API server 0 on' (0.10+) /
                        'Starting vLLM server on' (0.19+); V0 servers that print none of
                        these count 'Uvicorn running on' / 'Application startup complete.'
                        but only after the KV cache is sized - other servers in the same
                        job log (a RAG server, corpus 019) print those lines too.
A later stage implies the earlier ones (0.5.x logs no profiling line), except that
graph capture is optional.  A KV-sizing failure means the pool was not allocated
even when its size line was printed (vLLM prints the size, then raises).

Rules chosen for several ranks/engines in one run:
    kv_cache_tokens, max_concurrency, kv_cache_gib: the minimum over the lines - the
        engine unifies the per-worker KV configs to the smallest.
    weights_gib: the maximum over the ranks (the fullest GPU); graph_capture_s: the
        maximum (the start waits for the slowest rank).
A file holding several starts (docker logs of a restarting container) is reported
on its last start; `runs` says how many there were.

Message texts, as in vLLM's source (confirmed against vllm-project/vllm):
  vllm/worker/worker.py raise_if_cache_size_invalid (V0):
      "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`
       when initializing the engine."
      "The model's max seq len ({max_model_len}) is larger than the maximum number of
       tokens that can be stored in KV cache ({max_seq_len}). ..."
  vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (V1):
      "No available memory for the cache blocks. ..." (available memory <= 0) and
      "To serve at least one request with the models's max seq len ({n}), ({x} GiB KV
       cache is needed, which is larger than the available KV cache memory ({y} GiB).
       Based on the available memory, the estimated maximum model length is {m}. ..."
      (newer releases spell it "model's"); _report_kv_cache_config logs
      "GPU KV cache size: %s tokens" and "Maximum concurrency for %s tokens per request: %.2fx".
  vllm/v1/worker/gpu_worker.py init_device:
      "Free memory on device ({free}/{total} GiB) on startup is less than desired GPU
       memory utilization ({util}, {requested} GiB). Decrease GPU memory utilization or
       reduce GPU memory used by other processes."  (newer: "on device cuda:0 (...)")
  .../quantization/utils/marlin_utils_fp8.py, marlin_utils_fp4.py prepare_*_for_marlin:
      "Your GPU does not have native support for FP8 computation but FP8 quantization is
       being used. Weight-only FP8 compression will be used leveraging the Marlin kernel."
"""
import re

from ansible.module_utils.diagnosis import error_catalogue as catalogue

STAGES = ("engine_start", "weights_loaded", "memory_profiled", "kv_cache_allocated",
          "graphs_captured", "api_server_started")
FAILURE_KINDS = ("shm_exhausted", "kv_cache_insufficient", "free_memory_below_utilization",
                 "cuda_oom", "gated_model", "import_error", "argument_error", "incomplete", "other")
DEFAULT_BLOCK_SIZE = 16
_ORDER = {name: i for i, name in enumerate(STAGES)}

# ------------------------------------------------------------------ line cleaning

# Real ESC sequences and the caret form '^[[0;36m' pasted from a terminal (corpus 037).
_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b")
# '(EngineCore_DP0 pid=1)', '(VllmWorker rank=2 pid=3)', '(pid=5)', Ray's '(vLLMHttpServer pid=..)'
_PROC = re.compile(r"^\s*\((?P<proc>[A-Za-z_][\w\-]*)?(?:\s+rank=(?P<rank>\d+))?\s*pid=\d+\)\s?")
_OTHER_PREFIXES = (
    re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s*\|\s*\w+\s*\|\s*\w+\s*\|\s?"),  # app logger '... | ERROR | stderr |'
    re.compile(r"^[A-Za-z0-9][\w.\-]*\s+\|\s"),  # docker compose 'vllm-1  | '
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+"),  # docker logs -t
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T][\d:.,]+\]\s*"),  # '[2026-03-10 20:21:10] '
)
# vLLM's logger: 'INFO 08-02 11:06:17 [file.py:12] msg' (old: 'INFO 04-27 10:11:03 file.py:70] msg')
_HEADER = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+"
                     r"(?:\[[^\]]*\]|[\w./\-]+:\d+\])\s?")
_UVICORN = re.compile(r"^(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+")
# Bare level word, as transcripts print it ('INFO GPU KV cache size: ...', seed 000).
_BARE_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?=\S)")


def clean_line(raw):
    """(level, message, proc, rank) of one physical line."""
    text = _ANSI.sub("", raw).replace("\x00", "")
    proc = rank = None
    for _attempt in range(4):  # nested prefixes: Ray actor + vLLM process (corpus 051)
        changed = False
        m = _PROC.match(text)
        if m:
            proc = m.group("proc") or proc
            rank = m.group("rank") or rank
            text = text[m.end():]
            changed = True
        for pattern in _OTHER_PREFIXES:
            m = pattern.match(text)
            if m:
                text = text[m.end():]
                changed = True
        if not changed:
            break
    level = None
    m = _HEADER.match(text)
    if m:
        level = m.group("level")
        text = text[m.end():]
    else:
        m = _UVICORN.match(text) or _BARE_LEVEL.match(text)
        if m:
            level = m.group("level")
            text = text[m.end():]
    return level, text.strip(), proc, rank


def _lines(text):
    """(line number, raw, level, message, proc, rank); tqdm's bare \\r splits a line
    into segments that keep its number (CRLF files have a trailing \\r only)."""
    for number, physical in enumerate(text.split("\n"), 1):
        for segment in physical.split("\r"):
            if segment.strip():
                level, message, proc, rank = clean_line(segment)
                yield number, _ANSI.sub("", segment), level, message, proc, rank


# ------------------------------------------------------------------ patterns

_NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
RE = {
    "api_version": re.compile(r"vLLM API server version (\S+)"),
    "banner_version": re.compile(r"\u2588\s+version\s+(\d\S*)"),
    "engine_init": re.compile(r"Initializing an? (?:V1 )?LLM engine(?: \(v([^)\s]+)\))?"),
    "cli_args": re.compile(r"non-default args:|args: Namespace\("),
    "weights": re.compile(r"(?:Model loading took|Loading model weights took) " + _NUM + r" ?Gi?B"),
    "profiling": re.compile(r"Memory profiling (?:results|takes)|the current vLLM instance can use"),
    "kv_available": re.compile(r"Available KV cache memory: " + _NUM + r" ?GiB"),
    "kv_size_v0": re.compile(r"kv_cache_size=" + _NUM + r"GiB|reserved for KV Cache is " + _NUM + r" ?GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: " + _NUM + r" tokens"),
    "kv_blocks": re.compile(r"# (?:GPU|CUDA) blocks: " + _NUM),
    "concurrency": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x"),
    "graphs": re.compile(r"Graph capturing finished in " + _NUM + r" secs?"),
    "init_engine": re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUM),
    "api_started": re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (\S+)"),
    "uvicorn": re.compile(r"Uvicorn running on (\S+)|^Application startup complete\.?$"),
    "gmu": re.compile(r"'gpu_memory_utilization': " + _NUM + r"|gpu_memory_utilization=" + _NUM
                      + r"|gpu_memory_utilization \(" + _NUM + r"|--gpu-memory-utilization=" + _NUM
                      + r"|Desired GPU memory utilization is \(" + _NUM, re.I),
    "max_seq_len_cfg": re.compile(r"\bmax_seq_len=(\d+)"),
    "max_model_len_arg": re.compile(r"'max_model_len': (\d+)|\bmax_model_len=(\d+)"),
    "max_len_in_error": re.compile(r"max seq len \((\d+)\)"),
    "block_size": re.compile(r"\bblock_size=(\d+)|'block_size': (\d+)"),
    "enforce_eager": re.compile(r"enforce_eager=True|'enforce_eager': True"),
    "traceback": re.compile(r"^Traceback \(most recent call last\)"),
    # 'ValueError: ...', 'torch.OutOfMemoryError: ...', 'requests.exceptions.HTTPError: ...'
    "exception": re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception)(?::\s|:?$)"),
    "hang": re.compile(r"No available shared memory broadcast block found"),
    # The profiling breakdown, where a version prints it (what the plan records as measured):
    # V0 0.6.4 'peak_torch_memory=8.70GiB ... non_torch_memory=0.73GiB' (peak includes weights);
    # V0 0.6.6 'non_torch_memory takes 0.36GiB; PyTorch activation peak memory takes 15.73GiB';
    # V1 0.9.1+ DEBUG 'torch peak memory increase: 0.59GiB; non-torch forward increase memory: 0.06GiB';
    # V1 0.10.2+ 'Actual usage is 5.79 GiB for weight, 0.17 GiB for peak activation, 0.02 GiB for
    # non-torch memory, and 0.14 GiB for CUDAGraph memory'; 0.20+ 'Estimated CUDA graph memory: X GiB'.
    "peak_torch_v0": re.compile(r"peak_torch_memory=" + _NUM + r"GiB.*non_torch_memory=" + _NUM + r"GiB"),
    "profile_v066": re.compile(r"non_torch_memory takes " + _NUM + r" ?GiB; PyTorch activation peak memory takes "
                               + _NUM + r" ?GiB"),
    "profile_debug": re.compile(r"torch peak memory increase: " + _NUM + r" ?GiB; non-torch forward increase memory: "
                                + _NUM + r" ?GiB"),
    "profile_usage": re.compile(r"Actual usage is .*?" + _NUM + r" GiB for peak activation(?:, " + _NUM
                                + r" GiB for non-torch memory)?"),
    "graph_estimate": re.compile(r"Estimated CUDA graph memory: " + _NUM + r" ?GiB"),
    "graph_profiling_on": re.compile(r"CUDA graph memory profiling is enabled"),
}

# Literal text each pattern needs: a substring test first keeps a 100k-character
# log to a few regex searches per line (bench/bench_vllm_log.py).
GATES = {
    "api_version": ("API server version",), "banner_version": ("version",),
    "engine_init": ("LLM engine",), "cli_args": ("args",), "weights": ("took",),
    "profiling": ("emory profiling", "current vLLM instance"), "kv_available": ("Available KV",),
    "kv_size_v0": ("kv_cache_size=", "reserved for KV"), "kv_tokens": ("KV cache size",),
    "kv_blocks": (" blocks: ",), "concurrency": ("Maximum concurrency",),
    "graphs": ("Graph capturing",), "init_engine": ("init engine",), "api_started": ("Starting vLLM",),
    "uvicorn": ("Uvicorn running", "Application startup"),
    "gmu": ("gpu_memory_utilization", "gpu-memory-utilization", "GPU memory utilization"),
    "max_seq_len_cfg": ("max_seq_len=",), "max_model_len_arg": ("max_model_len",),
    "max_len_in_error": ("max seq len",), "block_size": ("block_size",),
    "enforce_eager": ("enforce_eager",), "traceback": ("Traceback",), "hang": ("broadcast block",),
    "peak_torch_v0": ("peak_torch_memory=",), "profile_v066": ("activation peak memory takes",),
    "profile_debug": ("torch peak memory increase",), "profile_usage": ("for peak activation",),
    "graph_estimate": ("Estimated CUDA graph memory",), "graph_profiling_on": ("graph memory profiling is enabled",),
}


def _find(key, message):
    for gate in GATES[key]:
        if gate in message:
            return RE[key].search(message)
    return None


# The failure kinds, in order (the first whose pattern matches a line names the failure): the
# "vllm" scope of the one error table, module_utils/diagnosis/error_catalogue.py.
FAILURE_ENTRIES = catalogue.in_scope("vllm")


def _failure_kind(message, lower):
    for name, entry in FAILURE_ENTRIES:
        if catalogue.matches(entry, message, lower):
            return name
    return None


# Frames or texts that tell which stage a traceback came from; the innermost wins.
STAGE_HINTS = (
    ("weights_loaded", re.compile(r"\bload_model\b|\bload_weights\b|default_loader\.py|weight_utils\.py")),
    ("memory_profiled", re.compile(r"determine_available_memory|determine_num_available_blocks|"
                                   r"\bprofile_run\b|_dummy_(?:sampler_)?run|dummy_metadata")),
    ("kv_cache_allocated", re.compile(r"check_enough_kv_cache_memory|get_kv_cache_configs?\b|"
                                      r"raise_if_cache_size_invalid|initialize_from_config|"
                                      r"_initialize_kv_caches|initialize_cache\b")),
    ("graphs_captured", re.compile(r"\bcapture_model\b|_capture_cudagraphs|capture_graph")),
)
_HINT_NAMES = {"weights_loaded": "w", "memory_profiled": "m", "kv_cache_allocated": "k",
               "graphs_captured": "g", "arguments": "a"}
ARGUMENT_FRAMES = re.compile(r"validate_parsed_serve_args|cli_args\.py|\bparse_args\b|create_engine_config|arg_utils\.py")
WRAPPER_EXCEPTIONS = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|Engine process failed to start|"
    r"WorkerProc (?:initialization )?failed|EngineDeadError|Call to \w+ method failed|"
    r"Failed core proc")
# One search per traceback line instead of five.
_HINTS = re.compile("|".join("(?P<%s>%s)" % (_HINT_NAMES[stage], pattern.pattern)
                             for stage, pattern in STAGE_HINTS + (("arguments", ARGUMENT_FRAMES),)))
_HINT_STAGE = {short: stage for stage, short in _HINT_NAMES.items()}
KERNEL_FALLBACK = re.compile(
    r"does not have native support for FP(?:4|8) computation|"
    r"Native FP(?:4|8) kernels? (?:is |are )?(?:unavailable|not available).*fall(?:ing)? ?back", re.I)
_VLLM_PROCS = ("EngineCore", "VllmWorker", "APIServer", "Worker")


def _num(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def _first_group(match):
    for group in match.groups():
        if group is not None:
            return group
    return None


# ------------------------------------------------------------------ one run

def _new_run():
    return {
        "version": None, "server_front": False, "engine_inits": 0,
        "seen": {}, "weights": [], "kv_available": [], "kv_v0": [], "kv_tokens": [],
        "kv_blocks": [], "concurrency": [], "graph_s": [], "init_engine_s": None,
        "api_url": None, "v1": False, "gmu": None, "max_seq_len_cfg": None, "max_model_len_arg": None,
        "max_len_in_error": None, "block_size": None, "enforce_eager": False,
        "failures": [], "exceptions": [], "hints": [], "in_traceback": False,
        "warning_details": [], "after_start": None, "last_line": None, "hang": None,
        "profile": [], "graph_estimate": [], "graph_profiling_on": False,
    }


def _feed_profile(run, message):
    """(activation GiB, non-torch GiB) per rank from a profiling breakdown line."""
    m = _find("peak_torch_v0", message)
    if m:
        # peak_torch_memory includes the weights; the weights line came first.
        weights = run["weights"][-1] if run["weights"] else None
        if weights is not None:
            run["profile"].append((_num(m.group(1)) - weights, _num(m.group(2))))
        return
    m = _find("profile_v066", message)
    if m:
        run["profile"].append((_num(m.group(2)), _num(m.group(1))))
        return
    m = _find("profile_debug", message) or _find("profile_usage", message)
    if m:
        run["profile"].append((_num(m.group(1)), _num(m.group(2)) if m.group(2) else None))
        return
    m = _find("graph_estimate", message)
    if m:
        run["graph_estimate"].append(_num(m.group(1)))
    if _find("graph_profiling_on", message):
        run["graph_profiling_on"] = True


def _progressed(run):
    return bool(run["failures"] or run["exceptions"] or
                any(s != "engine_start" for s in run["seen"]))


def _starts_new_run(run, message):
    """A start marker after the current run got somewhere begins the next run."""
    if _find("api_version", message) or _find("banner_version", message):
        return run["server_front"] or run["engine_inits"] > 0 or _progressed(run)
    if _find("engine_init", message):
        return _progressed(run)
    return False


def _started(run):
    return "api_server_started" in run["seen"]


def _feed(run, number, raw, level, message, proc, rank):
    """Update a run with one cleaned line."""
    run["last_line"] = (number, message)
    started = _started(run)
    if started:
        # Past the start only a late error matters (a long-running server's log is
        # mostly request lines); V0 prints its URL just after 'startup complete'.
        if not run["api_url"]:
            m = _find("uvicorn", message)
            if m and m.group(1):
                run["api_url"] = m.group(1)
        if run["after_start"] is None and level not in ("INFO", "DEBUG", "WARNING", "WARN"):
            if _failure_kind(message, message.lower()) or RE["exception"].search(message):
                run["after_start"] = {"line": number, "message": message}
        return

    m = _find("api_version", message) or _find("banner_version", message)
    if m:
        run["server_front"] = True
        run["version"] = run["version"] or m.group(1)
    if _find("cli_args", message):
        run["server_front"] = True
    m = _find("engine_init", message)
    if m:
        run["engine_inits"] += 1
        run["v1"] = run["v1"] or "V1 LLM engine" in message
        run["seen"].setdefault("engine_start", number)
        if m.group(1) and not run["version"]:
            run["version"] = m.group(1)

    # Configuration the run was started with (first figure wins).
    m = _find("gmu", message) if run["gmu"] is None else None
    if m:
        run["gmu"] = _num(_first_group(m))
    for key in ("max_seq_len_cfg", "max_model_len_arg", "max_len_in_error", "block_size"):
        m = _find(key, message) if run[key] is None else None
        if m:
            run[key] = int(_first_group(m))
    if _find("enforce_eager", message):
        run["enforce_eager"] = True

    # Stage lines.
    m = _find("weights", message)
    if m:
        run["seen"].setdefault("weights_loaded", number)
        run["weights"].append(_num(m.group(1)))
    if _find("profiling", message):
        run["seen"].setdefault("memory_profiled", number)
    m = _find("kv_available", message)
    if m:
        run["seen"].setdefault("memory_profiled", number)
        run["kv_available"].append((_num(m.group(1)), number, message))
    m = _find("kv_size_v0", message)
    if m:
        run["kv_v0"].append(_num(_first_group(m)))
    _feed_profile(run, message)
    m = _find("kv_tokens", message)
    if m:
        run["seen"].setdefault("kv_cache_allocated", number)
        run["kv_tokens"].append(int(_num(m.group(1))))
    m = _find("kv_blocks", message)
    if m:
        run["seen"].setdefault("kv_cache_allocated", number)
        run["kv_blocks"].append((int(_num(m.group(1))), number, message))
    m = _find("concurrency", message)
    if m:
        run["seen"].setdefault("kv_cache_allocated", number)
        run["concurrency"].append((_num(m.group(2)), int(_num(m.group(1)))))
    m = _find("graphs", message)
    if m:
        run["seen"].setdefault("graphs_captured", number)
        run["graph_s"].append(_num(m.group(1)))
    m = _find("init_engine", message)
    if m:
        run["init_engine_s"] = _num(m.group(1))
        run["seen"].setdefault("kv_cache_allocated", number)
    m = _find("api_started", message)
    if m:
        run["seen"].setdefault("api_server_started", number)
        run["api_url"] = run["api_url"] or m.group(1)
    elif _find("uvicorn", message) and "kv_cache_allocated" in run["seen"] and not run["v1"]:
        # V0 prints no 'Starting vLLM API server'; only trust uvicorn after KV sizing
        # (V1 always prints its own line, so there uvicorn's may be another server's).
        run["seen"].setdefault("api_server_started", number)
        m = _find("uvicorn", message)
        if m.group(1) and not run["api_url"]:
            run["api_url"] = m.group(1)
    if _find("hang", message):
        run["hang"] = (number, message)

    # Warnings about the serving path.
    lower = message.lower()
    if "native" in lower and KERNEL_FALLBACK.search(message):
        run["warning_details"].append({"kind": "kernel_fallback", "line": number, "message": message})

    # Errors: vLLM's own INFO/DEBUG/WARNING lines never carry one (they mention
    # 'out of memory' in advice, for instance); everything else may.
    if level in ("INFO", "DEBUG", "WARNING", "WARN"):
        return
    if _find("traceback", message):
        run["in_traceback"] = True
        run["hints"] = []
        return
    m = _HINTS.search(message)
    if m:
        run["hints"].append(_HINT_STAGE[m.lastgroup])
    kind = _failure_kind(message, lower)
    is_exception = bool(RE["exception"].search(message))
    if kind:
        run["failures"].append({"kind": kind, "line": number, "message": message,
                                "hints": list(run["hints"])})
    elif is_exception:
        run["exceptions"].append({"line": number, "message": message, "hints": list(run["hints"])})


# ------------------------------------------------------------------ report

def _join_wrapped(lines_by_number, number, message):
    """A terminal that hard-wrapped the paste (corpus 048) splits one error over
    lines that carry no prefix and no level: glue those back on."""
    out = message
    nxt = number + 1
    while nxt in lines_by_number and len(lines_by_number[nxt - 1].rstrip()) >= 80:
        raw = lines_by_number[nxt].rstrip()
        level, cleaned, _proc, _rank = clean_line(raw)
        if not raw or raw[0] in " \t" or level or cleaned != raw.strip() \
                or RE["traceback"].match(raw) or RE["exception"].match(raw):
            break
        out += raw
        nxt += 1
    return out


def _best(candidates):
    """Of several lines naming a failure, the exception line itself beats the
    source line a traceback quotes ('raise ValueError("No available memory...')."""
    for candidate in candidates:
        if RE["exception"].search(candidate["message"]):
            return candidate
    for candidate in candidates:
        if not re.match(r"(?:raise|return|File) ", candidate["message"]):
            return candidate
    return candidates[0]


def _failure(run, lines_by_number, kv_tokens, max_model_len):
    """The failure object of a run that did not start, or None."""
    chosen = None
    if run["failures"]:
        first_kind = run["failures"][0]["kind"]
        chosen = dict(_best([f for f in run["failures"] if f["kind"] == first_kind]), inferred=False)
    elif run["exceptions"]:
        real = [e for e in run["exceptions"] if not WRAPPER_EXCEPTIONS.search(e["message"])]
        pick = (real or run["exceptions"])[0]
        kind = "argument_error" if "arguments" in pick["hints"] else "other"
        chosen = dict(pick, kind=kind, inferred=False)
    # Cases where vLLM's message is missing (excerpts, kills) but the numbers say it.
    negative = [k for k in run["kv_available"] if k[0] is not None and k[0] <= 0]
    zero_blocks = [b for b in run["kv_blocks"] if b[0] == 0]
    v0_short = (run["kv_blocks"] and not run["concurrency"] and kv_tokens is not None
                and max_model_len and kv_tokens < max_model_len)
    if chosen is None or chosen["kind"] == "other" and WRAPPER_EXCEPTIONS.search(chosen["message"]):
        evidence = negative or zero_blocks
        if evidence:
            number, message = evidence[0][1], evidence[0][2]
            chosen = {"kind": "kv_cache_insufficient", "line": number, "message": message,
                      "hints": ["kv_cache_allocated"], "inferred": True}
        elif v0_short and (chosen is not None or run["in_traceback"]):
            number, message = run["kv_blocks"][0][1], run["kv_blocks"][0][2]
            chosen = {"kind": "kv_cache_insufficient", "line": number,
                      "message": "%s (x%d = %d tokens < max_model_len %d)" % (
                          message, run["block_size"] or DEFAULT_BLOCK_SIZE, kv_tokens, max_model_len),
                      "hints": ["kv_cache_allocated"], "inferred": True}
    if chosen is None:
        return None
    chosen["message"] = _join_wrapped(lines_by_number, chosen["line"], chosen["message"])
    return chosen


def _stage_of_failure(failure, reached):
    """The stage the start was attempting when it failed."""
    if failure["kind"] == "kv_cache_insufficient":
        return "kv_cache_allocated", True
    if failure["kind"] in ("gated_model", "argument_error", "import_error"):
        return "engine_start", True
    staged = [h for h in failure.get("hints", []) if h in _ORDER]
    if staged:
        return staged[-1], True
    after = max([_ORDER[s] for s in reached] or [-1]) + 1
    return STAGES[min(after, len(STAGES) - 1)], False


def report_run(run, lines_by_number):
    reached = set(run["seen"])
    for stage in list(reached):
        for earlier in STAGES[:_ORDER[stage]]:
            if earlier != "graphs_captured":
                reached.add(earlier)

    if run["kv_tokens"]:
        kv_tokens = min(run["kv_tokens"])
    elif run["kv_blocks"]:
        kv_tokens = min(b[0] for b in run["kv_blocks"]) * (run["block_size"] or DEFAULT_BLOCK_SIZE)
    else:
        kv_tokens = None
    concurrency = min((c[0] for c in run["concurrency"] if c[0] is not None), default=None)
    if run["concurrency"]:
        max_model_len = run["concurrency"][0][1]
    else:
        max_model_len = run["max_seq_len_cfg"] or run["max_model_len_arg"] or run["max_len_in_error"]
    kv_gib_values = [k[0] for k in run["kv_available"] if k[0] is not None] or \
        [k for k in run["kv_v0"] if k is not None]

    started = _started(run)
    engine_ready = run["init_engine_s"] is not None or "graphs_captured" in run["seen"]
    if run["server_front"] or "api_server_started" in run["seen"]:
        mode = "server"
    elif engine_ready:
        mode = "embedded"
    else:
        mode = "unknown"
    if not started and engine_ready and mode == "embedded":
        # Offline LLM() or an engine inside another framework (verl, corpus 051):
        # there is no vLLM API server to wait for.
        started = True

    failure = None
    if not started:
        failure = _failure(run, lines_by_number, kv_tokens, max_model_len)
        if failure is None:
            number, message = run["last_line"] or (0, "")
            failure = {"kind": "incomplete", "line": number,
                       "message": "log ends before the start completed; last line: %s" % message[:300],
                       "hints": [], "inferred": True}
        stage, evidenced = _stage_of_failure(failure, reached)
        if failure["kind"] == "kv_cache_insufficient":
            reached -= {"kv_cache_allocated", "graphs_captured", "api_server_started"}
        if evidenced:
            for earlier in STAGES[:_ORDER[stage]]:
                if earlier != "graphs_captured":
                    reached.add(earlier)
        failure["stage"] = stage
        failure.pop("hints", None)

    warnings = list(run["warning_details"])
    if concurrency is not None and concurrency < 1.0:
        warnings.append({"kind": "concurrency_below_1", "line": None,
                         "message": "maximum concurrency %.2fx: one %s-token request does not fit"
                                    % (concurrency, max_model_len)})
    elif concurrency is None and kv_tokens is not None and max_model_len and kv_tokens < max_model_len:
        warnings.append({"kind": "concurrency_below_1", "line": None,
                         "message": "%d KV tokens < max_model_len %d" % (kv_tokens, max_model_len)})
    if run["after_start"]:
        warnings.append(dict(run["after_start"], kind="error_after_start"))
    if run["hang"] and not started:
        warnings.append({"kind": "worker_hang_suspected", "line": run["hang"][0], "message": run["hang"][1]})

    last_stage = max(reached, key=lambda s: _ORDER[s]) if reached else None
    return {
        "started": started,
        "engine_ready": engine_ready,
        "mode": mode,
        "last_stage": last_stage,
        "stages": [s for s in STAGES if s in reached],
        "failure": failure,
        "kv_cache_tokens": kv_tokens,
        "kv_cache_gib": min(kv_gib_values) if kv_gib_values else None,
        "max_concurrency": concurrency,
        "max_model_len": max_model_len,
        "weights_gib": max(w for w in run["weights"] if w is not None) if run["weights"] else None,
        "gpu_memory_utilization": run["gmu"],
        "graph_capture_s": max(run["graph_s"]) if run["graph_s"] else None,
        "init_engine_s": run["init_engine_s"],
        "enforce_eager": run["enforce_eager"],
        "api_url": run["api_url"],
        "vllm_version": run["version"],
        "profile": _profile(run),
        "warnings": sorted({w["kind"] for w in warnings}, key=[w["kind"] for w in warnings].index),
        "warning_details": warnings,
    }


def _profile(run):
    """What the profiling run measured, where the log prints it: the rank with the largest
    activation (it sets the smallest KV share); the CUDA-graph estimate and whether it was
    subtracted (0.20+)."""
    if not run["profile"] and not run["graph_estimate"]:
        return None
    activation, non_torch = max(run["profile"], key=lambda p: p[0] or 0) if run["profile"] else (None, None)
    return {
        "activation_gib": None if activation is None else round(activation, 3),
        "non_torch_gib": None if non_torch is None else round(non_torch, 3),
        "cuda_graph_estimate_gib": max(run["graph_estimate"]) if run["graph_estimate"] else None,
        "cuda_graph_profiling": run["graph_profiling_on"],
    }


def parse(text):
    """Report on a vLLM startup log (str or bytes); never raises on odd input."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text or ""
    runs = [_new_run()]
    lines_by_number = {}
    for number, raw, level, message, proc, rank in _lines(text):
        lines_by_number.setdefault(number, raw)
        if _starts_new_run(runs[-1], message):
            runs.append(_new_run())
        _feed(runs[-1], number, raw, level, message, proc, rank)
    result = report_run(runs[-1], lines_by_number)
    result["runs"] = len(runs)
    return result


def render_text(report):
    """Readable report for the CLI."""
    def show(value, unit=""):
        return "-" if value is None else "%s%s" % (value, unit)

    head = "STARTED" if report["started"] else "NOT STARTED"
    lines = ["vLLM startup: %s (last stage: %s, vLLM %s, %d run%s in the log)" % (
        head, show(report["last_stage"]), show(report["vllm_version"]), report["runs"],
        "" if report["runs"] == 1 else "s")]
    lines.append("  stages        %s" % (", ".join(report["stages"]) or "-"))
    lines.append("  weights       %s" % show(report["weights_gib"], " GiB"))
    lines.append("  KV cache      %s tokens, %s GiB" % (
        show(report["kv_cache_tokens"] if report["kv_cache_tokens"] is None else "{:,}".format(report["kv_cache_tokens"])),
        show(report["kv_cache_gib"])))
    lines.append("  concurrency   %s at max_model_len %s" % (
        show(report["max_concurrency"], "x"), show(report["max_model_len"])))
    lines.append("  utilisation   %s" % show(report["gpu_memory_utilization"]))
    lines.append("  graph capture %s   init engine %s" % (
        show(report["graph_capture_s"], " s"), show(report["init_engine_s"], " s")))
    if report["api_url"]:
        lines.append("  API           %s" % report["api_url"])
    failure = report["failure"]
    if failure:
        lines.append("  FAILURE       %s at %s (line %s%s): %s" % (
            failure["kind"], failure["stage"], failure["line"],
            ", inferred" if failure.get("inferred") else "", failure["message"]))
    for warning in report["warning_details"]:
        lines.append("  warning       %s: %s" % (warning["kind"], warning["message"][:300]))
    return "\n".join(lines) + "\n"
