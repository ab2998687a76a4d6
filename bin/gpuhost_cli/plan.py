"""gpuhost plan: the vLLM memory plan from the command line.

  gpuhost plan [--json] (--gpu NAME | --gpu-memory-mib N [--gpu-reserved-mib N])
               [--gpu-memory-utilization F] [--max-model-len N]
               (--model DIR | --weights-gib F --kv-bytes-per-token N)
               [--vllm-version V | --image REF] [--max-num-seqs N] [--max-num-batched-tokens N]
               [--enforce-eager] [--non-torch-gib F] [--activation-gib F] [--cuda-graph-gib F]
               [--kv-cache-dtype D] [--tensor-parallel-size N] [--held-mib N]
               [--instances N] [--other-utilization F ...] [--quantization Q] [--check]
               [--pooling] [--enable-expert-parallel] [--sampler auto|flashinfer|native]

  gpuhost plan [--json] --manifest FILE (--gpu NAME | --gpu-memory-mib N [--gpu-reserved-mib N])
               [--time-slicing FILE | --time-slicing-replicas N] [--held-mib N] [--outside-budget-mib N]

Example: gpuhost plan --gpu L4 --image vllm/vllm-openai:v0.11.0 --model /srv/models/Llama-3.1-8B \\
         --max-model-len 32000 --gpu-memory-utilization 0.92
         gpuhost plan --manifest vllm.yaml --gpu L4 --time-slicing-replicas 4

Exit 0 with the plan (1 with --check when the verdict is refuse; with --manifest, 1 on every
refuse); 2 on bad input, with one line on stderr (or {"error": ...} on stdout with --json).
"""
import json
import sys

from ansible.module_utils.gpu import gpu_memory
from ansible.module_utils.serving import k8s_manifest
from ansible.module_utils.serving import k8s_plan
from ansible.module_utils.serving import vllm_overheads
from gpuhost_cli.cli_io import Parser, UsageError, fail, read_input
from ansible.module_utils.serving.vllm_plan import plan, render_text
from ansible.module_utils.serving.vllm_plan_inputs import PlanError, resolve_version


def _parser():
    p = Parser(prog="gpuhost plan", description="vLLM memory plan before a start",
                epilog="GPUs the catalogue knows: %s. A Kubernetes manifest's replicas against one GPU: "
                       "gpuhost plan --manifest FILE --help" % ", ".join(gpu_memory.names()))
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gpu", dest="gpu_name", help="a catalogue GPU (its nvidia-smi total and reserved memory)")
    p.add_argument("--gpu-memory-mib", help="total memory of one GPU as nvidia-smi prints it (MiB)")
    p.add_argument("--gpu-reserved-mib", help="nvidia-smi -q FB Memory Usage -> Reserved (MiB)")
    p.add_argument("--gpu-memory-utilization", help="default: that vLLM version's (0.90; 0.92 from 0.20)")
    p.add_argument("--max-model-len", help="default: the model's max_position_embeddings")
    p.add_argument("--model", dest="model_dir", help="model directory (config.json + safetensors)")
    p.add_argument("--weights-gib", help="weights of the whole model (GiB)")
    p.add_argument("--kv-bytes-per-token", help="KV bytes per token, whole model, 16-bit")
    p.add_argument("--vllm-version", help="vLLM version whose rules apply (e.g. 0.11.0)")
    p.add_argument("--image", help="serving image; its tag names the vLLM version")
    p.add_argument("--max-num-seqs")
    p.add_argument("--max-num-batched-tokens")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--pooling", action="store_true",
                   help="a pooling/embedding model (vLLM --runner pooling, --task embed): no sampler")
    p.add_argument("--enable-expert-parallel", dest="expert_parallel", action="store_true")
    p.add_argument("--sampler", default="auto", choices=vllm_overheads.SAMPLERS,
                   help="top-k/top-p path of the install: auto (the official vllm/vllm-openai image, or a "
                        "wheel from 0.11.1, carries FlashInfer), flashinfer, native (vLLM logs "
                        "'FlashInfer is not available')")
    p.add_argument("--non-torch-gib", help="measured non-torch memory per GPU")
    p.add_argument("--activation-gib", help="measured activation peak per GPU")
    p.add_argument("--cuda-graph-gib", help="measured CUDA-graph estimate per GPU (vLLM 0.20+)")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--quantization")
    p.add_argument("--tensor-parallel-size", default="1")
    p.add_argument("--held-mib", default="0", help="memory other processes hold on the GPU")
    p.add_argument("--instances", default="1", help="N instances of this size on the GPU")
    p.add_argument("--other-utilization", action="append", default=[],
                   help="gpu_memory_utilization of another instance on the same GPU (repeat per instance)")
    p.add_argument("--check", action="store_true", help="exit 1 when the verdict is refuse")
    return p


def _instances(args):
    try:
        count = int(args.instances)
    except ValueError:
        raise PlanError("--instances must be a whole number, got %r" % args.instances)
    if count < 1:
        raise PlanError("--instances must be >= 1, got %d" % count)
    if count == 1 and not args.other_utilization:
        return None
    util = args.gpu_memory_utilization
    if util is None:  # the version's default, as the plan takes it
        util = vllm_overheads.generation(resolve_version(args.vllm_version, args.image)[0])[1]["default_utilization"]
    out = [{"name": "instance-%d" % (i + 1), "gpu_index": 0, "gpu_memory_utilization": util} for i in range(count)]
    out += [{"name": "other-%d" % (i + 1), "gpu_index": 0, "gpu_memory_utilization": other}
            for i, other in enumerate(args.other_utilization)]
    return out


def plan_inputs(args):
    """plan()'s inputs from parsed arguments (also what the calibration table plans with)."""
    return dict(
        gpu_memory_mib=args.gpu_memory_mib,
        gpu_reserved_mib=args.gpu_reserved_mib,
        gpu_name=args.gpu_name,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        model_dir=args.model_dir,
        weights_gib=args.weights_gib,
        kv_bytes_per_token=args.kv_bytes_per_token,
        non_torch_gib=args.non_torch_gib,
        activation_gib=args.activation_gib,
        cuda_graph_gib=args.cuda_graph_gib,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        tensor_parallel_size=args.tensor_parallel_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        vllm_version=args.vllm_version,
        image=args.image,
        enforce_eager=args.enforce_eager,
        held_mib=args.held_mib,
        pooling=args.pooling,
        expert_parallel=args.expert_parallel,
        sampler=args.sampler,
    )


def inputs_of(argv):
    """plan()'s inputs for a `gpuhost plan` command line (its arguments after `plan`)."""
    return plan_inputs(_parser().parse_args(argv))


def _manifest_parser():
    p = Parser(prog="gpuhost plan --manifest", description="vLLM replicas of a Kubernetes manifest against one GPU",
               epilog="GPUs the catalogue knows: %s" % ", ".join(gpu_memory.names()))
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--manifest", required=True, help="Deployment/StatefulSet YAML (several documents allowed)")
    p.add_argument("--gpu", dest="gpu_name", help="a catalogue GPU (its nvidia-smi total and reserved memory)")
    p.add_argument("--gpu-memory-mib", help="total memory of one GPU as nvidia-smi prints it (MiB)")
    p.add_argument("--gpu-reserved-mib", help="nvidia-smi -q FB Memory Usage -> Reserved (MiB)")
    sharing = p.add_mutually_exclusive_group()
    sharing.add_argument("--time-slicing", help="the device plugin's config file (sharing.timeSlicing)")
    sharing.add_argument("--time-slicing-replicas", help="pods the node hands each GPU to")
    p.add_argument("--held-mib", default="0", help="memory other processes hold on the GPU")
    p.add_argument("--outside-budget-mib", default=str(k8s_plan.OUTSIDE_BUDGET_MIB),
                   help="memory each vLLM process holds beyond its budget (default %d, seed 003's L4)"
                   % k8s_plan.OUTSIDE_BUDGET_MIB)
    p.add_argument("--check", action="store_true", help="accepted for symmetry: a manifest refuse always exits 1")
    return p


def _whole(value, name, minimum):
    try:
        number = int(str(value).replace(",", ""))
    except ValueError:
        raise PlanError("%s must be a whole number, got %r" % (name, value))
    if number < minimum:
        raise PlanError("%s must be >= %d, got %d" % (name, minimum, number))
    return number


def _read(path, what):
    try:
        return read_input(path)
    except OSError as exc:
        raise PlanError("cannot read %s %s: %s" % (what, path, exc.strerror or exc))


def _manifest_plan(args):
    if args.gpu_memory_mib is None and not args.gpu_name:
        raise PlanError("give --gpu NAME or --gpu-memory-mib (one of: %s)" % ", ".join(gpu_memory.names()))
    if args.gpu_name and args.gpu_memory_mib is None and gpu_memory.lookup(args.gpu_name) is None:
        raise PlanError("unknown --gpu %r (one of: %s)" % (args.gpu_name, ", ".join(gpu_memory.names())))
    total = _whole(args.gpu_memory_mib, "--gpu-memory-mib", 1) if args.gpu_memory_mib is not None else None
    reserved = _whole(args.gpu_reserved_mib, "--gpu-reserved-mib", 0) if args.gpu_reserved_mib is not None else None
    device = gpu_memory.device_memory(args.gpu_name, total, reserved)
    if device["cuda_total_mib"] <= 0:
        raise PlanError("--gpu-reserved-mib %s is not less than the GPU's %s MiB" % (reserved, device["total_mib"]))
    held = _whole(args.held_mib, "--held-mib", 0)
    if held >= device["cuda_total_mib"]:
        raise PlanError("--held-mib %d is not less than the GPU's %d MiB" % (held, device["cuda_total_mib"]))
    docs = k8s_manifest.load_documents(_read(args.manifest, "manifest"), "manifest %s" % args.manifest)
    workloads = k8s_manifest.workloads(docs)
    advertised = replicas = None
    if args.time_slicing:
        advertised = k8s_manifest.time_slicing(k8s_manifest.load_documents(
            _read(args.time_slicing, "time-slicing config"), "time-slicing config %s" % args.time_slicing))
    if args.time_slicing_replicas is not None:
        replicas = _whole(args.time_slicing_replicas, "--time-slicing-replicas", 1)
    return k8s_plan.plan_manifest(workloads, device, advertised, replicas, held,
                                  _whole(args.outside_budget_mib, "--outside-budget-mib", 0))


def _fail(as_json, message):
    return fail("plan", as_json, message)


def manifest_main(argv):
    as_json = "--json" in argv
    try:
        args = _manifest_parser().parse_args(argv)
        result = _manifest_plan(args)
    except (PlanError, UsageError, k8s_manifest.ManifestError) as exc:
        return _fail(as_json, exc)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(k8s_plan.render_text(result, args.manifest))
    return 1 if result["verdict"] == "refuse" else 0


def main(argv):
    if any(a == "--manifest" or a.startswith("--manifest=") for a in argv):
        return manifest_main(argv)
    as_json = "--json" in argv
    try:
        args = _parser().parse_args(argv)
        if not args.model_dir and args.weights_gib is None:
            raise PlanError("give --model DIR or --weights-gib with --kv-bytes-per-token")
        if args.gpu_memory_mib is None and not args.gpu_name:
            raise PlanError("give --gpu NAME or --gpu-memory-mib (one of: %s)" % ", ".join(gpu_memory.names()))
        if args.gpu_name and args.gpu_memory_mib is None and gpu_memory.lookup(args.gpu_name) is None:
            raise PlanError("unknown --gpu %r (one of: %s)" % (args.gpu_name, ", ".join(gpu_memory.names())))
        result = plan(instances=_instances(args), **plan_inputs(args))
    except (PlanError, UsageError) as exc:
        return _fail(as_json, exc)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(result))
    return 1 if args.check and result["verdict"] == "refuse" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
