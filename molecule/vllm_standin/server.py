#!/usr/bin/python3
"""vLLM stand-in: what the vllm/vllm-openai image does at start, without a GPU or a model.

Test harness only (molecule scenario `vllm`); the product never looks for it. Stdlib only,
Python >= 3.9. It is the entrypoint of the image local/vllm-standin (ENTRYPOINT ["vllm", "serve"],
as the real image's), so the role deploys it through the same tasks as the real image: only
`vllm_instances[].image` differs. README.md next to this file states every rule it follows.

At start it
  1. parses vLLM's command line (`vllm serve [model_tag] [options]`; unknown options fail as
     argparse does in vLLM: `vllm serve: error: unrecognized arguments: ...`);
  2. binds the API socket first (vLLM does, so a taken port fails before the engine starts);
  3. reads the GPUs the container was given from the injected `nvidia-smi` (none: vLLM's
     "Failed to infer device type"); on a MIG-enabled GPU, as CUDA does, only the MIG devices it was
     given there, each with its own memory (a MIG-enabled GPU given whole is no device);
  4. reads config.json and the safetensors headers of the model directory (never tensor data);
  5. checks free GPU memory against the budget (vLLM's "Free memory on device ..." error), both
     as CUDA reports them: nvidia-smi's total and free less the driver's reserved memory;
  6. "loads" the weights: torch stages each tensor through /dev/shm, so a tensor larger than the
     free /dev/shm space - or any tensor-parallel start, whose workers' broadcast ring alone is
     10 x 16 MiB - fails as torch does: `unable to open shared memory object </torch_...> in
     read-write mode: No space left on device (28)`;
  7. sizes the KV cache as vLLM 0.25.1 does - budget on CUDA's total, minus the weights, the
     profiling run's activation peak and non-torch memory, and the estimated CUDA-graph memory
     (printed as 0.25.1 prints it) - with module_utils/serving/vllm_plan.py's and vllm_model.py's
     arithmetic (copied into the image) and the figures its "profiling" measures (below); it fails as vLLM's
     check_enough_kv_cache_memory does when one max-length request does not fit;
  8. prints every line in the format of vLLM 0.2x (corpus 001/024/035), then serves /health,
     /metrics, /v1/models, /v1/chat/completions and /v1/completions until SIGTERM.

What "profiling" measures (there is nothing to measure): non-torch memory
$GPUHOST_STANDIN_NON_TORCH_GIB and the activation peak $GPUHOST_STANDIN_ACTIVATION_GIB (default:
the plan's own estimates for vLLM 0.25.1). Setting them is how a test makes the log differ from
the plan.

Serving (the API section below has the sources): both completion endpoints answer whole or streamed
(`"stream": true`: vLLM's SSE chunks, `stream_options.include_usage`'s usage chunk, `data: [DONE]`). A request
waits for one of max_num_seqs batch slots, then "prefills" for $GPUHOST_STANDIN_FIRST_REQUEST_S / n^2 (the n-th
request's JIT cost) + $GPUHOST_STANDIN_PREFILL_TOKEN_S per prompt token, then yields a token every
$GPUHOST_STANDIN_TOKEN_S (all default 0 here, so unit tests are fast; the image sets realistic ones). /metrics
counts it all under vLLM's metric names. While it serves it keeps a load record where the simulated nvidia-smi
reads it ($GPUSIM_LOAD_DIR, default /var/lib/gpu-sim/load, which the simulator's hook binds into the container;
molecule/simulator/gpusim/load.py): its GPUs' UUIDs, requests in flight, max_num_seqs and, with
$GPUHOST_STANDIN_HOLD_MEMORY=1, the --gpu-memory-utilization budget it holds on each GPU. `vllm bench serve` is
bench.py.
"""
import argparse
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.realpath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# The product's module_utils, copied into the image next to this file with the CLI's path helper, which
# serves them as ansible.module_utils.<package>.<name>, the one name they import each other by (the unit
# tests' conftest serves them so too).
if os.path.exists(os.path.join(HERE, "module_utils_path.py")):
    from module_utils_path import install  # noqa: E402
    install(os.path.join(HERE, "module_utils"))

from ansible.module_utils.gpu.nvsmi_common import ParseError  # noqa: E402
from ansible.module_utils.gpu.nvsmi_csv import parse_query_gpu_csv  # noqa: E402
from ansible.module_utils.gpu.nvsmi_parse import merge_mig_listing  # noqa: E402
from ansible.module_utils.gpu.nvsmi_q import parse_q  # noqa: E402
from ansible.module_utils.serving import vllm_model, vllm_overheads, vllm_plan  # noqa: E402
from ansible.module_utils.serving.safetensors_header import (  # noqa: E402
    checkpoint_weight_bytes, read_header, tensor_bytes)

VLLM_VERSION = "0.25.1"
GIB = 1024 ** 3
MIB = 1024 ** 2
# vLLM's shm broadcast ring between the engine and its workers (TP > 1): 10 chunks of
# VLLM_MQ_MAX_CHUNK_BYTES_MB (16) MiB.
TP_SHM_RING_BYTES = 10 * 16 * MIB
SITE = "/usr/local/lib/python3.12/dist-packages"
API_PID = 1


class StartFailure(Exception):
    """The start stops here; lines are already printed, `code` is the exit status."""

    def __init__(self, code=1):
        Exception.__init__(self, code)
        self.code = code


# ---------------------------------------------------------------- what the container offers

class Host(object):
    """What the stand-in reads from its container. Unit tests pass a fake one."""

    def __init__(self, env=None):
        self.env = os.environ if env is None else env

    def _smi(self, args):
        try:
            proc = subprocess.run(["nvidia-smi"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    def gpus(self):
        """The CUDA devices: [{index, name, total_mib, reserved_mib, used_mib, free_mib, compute_cap}], or None."""
        fields = "index,name,uuid,memory.total,memory.reserved,memory.used,memory.free,compute_cap,mig.mode.current"
        text = self._smi(["--query-gpu=" + fields, "--format=csv"])
        if text is None:
            return None
        try:
            rows = parse_query_gpu_csv(text)["gpus"]
        except ParseError:
            return None
        if any(row.get("mig_mode") for row in rows):
            return self._mig_view(rows) or None
        return [_cuda_device(row) for row in rows] or None

    def _mig_view(self, rows):
        """CUDA on a MIG-enabled GPU enumerates the MIG devices the container was given there, not the GPU: each
        named `<GPU> MIG <profile>`, its memory the device's own (`-q` FB Memory Usage, Reserved 0 MiB). A
        MIG-enabled GPU given whole is no CUDA device at all."""
        listing, details = self._smi(["-L"]), self._smi(["-q"])
        if listing is None or details is None:
            return []
        try:
            # -q has each MIG device's memory, -L its profile and UUID; CUDA sees the devices -L lists
            queried = merge_mig_listing(parse_q(details), listing)
        except ParseError:
            return []
        by_index = dict((g["index"], g) for g in queried["gpus"])
        devices = []
        for row in rows:
            if not row.get("mig_mode"):
                devices.append(_cuda_device(row, len(devices)))
                continue
            for dev in (by_index.get(row["index"]) or {}).get("mig_devices") or []:
                if not dev["uuid"]:
                    continue
                total, used = dev.get("memory_total_mib") or 0, dev.get("memory_used_mib") or 0
                devices.append({"index": len(devices), "name": "%s MIG %s" % (row["name"], dev["profile"]),
                                "total_mib": total, "reserved_mib": 0, "used_mib": used, "free_mib": total - used,
                                "compute_cap": row.get("compute_capability"), "mig_device": dev["uuid"],
                                "uuid": row.get("uuid")})
        return devices

    def shm_free_bytes(self):
        try:
            st = os.statvfs("/dev/shm")
        except OSError:
            return 0
        return st.f_bavail * st.f_frsize

    def ram_gib(self):
        try:
            with open("/proc/meminfo") as handle:
                for line in handle:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) / 1024.0 / 1024.0
        except OSError:
            pass
        return 0.0

    def cache_root(self):
        return self.env.get("VLLM_CACHE_ROOT") or os.path.join(os.path.expanduser("~"), ".cache", "vllm")


def _cuda_device(row, index=None):
    """A whole GPU as CUDA counts it, from a parsed --query-gpu row."""
    return {"index": row["index"] if index is None else index, "name": row["name"],
            "total_mib": row["memory_total_mib"], "reserved_mib": row.get("memory_reserved_mib") or 0,
            "used_mib": row.get("memory_used_mib") or 0, "free_mib": row["memory_free_mib"],
            "compute_cap": row.get("compute_capability"), "uuid": row.get("uuid")}


# ---------------------------------------------------------------- the log

class Log(object):
    """vLLM's line format: '(PROC pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message'."""

    def __init__(self, out, err=None, clock=time.time):
        self.out = out
        self.err = err or out
        self.clock = clock
        self.engine_pid = 100 + os.getpid() % 900
        self.lock = threading.Lock()

    def _stamp(self):
        return time.strftime("%m-%d %H:%M:%S", time.localtime(self.clock()))

    def write(self, text, stream=None):
        with self.lock:
            (stream or self.out).write(text + "\n")
            (stream or self.out).flush()

    def api(self, level, where, message):
        self.write("(APIServer pid=%d) %s %s [%s] %s" % (API_PID, level, self._stamp(), where, message))

    def engine(self, level, where, message):
        self.write("(EngineCore pid=%d) %s %s [%s] %s" % (self.engine_pid, level, self._stamp(), where, message))

    def engine_raw(self, text):
        self.write("(EngineCore pid=%d) %s" % (self.engine_pid, text))

    def api_raw(self, text, stream=None):
        self.write("(APIServer pid=%d) %s" % (API_PID, text), stream)

    def uvicorn(self, message):
        self.api_raw("INFO:     " + message)

    def engine_exception(self, frames, exception):
        """logger.exception in EngineCore: 'EngineCore failed to start.' + the traceback, each
        line with the ERROR header (corpus 033)."""
        where = "core.py:946"
        self.engine("ERROR", where, "EngineCore failed to start.")
        self.engine("ERROR", where, "Traceback (most recent call last):")
        for path, line, func, code in frames:
            self.engine("ERROR", where, '  File "%s", line %d, in %s' % (path, line, func))
            self.engine("ERROR", where, "    " + code)
        self.engine("ERROR", where, exception)

    def api_engine_failed(self):
        """The API server's own traceback when its engine core died (on stderr)."""
        lines = [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/vllm", line 10, in <module>',
            "    sys.exit(main())",
            '  File "%s/vllm/entrypoints/cli/main.py", line 73, in main' % SITE,
            "    args.dispatch_function(args)",
            '  File "%s/vllm/entrypoints/cli/serve.py", line 60, in cmd' % SITE,
            "    uvloop.run(run_server(args))",
            '  File "%s/vllm/v1/engine/utils.py", line 960, in wait_for_engine_startup' % SITE,
            "    raise RuntimeError(",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
        for line in lines:
            self.api_raw(line, self.err)


def _frames(*names):
    """Traceback frames by short name (illustrative paths and line numbers of vLLM 0.2x)."""
    table = {
        "run_engine_core": ("vllm/v1/engine/core.py", 937, "run_engine_core",
                            "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
        "proc_init": ("vllm/v1/engine/core.py", 691, "__init__", "super().__init__("),
        "core_init_executor": ("vllm/v1/engine/core.py", 105, "__init__",
                               "self.model_executor = executor_class(vllm_config)"),
        "core_init_kv": ("vllm/v1/engine/core.py", 114, "__init__",
                         "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches("),
        "executor_init": ("vllm/v1/executor/abstract.py", 101, "__init__", "self._init_executor()"),
        "uniproc_init": ("vllm/v1/executor/uniproc_executor.py", 48, "_init_executor",
                         "self.driver_worker.load_model()"),
        "uniproc_init_device": ("vllm/v1/executor/uniproc_executor.py", 47, "_init_executor",
                                "self.driver_worker.init_device()"),
        "init_device": ("vllm/v1/worker/gpu_worker.py", 239, "init_device",
                        "raise ValueError("),
        "worker_load_model": ("vllm/v1/worker/gpu_worker.py", 273, "load_model",
                              "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
        "runner_load_model": ("vllm/v1/worker/gpu_model_runner.py", 5215, "load_model",
                              "self.model = model_loader.load_model("),
        "base_loader": ("vllm/model_executor/model_loader/base_loader.py", 56, "load_model",
                        "self.load_weights(model, model_config)"),
        "default_loader": ("vllm/model_executor/model_loader/default_loader.py", 300, "load_weights",
                           "loaded_weights = model.load_weights(self.get_all_weights(model_config, model))"),
        "weight_iter": ("vllm/model_executor/model_loader/weight_utils.py", 688, "safetensors_weights_iterator",
                        "param = param.share_memory_()"),
        "torch_share": ("torch/storage.py", 445, "share_memory_", "self._share_filename_cpu_()"),
        "init_kv": ("vllm/v1/engine/core.py", 246, "_initialize_kv_caches",
                    "kv_cache_configs = get_kv_cache_configs("),
        "get_configs": ("vllm/v1/core/kv_cache_utils.py", 1302, "get_kv_cache_configs",
                        "check_enough_kv_cache_memory("),
        "check_kv": ("vllm/v1/core/kv_cache_utils.py", 716, "check_enough_kv_cache_memory",
                     "raise ValueError("),
    }
    return [(SITE + "/" + table[n][0],) + table[n][1:] for n in names]


# ---------------------------------------------------------------- command line

class ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ArgumentError(message)


def _length(text):
    """--max-model-len: an integer, or vLLM's human-readable '32k' / '1m'."""
    text = str(text).strip().lower()
    scale = {"k": 1000, "m": 1000 ** 2}.get(text[-1:], 1)
    if text[-1:] in ("k", "m"):
        text = text[:-1]
    value = float(text) * scale
    if value != int(value) or value <= 0:
        raise argparse.ArgumentTypeError("invalid length %r" % text)
    return int(value)


def parser():
    p = _Parser(prog="vllm serve", usage="vllm serve [model_tag] [options]", add_help=True)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--max-model-len", type=_length)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)  # 0.20+
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--quantization", "-q")
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=sorted(vllm_model.KV_CACHE_DTYPE_BYTES))
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--block-size", type=int)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enable-prefix-caching", action="store_true", default=None)
    p.add_argument("--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    p.add_argument("--disable-log-requests", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--generation-config")
    p.add_argument("--seed", type=int)
    p.add_argument("--swap-space", type=float)
    p.add_argument("--download-dir")
    p.add_argument("--uvicorn-log-level")
    return p


def parse_args(argv):
    """(namespace, non-default args dict in vLLM's order)."""
    p = parser()
    args, unknown = p.parse_known_args(argv)
    if unknown:
        raise ArgumentError("unrecognized arguments: %s" % " ".join(unknown))
    defaults = vars(p.parse_args([]))
    non_default = {}
    for key, value in vars(args).items():
        if value != defaults.get(key):
            non_default[key] = value
    if args.model_tag and not args.model:
        non_default["model"] = args.model_tag
    order = ["model_tag", "host", "port", "api_key", "model"]
    ordered = {k: non_default[k] for k in order if k in non_default}
    ordered.update({k: v for k, v in non_default.items() if k not in ordered})
    return args, ordered


# ---------------------------------------------------------------- the start

def _gib(n):
    return n / float(GIB)


def on_the_fly_weight_bytes(model_dir, method):
    """Weights vLLM holds for a 16-bit checkpoint quantised at load (--quantization fp8 on a
    BF16 checkpoint): the linear layers' 2-D *_proj / experts weights at one byte per element,
    everything else (embeddings, lm_head, norms) as stored. None when nothing is quantised."""
    if (method or "").lower() not in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        return None
    found = checkpoint_weight_bytes(model_dir)
    total = 0
    for name in found["files"]:
        for key, entry in read_header(os.path.join(model_dir, name)).items():
            if key == "__metadata__" or not isinstance(entry, dict):
                continue
            size = tensor_bytes(entry)
            linear = key.endswith(".weight") and len(entry.get("shape") or []) == 2 and \
                ("_proj." in key or "experts" in key) and entry.get("dtype") in ("BF16", "F16", "F32")
            total += (size // {"BF16": 2, "F16": 2, "F32": 4}[entry["dtype"]]) if linear else size
    return total


def largest_tensor_bytes(model_dir):
    found = checkpoint_weight_bytes(model_dir)
    largest = 0
    for name in found["files"]:
        for key, entry in read_header(os.path.join(model_dir, name)).items():
            if key != "__metadata__" and isinstance(entry, dict):
                largest = max(largest, tensor_bytes(entry))
    return largest


def _env_float(env, name):
    value = env.get(name)
    if value in (None, ""):
        return None
    return float(value)


class Engine(object):
    """What a successful start leaves: the serving settings."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def start(argv, env=None, host=None, out=None, err=None, sleep=time.sleep, bind=True):
    """Run the start sequence; returns (Engine, listening socket or None). Raises StartFailure
    after printing the failure; the exit status is its `code`."""
    env = os.environ if env is None else env
    host = host or Host(env)
    log = Log(out or sys.stdout, err or sys.stderr)
    sleep(_env_float(env, "GPUHOST_STANDIN_IMPORT_S") or 0.0)  # python imports of the real image

    try:
        args, non_default = parse_args(argv)
    except ArgumentError as exc:
        log.write("usage: vllm serve [model_tag] [options]", log.err)
        log.write("vllm serve: error: %s" % exc, log.err)
        raise StartFailure(2)
    model = args.model_tag or args.model
    if not model:
        log.write("usage: vllm serve [model_tag] [options]", log.err)
        log.write("vllm serve: error: the following arguments are required: model_tag", log.err)
        raise StartFailure(2)

    banner = [
        "",
        "       \u2588     \u2588     \u2588\u2584   \u2584\u2588",
        " \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version %s" % VLLM_VERSION,
        "  \u2588\u2584\u2588\u2580 \u2588     \u2588     \u2588     \u2588  model   %s" % model,
        "   \u2580\u2580  \u2580\u2580\u2580\u2580\u2580 \u2580\u2580\u2580\u2580\u2580 \u2580     \u2580",
        "",
    ]
    for line in banner:
        log.api("INFO", "api_utils.py:339", line)
    log.api("INFO", "api_utils.py:273", "non-default args: %r" % (non_default,))
    if args.model and args.model_tag is None:
        log.api("WARNING", "serve.py:44", "With `vllm serve`, you should provide the model as a positional "
                "argument or in a config file instead of via the `--model` option. The `--model` option "
                "will be removed in a future version.")

    # vLLM binds the API socket before it builds the engine.
    listen_host = args.host or "0.0.0.0"
    sock = None
    if bind:
        try:
            sock = socket.socket(socket.AF_INET6 if ":" in listen_host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((listen_host, args.port))
            sock.listen(128)
            args.port = sock.getsockname()[1]
        except OSError as exc:
            log.api_raw("Traceback (most recent call last):", log.err)
            log.api_raw('  File "%s/vllm/entrypoints/openai/api_server.py", line 1883, in create_server_socket'
                        % SITE, log.err)
            log.api_raw("    sock.bind(addr)", log.err)
            log.api_raw("OSError: [Errno %d] %s" % (exc.errno or 98, exc.strerror or "Address already in use"),
                        log.err)
            raise StartFailure(1)

    gpus = host.gpus()
    if not gpus:
        log.api_raw("Traceback (most recent call last):", log.err)
        log.api_raw('  File "%s/vllm/config/device.py", line 58, in __post_init__' % SITE, log.err)
        log.api_raw("    raise RuntimeError(", log.err)
        log.api_raw("RuntimeError: Failed to infer device type, please set the environment variable "
                    "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.", log.err)
        raise StartFailure(1)

    model_dir = model
    if not os.path.isdir(model_dir) or not os.path.isfile(os.path.join(model_dir, "config.json")):
        log.api_raw("Traceback (most recent call last):", log.err)
        log.api_raw('  File "%s/vllm/transformers_utils/config.py", line 601, in get_config' % SITE, log.err)
        log.api_raw("    raise ValueError(", log.err)
        log.api_raw("ValueError: Invalid repository ID or local directory specified: '%s'." % model, log.err)
        raise StartFailure(1)
    with open(os.path.join(model_dir, "config.json")) as handle:
        config = json.load(handle)
    arch = vllm_model.model_arch(config, args.quantization)
    architecture = (config.get("architectures") or ["?"])[0]
    log.api("INFO", "model.py:619", "Resolved architecture: %s" % architecture)

    derived = arch["max_position_embeddings"]
    max_model_len = args.max_model_len or derived
    if derived and max_model_len > derived and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        log.api_raw("Traceback (most recent call last):", log.err)
        log.api_raw('  File "%s/vllm/config/model.py", line 2138, in _get_and_verify_max_len' % SITE, log.err)
        log.api_raw("    raise ValueError(msg)", log.err)
        log.api_raw("ValueError: User-specified max_model_len (%d) is greater than the derived max_model_len "
                    "(max_position_embeddings=%s or model_max_length=None in model's config.json). To allow "
                    "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_"
                    "LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position "
                    "encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses "
                    "absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
                    "array out-of-bounds error." % (max_model_len, float(derived)), log.err)
        raise StartFailure(1)
    log.api("INFO", "model.py:1776", "Using max model len %d" % max_model_len)
    # Batch defaults of this version on this GPU (arg_utils.get_batch_defaults).
    rules = vllm_overheads.generation(vllm_overheads.parse_version(VLLM_VERSION))[1]
    smallest = min(gpus[:max(1, args.tensor_parallel_size)], key=lambda g: g["total_mib"])
    batched, seqs = vllm_overheads.batch_defaults(
        rules, vllm_overheads.parse_version(VLLM_VERSION), (smallest["total_mib"] - smallest.get("reserved_mib", 0))
        / 1024.0, smallest["name"], max_model_len, multimodal=bool(arch.get("vision")),
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens)
    log.api("INFO", "scheduler.py:252", "Chunked prefill is enabled with max_num_batched_tokens=%d." % batched)

    quant = arch["quantization"]
    capability = gpus[0].get("compute_cap") or "9.0"
    if quant == "awq":
        log.api("INFO", "awq_marlin.py:116", "The model is convertible to awq_marlin during runtime. "
                "Using awq_marlin kernel.")
        quant = "awq_marlin"
    dtype = {"float16": "torch.float16", "fp16": "torch.float16", "half": "torch.float16"}.get(
        arch["dtype"], "torch.bfloat16")
    if args.dtype not in ("auto", None):
        dtype = "torch." + {"bf16": "bfloat16", "half": "float16", "fp16": "float16"}.get(args.dtype, args.dtype)
    served = args.served_model_name or [model]
    tp = args.tensor_parallel_size
    log.engine("INFO", "core.py:114",
               "Initializing a V1 LLM engine (v%s) with config: model=%r, speculative_config=None, "
               "tokenizer=%r, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
               "tokenizer_revision=None, trust_remote_code=%s, dtype=%s, max_seq_len=%d, download_dir=None, "
               "load_format=auto, tensor_parallel_size=%d, pipeline_parallel_size=%d, data_parallel_size=1, "
               "disable_custom_all_reduce=False, quantization=%s, enforce_eager=%s, kv_cache_dtype=%s, "
               "device_config=cuda, seed=0, served_model_name=%s, enable_prefix_caching=True, "
               "enable_chunked_prefill=True, pooler_config=None"
               % (VLLM_VERSION, model, model, args.trust_remote_code, dtype, max_model_len, tp,
                  args.pipeline_parallel_size, quant, args.enforce_eager, args.kv_cache_dtype, served[0]))
    if tp > len(gpus):
        log.engine_exception(_frames("run_engine_core", "proc_init", "core_init_executor", "executor_init"),
                             "AssertionError: please set tensor_parallel_size (%d) to less than max local gpu "
                             "count (%d)" % (tp, len(gpus)))
        log.api_engine_failed()
        raise StartFailure(1)
    log.engine("INFO", "parallel_state.py:1607", "world_size=%d rank=0 local_rank=0 distributed_init_method="
               "tcp://127.0.0.1:%d backend=nccl" % (tp, 40000 + os.getpid() % 20000))

    # init_device: the budget must be free when the engine starts; CUDA's figures leave out
    # the driver's reserved memory.
    mine = gpus[:tp]
    card = min(mine, key=lambda g: g["total_mib"])
    total_mib = card["total_mib"] - card.get("reserved_mib", 0)
    free_mib = min(g["free_mib"] for g in mine)
    util = args.gpu_memory_utilization
    if free_mib < util * total_mib:
        log.engine_exception(
            _frames("run_engine_core", "proc_init", "core_init_executor", "executor_init",
                    "uniproc_init_device", "init_device"),
            "ValueError: Free memory on device cuda:0 (%.2f/%.2f GiB) on startup is less than desired GPU "
            "memory utilization (%s, %.2f GiB). Decrease GPU memory utilization or reduce GPU memory used "
            "by other processes." % (free_mib / 1024.0, total_mib / 1024.0, util, util * total_mib / 1024.0))
        log.api_engine_failed()
        raise StartFailure(1)

    log.engine("INFO", "gpu_model_runner.py:5209", "Starting to load model %s..." % model)
    if (quant or "").startswith("fp8") and float(capability) < 8.9:
        log.engine("WARNING", "marlin_utils_fp8.py:121", "Your GPU does not have native support for FP8 "
                   "computation but FP8 quantization is being used. Weight-only FP8 compression will be "
                   "used leveraging the Marlin kernel. This may degrade performance for compute-heavy "
                   "workloads.")
    log.engine("INFO", "cuda.py:416", "Using AttentionBackendEnum.FLASH_ATTN backend.")

    found = checkpoint_weight_bytes(model_dir)
    weight_bytes = on_the_fly_weight_bytes(model_dir, args.quantization) or found["bytes"]
    log.engine("INFO", "weight_utils.py:574", "No model.safetensors.index.json found in remote.")
    log.engine("INFO", "weight_utils.py:849", "Filesystem type for checkpoints: OVERLAY. Checkpoint size: "
               "%.2f GiB. Available RAM: %.2f GiB." % (_gib(found["bytes"]), host.ram_gib()))
    shards = len(found["files"]) or 1
    log.engine_raw("Loading safetensors checkpoint shards:   0%% Completed | 0/%d [00:00<?, ?it/s]" % shards)

    # Weight loading stages each tensor (this rank's share of it) through /dev/shm; the
    # workers of a tensor-parallel start also need their broadcast ring there.
    need = -(-largest_tensor_bytes(model_dir) // tp) + (TP_SHM_RING_BYTES if tp > 1 else 0)
    shm_free = host.shm_free_bytes()
    if shm_free < need:
        name = "/torch_%d_%d_0" % (os.getpid(), random.randint(10 ** 8, 2 ** 31 - 1))
        log.engine_exception(
            _frames("run_engine_core", "proc_init", "core_init_executor", "executor_init", "uniproc_init",
                    "worker_load_model", "runner_load_model", "base_loader", "default_loader", "weight_iter",
                    "torch_share"),
            "RuntimeError: unable to open shared memory object <%s> in read-write mode: "
            "No space left on device (28)" % name)
        log.api_engine_failed()
        raise StartFailure(1)
    t0 = time.time()
    sleep(_env_float(env, "GPUHOST_STANDIN_LOAD_S") or 0.0)
    load_s = time.time() - t0
    log.engine_raw("Loading safetensors checkpoint shards: 100%% Completed | %d/%d [00:00<00:00, %.2fit/s]"
                   % (shards, shards, shards / max(load_s, 0.01)))
    log.engine_raw("")
    log.engine("INFO", "default_loader.py:430", "Loading weights took %.2f seconds" % load_s)
    weights_rank_gib = _gib(weight_bytes) / tp
    log.engine("INFO", "gpu_model_runner.py:5306", "Model loading took %.2f GiB memory and %.6f seconds"
               % (weights_rank_gib, load_s + 0.08))

    # torch.compile, with vLLM's compile cache (a persistent volume makes restarts shorter).
    compile_s = 0.0
    if not args.enforce_eager:
        key = hashlib.sha256(json.dumps([model, dtype, quant, tp, max_model_len, args.kv_cache_dtype,
                                         batched]).encode()).hexdigest()[:10]
        cache = os.path.join(host.cache_root(), "torch_compile_cache", key, "rank_0_0", "backbone")
        log.engine("INFO", "backends.py:1089", "Using cache directory: %s for vLLM's torch.compile" % cache)
        marker = os.path.join(cache, "standin-compiled-graph")
        hit = os.path.isfile(marker)
        t0 = time.time()
        if hit:
            sleep(_env_float(env, "GPUHOST_STANDIN_CACHE_LOAD_S") or 0.0)
            log.engine("INFO", "backends.py:161", "Directly load the compiled graph(s) for compile range "
                       "(1, %d) from the cache, took %.3f s" % (batched, time.time() - t0))
        else:
            log.engine("INFO", "backends.py:1148", "Dynamo bytecode transform time: 0.01 s")
            sleep(_env_float(env, "GPUHOST_STANDIN_COMPILE_S") or 0.0)
            log.engine("INFO", "backends.py:393", "Compiling a graph for compile range (1, %d) takes %.2f s"
                       % (batched, time.time() - t0))
            try:
                os.makedirs(cache, exist_ok=True)
                with open(marker, "w") as handle:
                    handle.write("%s\n" % model)
            except OSError:
                pass
        compile_s = time.time() - t0
        log.engine("INFO", "monitor.py:53", "torch.compile took %.2f s in total" % compile_s)
    log.engine("INFO", "monitor.py:81", "Initial profiling/warmup run took 0.05 s")

    # Profiling "measures" these (see the module docstring), then the KV pool is sized by the plan's
    # own arithmetic under this version's rules.
    non_torch = _env_float(env, "GPUHOST_STANDIN_NON_TORCH_GIB")
    activation = _env_float(env, "GPUHOST_STANDIN_ACTIVATION_GIB")
    spec = vllm_plan.build_spec(
        gpu_memory_mib=card["total_mib"], gpu_reserved_mib=card.get("reserved_mib", 0), gpu_name=card["name"],
        vllm_version=VLLM_VERSION, gpu_memory_utilization=util, max_model_len=max_model_len,
        model_dir=model_dir, weights_gib=_gib(weight_bytes), non_torch_gib=non_torch, activation_gib=activation,
        kv_cache_dtype=args.kv_cache_dtype, tensor_parallel_size=tp, quantization=args.quantization,
        block_size=args.block_size, max_num_batched_tokens=batched, max_num_seqs=seqs,
        enforce_eager=args.enforce_eager)
    kv = vllm_plan.compute(spec)
    if kv["cuda_graph_gib"]:
        pieces, full = vllm_overheads.cudagraph_sizes(seqs, batched, vllm_overheads.parse_version(VLLM_VERSION))
        log.engine("INFO", "gpu_model_runner.py:6534", "Profiling CUDA graph memory: PIECEWISE=%d (largest=%d), "
                   "FULL=%d (largest=%d)" % (len(pieces), max(pieces), len(full), max(full or [0])))
        log.engine("INFO", "gpu_model_runner.py:6639", "Estimated CUDA graph memory: %.2f GiB total"
                   % kv["cuda_graph_gib"])
    log.engine("INFO", "gpu_worker.py:538", "Available KV cache memory: %.2f GiB" % kv["kv_cache_gib"])
    if kv["cuda_graph_gib"]:
        share = kv["cuda_graph_gib"] * 1024.0 / total_mib
        log.engine("INFO", "gpu_worker.py:553", "CUDA graph memory profiling is enabled (default since v0.21.0). "
                   "The current --gpu-memory-utilization=%.4f is equivalent to --gpu-memory-utilization=%.4f "
                   "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, "
                   "increase --gpu-memory-utilization to %.4f. To disable, set "
                   "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0." % (util, util - share, util + share))
    check = _frames("run_engine_core", "proc_init", "core_init_kv", "init_kv", "get_configs", "check_kv")
    if kv["kv_cache_gib"] <= 0:
        log.engine_exception(check, "ValueError: No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine.")
        log.api_engine_failed()
        raise StartFailure(1)
    arch_spec = spec["arch"]
    per_layer = vllm_model.layer_kv_bytes(
        arch_spec, vllm_model.kv_dtype_bytes(args.kv_cache_dtype, arch_spec["dtype_bytes"]), tp)
    block = spec["block_size"] or vllm_plan.BLOCK_SIZE
    needed = vllm_model.request_kv_bytes(arch_spec["layers"], per_layer, max_model_len, block, batched)
    available = kv["kv_cache_gib"] * GIB
    if needed > available:
        estimate = 0
        lo, hi = 1, max_model_len
        while lo <= hi:  # vLLM's estimate_max_model_len: the longest request that fits
            mid = (lo + hi) // 2
            if vllm_model.request_kv_bytes(arch_spec["layers"], per_layer, mid, block, batched) <= available:
                estimate, lo = mid, mid + 1
            else:
                hi = mid - 1
        log.engine_exception(
            check, "ValueError: To serve at least one request with the model's max seq len (%d), (%.2f GiB "
            "KV cache is needed, which is larger than the available KV cache memory (%.2f GiB). Based on "
            "the available memory, the estimated maximum model length is %d. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
            % (max_model_len, needed / float(GIB), available / float(GIB), estimate))
        log.api_engine_failed()
        raise StartFailure(1)
    log.engine("INFO", "kv_cache_utils.py:2146", "GPU KV cache size: {:,} tokens".format(kv["kv_cache_tokens"]))
    log.engine("INFO", "kv_cache_utils.py:2147", "Maximum concurrency for {:,} tokens per request: {:.2f}x".format(
        max_model_len, kv["max_concurrency"]))

    graph_s = 0
    if not args.enforce_eager:
        t0 = time.time()
        sleep(_env_float(env, "GPUHOST_STANDIN_GRAPH_S") or 0.0)
        graph_s = time.time() - t0
        log.engine_raw("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|\u2588\u2588\u2588\u2588\u2588"
                       "\u2588\u2588\u2588\u2588\u2588| 51/51 [00:00<00:00, 51.00it/s]")
        log.engine_raw("Capturing CUDA graphs (decode, FULL): 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588"
                       "\u2588\u2588| 35/35 [00:00<00:00, 35.00it/s]")
        log.engine("INFO", "gpu_model_runner.py:6707", "Graph capturing finished in %d secs, took 0.38 GiB"
                   % int(round(graph_s)))
    log.engine("INFO", "core.py:337", "init engine (profile, create kv cache, warmup model) took %.2f s "
               "(compilation: %.2f s)" % (compile_s + graph_s + 0.1, compile_s))
    log.api("INFO", "api_server.py:612", "Supported tasks: ['generate']")
    api_key = args.api_key or env.get("VLLM_API_KEY") or None
    shown = "[%s]" % listen_host if ":" in listen_host else listen_host
    log.api("INFO", "api_server.py:616", "Starting vLLM server on http://%s:%d" % (shown, args.port))
    log.api("INFO", "launcher.py:37", "Available routes are:")
    for route, methods in ROUTES:
        log.api("INFO", "launcher.py:46", "Route: %s, Methods: %s" % (route, methods))
    log.uvicorn("Started server process [%d]" % API_PID)
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    # What the engine holds on each of its GPUs: CUDA's total (less the driver's reserved memory) x the utilization.
    budget_mib = int(util * total_mib)
    recorder = LoadRecorder(env, [g.get("uuid") for g in mine if g.get("uuid")], seqs,
                            budget_mib if env.get("GPUHOST_STANDIN_HOLD_MEMORY") == "1" else 0)
    engine = Engine(model=model, served=served, max_model_len=max_model_len, max_num_seqs=seqs,
                    api_key=api_key, log=log, env=env, sleep=sleep, kv=kv, host=listen_host, port=args.port,
                    requests=0, lock=threading.Lock(), slots=threading.BoundedSemaphore(seqs),
                    metrics=Metrics(served[0], max_model_len, kv.get("kv_cache_tokens") or 0), recorder=recorder)
    return engine, sock


# ---------------------------------------------------------------- the API
#
# What vLLM's OpenAI server answers, as far as the harness needs it: /health, /metrics, /v1/models,
# /v1/chat/completions and /v1/completions, streamed or not. Sources (vllm-project/vllm):
# entrypoints/openai/completion/serving.py (completion_stream_generator: every chunk dumped with
# exclude_unset=False, the usage chunk with exclude_none, `data: [DONE]`), chat_completion/serving.py (the role
# chunk `{"role":"assistant","content":""}` first, then content deltas, `finish_reason`/`stop_reason` on the
# last, all dumped with exclude_unset=True), completion/protocol.py (the fields); v1/metrics/loggers.py @ 005a810b
# (metric names, HELP texts, buckets, the model_name/engine labels) and docs/research/serving-acceptance.md 3.

# The routes this stand-in serves, in the order vLLM 0.25.1 lists them (corpus 001 lists these among others).
ROUTES = (("/health", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"),
          ("/v1/completions", "POST"))
WORDS = ("This reply comes from the gpuhost vLLM stand-in: no model ran and no GPU worked. " * 8).split()


def _count_tokens(text):
    return max(1, len(str(text)) // 4)


def _content_text(content):
    """A message's text: a string, or the text parts of OpenAI's content list (what `vllm bench serve` sends)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content or ""


def _error(status, message, kind, param=None):
    return status, {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _check_request(engine, body, prompt):
    """(status, payload) of a refused request, or None. `prompt`: its token count."""
    name = body.get("model")
    if name is not None and name not in engine.served:
        return _error(404, "The model `%s` does not exist." % name, "NotFoundError", "model")
    wanted = _wanted(body)
    if prompt + wanted > engine.max_model_len:
        return _error(400, "This model's maximum context length is %d tokens. However, you requested %d tokens "
                      "(%d in the messages, %d in the completion). Please reduce the length of the messages or "
                      "completion." % (engine.max_model_len, prompt + wanted, prompt, wanted), "BadRequestError")
    return None


def _wanted(body):
    wanted = body.get("max_completion_tokens") or body.get("max_tokens")
    return int(wanted) if wanted else 16


def chat_prompt_tokens(body):
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    return sum(_count_tokens(_content_text(m.get("content", ""))) + 4 for m in messages if isinstance(m, dict))


def completion_prompt_tokens(body):
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return _count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)   # token ids
    return None


def generate(engine, prompt, wanted, on_token=None):
    """Run one request as the engine would: wait for a batch slot (max_num_seqs), "prefill" the prompt, then
    produce `wanted` tokens one by one, calling on_token(text, index) for each (a stream writes a chunk). Records
    the metrics and the GPUs' load. Returns (text, finish_reason); an exception from on_token (the client went
    away) aborts the request and is raised again."""
    with engine.lock:
        engine.requests += 1
        number = engine.requests
    metrics = getattr(engine, "metrics", None)
    slots = getattr(engine, "slots", None)
    recorder = getattr(engine, "recorder", None)
    arrived = time.monotonic()
    if metrics:
        metrics.waiting(1)
    if slots:
        slots.acquire()
    scheduled = time.monotonic()
    if metrics:
        metrics.waiting(-1)
        metrics.running(1, prompt)
    if recorder:
        recorder.change(1)
    env = engine.env
    # The first requests are slow (JIT, cache misses) and settle after a few (domain.md section 5).
    first = _env_float(env, "GPUHOST_STANDIN_FIRST_REQUEST_S") or 0.0
    prefill = _env_float(env, "GPUHOST_STANDIN_PREFILL_TOKEN_S") or 0.0
    per_token = _env_float(env, "GPUHOST_STANDIN_TOKEN_S") or 0.0
    pieces, times, reason = [], [], "length"
    try:
        engine.sleep(first / (number * number) + prefill * prompt)
        for i in range(wanted):
            if i:
                engine.sleep(per_token)
            piece = (" " if i else "") + WORDS[i % len(WORDS)]
            pieces.append(piece)
            times.append(time.monotonic())
            if metrics:
                metrics.token()
            if on_token:
                on_token(piece, i)
    except Exception:
        reason = "abort"
        raise
    finally:
        done = time.monotonic()
        if metrics:
            metrics.finished(prompt, wanted, len(pieces), reason, arrived, scheduled, times, done)
        if recorder:
            recorder.change(-1)
        if slots:
            slots.release()
    return "".join(pieces), reason


def _usage(prompt, completion):
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None}


def _reply(engine, body, prompt_tokens, missing, id_prefix, kind, choice):
    """(status, payload) of one request that is not streamed: the body checked, the tokens generated, the payload
    with `choice(text, reason)` as its one choice."""
    if not isinstance(body, dict):
        return _error(400, "Request body must be a JSON object.", "BadRequestError")
    prompt = prompt_tokens(body)
    if prompt is None:
        return _error(400, *missing)
    refused = _check_request(engine, body, prompt)
    if refused:
        return refused
    wanted = _wanted(body)
    text, reason = generate(engine, prompt, wanted)
    return 200, {
        "id": "%s-%032x" % (id_prefix, random.getrandbits(128)), "object": kind, "created": int(time.time()),
        "model": body.get("model") or engine.served[0],
        "choices": [dict({"index": 0}, **choice(text, reason))],
        "usage": _usage(prompt, wanted),
    }


def chat_reply(engine, body):
    """(status, payload) of one /v1/chat/completions request (not streamed)."""
    return _reply(engine, body, chat_prompt_tokens, ("messages: Field required", "BadRequestError"), "chatcmpl",
                  "chat.completion",
                  lambda text, reason: {"message": {"role": "assistant", "content": text, "tool_calls": []},
                                        "logprobs": None, "finish_reason": reason, "stop_reason": None})


def completion_reply(engine, body):
    """(status, payload) of one /v1/completions request (not streamed)."""
    return _reply(engine, body, completion_prompt_tokens,
                  ("Either prompt or prompt_embeds must be provided and non-empty.", "BadRequestError", "prompt"),
                  "cmpl", "text_completion",
                  lambda text, reason: {"text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None,
                                        "prompt_logprobs": None})


def _json(obj):
    """pydantic's model_dump_json: compact, keys in field order."""
    return json.dumps(obj, separators=(",", ":"))


def stream_events(engine, body, chat, send):
    """Stream one request as SSE: send(text) per event (`data: {...}\\n\\n`). Returns the HTTP error (status,
    payload) instead when the request is refused before the stream starts."""
    prompt = chat_prompt_tokens(body) if chat else completion_prompt_tokens(body)
    if prompt is None:
        return _error(400, "messages: Field required" if chat else
                      "Either prompt or prompt_embeds must be provided and non-empty.", "BadRequestError")
    refused = _check_request(engine, body, prompt)
    if refused:
        return refused
    wanted = _wanted(body)
    options = body.get("stream_options") or {}
    head = {"id": ("chatcmpl-%032x" if chat else "cmpl-%032x") % random.getrandbits(128),
            "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
            "model": body.get("model") or engine.served[0]}

    def on_token(piece, i):
        last = i == wanted - 1
        if chat:
            if i == 0:   # the role chunk vLLM sends before the first token
                send("data: %s\n\n" % _json(dict(head, choices=[
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                     "finish_reason": None}])))
            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None,
                      "finish_reason": "length" if last else None}
            if last:
                choice["stop_reason"] = None
            send("data: %s\n\n" % _json(dict(head, choices=[choice])))
        else:
            send("data: %s\n\n" % _json(dict(head, choices=[
                {"index": 0, "text": piece, "logprobs": None, "finish_reason": "length" if last else None,
                 "stop_reason": None, "prompt_token_ids": None, "token_ids": None}], usage=None)))
    generate(engine, prompt, wanted, on_token)
    if options.get("include_usage"):
        send("data: %s\n\n" % _json(dict(head, choices=[], usage={
            "prompt_tokens": prompt, "total_tokens": prompt + wanted, "completion_tokens": wanted})))
    send("data: [DONE]\n\n")
    return None


def models_reply(engine):
    now = int(time.time())
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": engine.model,
         "parent": None, "max_model_len": engine.max_model_len,
         "permission": [{"id": "modelperm-%016x" % random.getrandbits(64), "object": "model_permission",
                         "created": now, "allow_create_engine": False, "allow_sampling": True,
                         "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                         "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}
        for name in engine.served]}


# ---------------------------------------------------------------- /metrics

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
# loggers.py @ 005a810b gives these to time_per_output_token_seconds; inter_token_latency_seconds, its 0.11
# replacement, is assumed to keep them (its own bucket list was not read).
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort")


def _go_float(value):
    """prometheus_client's floatToGoString: how every number of the exposition is written."""
    value = float(value)
    if value == float("inf"):
        return "+Inf"
    if value == float("-inf"):
        return "-Inf"
    if value != value:
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = "{0}.{1}{2}".format(text[0], text[1:dot], text[dot + 1:]).rstrip("0.")
        return "{0}e+0{1}".format(mantissa, dot - 1)
    return text


def _1_2_5_buckets(top):
    """loggers.py build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    out, exponent = [], 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** exponent > top:
                return out
            out.append(m * 10 ** exponent)
        exponent += 1


class _Histogram(object):
    def __init__(self, buckets):
        self.bounds = [float(b) for b in buckets] + [float("inf")]
        self.counts = [0] * len(self.bounds)
        self.total = 0.0

    def observe(self, value):
        self.total += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break


class Metrics(object):
    """The vLLM V1 engine's Prometheus metrics (names, HELP, buckets of loggers.py), as prometheus_client writes
    them: counters with `_total`, labels sorted (`engine`, `model_name`; `finished_reason` between them), histograms
    as cumulative `_bucket` lines then `_count` and `_sum`. No `_created` series (vLLM's API server serves them
    through prometheus_client's multiprocess collector, which writes none)."""

    def __init__(self, model_name, max_model_len, kv_cache_tokens):
        self.lock = threading.Lock()
        self.model_name = model_name
        self.kv_cache_tokens = kv_cache_tokens
        self.num_running = self.num_waiting = self.kv_tokens = 0
        self.prompt_tokens = self.generation_tokens = self.prefix_queries = 0
        self.success = dict((r, 0) for r in FINISH_REASONS)
        lengths = _1_2_5_buckets(max_model_len)
        self.hist = {
            "vllm:request_prompt_tokens": _Histogram(lengths),
            "vllm:request_generation_tokens": _Histogram(lengths),
            "vllm:request_params_max_tokens": _Histogram(lengths),
            "vllm:time_to_first_token_seconds": _Histogram(TTFT_BUCKETS),
            "vllm:inter_token_latency_seconds": _Histogram(ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": _Histogram(LATENCY_BUCKETS),
            "vllm:request_queue_time_seconds": _Histogram(LATENCY_BUCKETS),
            "vllm:request_inference_time_seconds": _Histogram(LATENCY_BUCKETS),
            "vllm:request_prefill_time_seconds": _Histogram(LATENCY_BUCKETS),
            "vllm:request_decode_time_seconds": _Histogram(LATENCY_BUCKETS),
        }

    def waiting(self, delta):
        with self.lock:
            self.num_waiting += delta

    def running(self, delta, prompt):
        with self.lock:
            self.num_running += delta
            self.kv_tokens += prompt
            self.prompt_tokens += prompt
            self.prefix_queries += prompt

    def token(self):
        with self.lock:
            self.generation_tokens += 1
            self.kv_tokens += 1

    def finished(self, prompt, wanted, made, reason, arrived, scheduled, times, done):
        with self.lock:
            self.num_running -= 1
            self.kv_tokens -= prompt + made
            self.success[reason] += 1
            h = self.hist
            h["vllm:request_prompt_tokens"].observe(prompt)
            h["vllm:request_generation_tokens"].observe(made)
            h["vllm:request_params_max_tokens"].observe(wanted)
            if times:
                h["vllm:time_to_first_token_seconds"].observe(times[0] - arrived)
                for a, b in zip(times, times[1:]):
                    h["vllm:inter_token_latency_seconds"].observe(b - a)
            first = times[0] if times else done
            h["vllm:e2e_request_latency_seconds"].observe(done - arrived)
            h["vllm:request_queue_time_seconds"].observe(scheduled - arrived)
            h["vllm:request_inference_time_seconds"].observe(done - scheduled)
            h["vllm:request_prefill_time_seconds"].observe(first - scheduled)
            h["vllm:request_decode_time_seconds"].observe(done - first)

    def render(self):
        labels = 'engine="0",model_name="%s"' % self.model_name.replace("\\", "\\\\").replace('"', '\\"')
        out = []

        def family(name, kind, help_text, samples):
            out.append("# HELP %s %s" % (name, help_text))
            out.append("# TYPE %s %s" % (name, kind))
            for suffix, extra, value in samples:
                out.append("%s%s{%s} %s" % (name, suffix, extra(labels), _go_float(value)))

        plain = lambda l: l  # noqa: E731
        with self.lock:
            usage = self.kv_tokens / float(self.kv_cache_tokens) if self.kv_cache_tokens else 0.0
            family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [("", plain, self.num_running)])
            family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", plain, self.num_waiting)])
            family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                   [("", plain, min(1.0, max(0.0, usage)))])
            family("vllm:prefix_cache_queries_total", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.", [("", plain, self.prefix_queries)])
            family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
                   [("", plain, 0)])
            family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                   [("", plain, 0)])
            family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                   [("", plain, self.prompt_tokens)])
            family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                   [("", plain, self.generation_tokens)])
            family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                   [("", (lambda r: lambda l: l.replace(",", ',finished_reason="%s",' % r, 1))(r), self.success[r])
                    for r in FINISH_REASONS])
            helps = {
                "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
                "vllm:request_generation_tokens": "Number of generation tokens processed.",
                "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
                "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
                "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
                "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
                "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
                "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
                "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
                "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
            }
            for name, hist in self.hist.items():
                samples, running = [], 0
                for bound, count in zip(hist.bounds, hist.counts):
                    running += count
                    samples.append(("_bucket", (lambda b: lambda l: l.replace(
                        ",model_name", ',le="%s",model_name' % _go_float(b), 1))(bound), running))
                samples += [("_count", plain, running), ("_sum", plain, hist.total)]
                family(name, "histogram", helps[name], samples)
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the GPUs' load (the simulator's records)

class LoadRecorder(object):
    """Keeps this engine's load record where the simulated nvidia-smi reads it (molecule/simulator/gpusim/load.py,
    whose format this writes without importing it: the image carries no gpusim of its own). Test harness only:
    a real vLLM has nothing like it. The record names the engine's GPUs by UUID, its requests in flight and batch
    capacity (max_num_seqs) and, with GPUHOST_STANDIN_HOLD_MEMORY=1, the memory it holds on each GPU; it is refreshed
    every HEARTBEAT_S while there is something to say (so it expires TTL_S after the engine dies) and removed at
    SIGTERM. Nothing is written where the directory does not exist (no simulator bound it into the container)."""

    HEARTBEAT_S = 2.0
    TTL_S = 10.0

    def __init__(self, env, uuids, capacity, memory_mib, clock=time.time):
        self.directory = env.get("GPUSIM_LOAD_DIR") or "/var/lib/gpu-sim/load"
        self.name = "vllm-standin-%s-%d" % (socket.gethostname(), os.getpid())
        self.uuids, self.capacity, self.memory_mib = list(uuids), capacity, memory_mib
        self.clock = clock
        self.in_flight, self.busy_since = 0, None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.enabled = bool(self.uuids) and os.path.isdir(self.directory)

    def record(self):
        return {"writer": "vllm-standin", "gpus": self.uuids, "in_flight": self.in_flight,
                "capacity": self.capacity, "busy_since": self.busy_since, "memory_mib": self.memory_mib,
                "updated": self.clock(), "ttl_s": self.TTL_S}

    def _write(self):
        if not self.enabled:
            return
        path = os.path.join(self.directory, self.name + ".json")
        tmp = os.path.join(self.directory, ".%s.tmp" % self.name)
        try:
            if not self.in_flight and not self.memory_mib:
                if os.path.exists(path):
                    os.unlink(path)
                return
            with open(tmp, "w") as handle:
                json.dump(self.record(), handle, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError:
            pass

    def change(self, delta):
        with self.lock:
            before = self.in_flight
            self.in_flight = max(0, self.in_flight + delta)
            if not before and self.in_flight:
                self.busy_since = self.clock()
            elif not self.in_flight:
                self.busy_since = None
            self._write()

    def start(self):
        """The heartbeat (and the first record of an engine that holds memory)."""
        if not self.enabled:
            return
        with self.lock:
            self._write()

        def beat():
            while not self.stopped.wait(self.HEARTBEAT_S):
                with self.lock:
                    if self.in_flight or self.memory_mib:
                        self._write()
        threading.Thread(target=beat, daemon=True).start()

    def stop(self):
        self.stopped.set()
        if self.enabled:
            with self.lock:
                self.in_flight, self.memory_mib = 0, 0
                self._write()


def make_handler(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):  # uvicorn's access log instead
            pass

        def _access(self, status):
            phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                      405: "Method Not Allowed"}.get(status, "")
            engine.log.uvicorn('%s:%d - "%s %s HTTP/1.1" %d %s' % (
                self.client_address[0], self.client_address[1], self.command, self.path.split("?")[0],
                status, phrase))

        def _send(self, status, payload=None, text=None):
            if text is not None:
                body, kind = text.encode(), "text/plain; version=0.0.4; charset=utf-8"
            else:
                body, kind = (b"" if payload is None else json.dumps(payload).encode()), "application/json"
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self._access(status)

        def _authorised(self):
            if not engine.api_key or not self.path.startswith("/v1"):
                return True
            return self.headers.get("Authorization", "") == "Bearer " + engine.api_key

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/health":
                self._send(200)
            elif path == "/metrics":
                self._send(200, text=engine.metrics.render())
            elif not self._authorised():
                self._send(401, {"error": "Unauthorized"})
            elif path == "/v1/models":
                self._send(200, models_reply(engine))
            elif path in ("/v1/chat/completions", "/v1/completions"):
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})

        def _stream(self, body, chat):
            """SSE in HTTP/1.1 chunks, as uvicorn sends a StreamingResponse of unknown length."""
            started = []

            def send(text):
                if not started:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream; charset=utf-8")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    self._access(200)
                    started.append(True)
                data = text.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            try:
                refused = stream_events(engine, body, chat, send)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            if refused:
                self._send(*refused)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def do_POST(self):
            path = self.path.split("?")[0]
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._authorised():
                self._send(401, {"error": "Unauthorized"})
                return
            if path not in ("/v1/chat/completions", "/v1/completions"):
                self._send(404, {"detail": "Not Found"})
                return
            try:
                body = json.loads(raw.decode() or "null")
            except ValueError:
                self._send(400, {"error": {"message": "Invalid JSON", "type": "BadRequestError",
                                           "param": None, "code": 400}})
                return
            chat = path == "/v1/chat/completions"
            if isinstance(body, dict) and body.get("stream"):
                self._stream(body, chat)
            else:
                self._send(*(chat_reply(engine, body) if chat else completion_reply(engine, body)))

    return Handler


def serve(engine, sock):
    server = ThreadingHTTPServer((engine.host, engine.port), make_handler(engine), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.daemon_threads = True
    engine.stop = server.shutdown

    recorder = getattr(engine, "recorder", None)
    if recorder is not None:
        recorder.start()

    def stop(signum, frame):
        if recorder is not None:
            recorder.stop()
        engine.log.uvicorn("Shutting down")
        engine.log.uvicorn("Waiting for application shutdown.")
        engine.log.uvicorn("Application shutdown complete.")
        engine.log.uvicorn("Finished server process [%d]" % API_PID)
        threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    server.serve_forever(poll_interval=0.2)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:   # `vllm bench serve ...` (bench.py): the load generator of the same image
        from bench import main as bench_main  # pylint: disable=import-outside-toplevel
        return bench_main(argv[1:])
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    # PID 1 in a container ignores SIGTERM unless a handler is installed: stop while starting, too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    try:
        engine, sock = start(argv)
    except StartFailure as failure:
        return failure.code
    return serve(engine, sock)


if __name__ == "__main__":
    sys.exit(main())
