"""gpuhost plan: the vLLM memory plan from the command line.

  gpuhost plan [--json] --gpu-memory-mib N --gpu-memory-utilization F --max-model-len N
               (--model DIR | --weights-gib F --kv-bytes-per-token N)
               [--non-torch-gib F] [--activation-gib F] [--kv-cache-dtype D]
               [--tensor-parallel-size N] [--held-mib N] [--instances N] [--quantization Q]
               [--check]

Exit 0 with the plan (1 with --check when the verdict is refuse); 2 on bad input,
with one line on stderr.
"""
import argparse
import json
import sys

from vllm_plan import PlanError, plan, render_text


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse's own usage dump is noise here: one line, exit 2.
        raise PlanError(message)


def _parser():
    p = _Parser(prog="gpuhost plan", description="vLLM memory plan before a start")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gpu-memory-mib", required=True, help="total memory of one GPU (MiB)")
    p.add_argument("--gpu-memory-utilization", default="0.9")
    p.add_argument("--max-model-len", help="default: the model's max_position_embeddings")
    p.add_argument("--model", dest="model_dir", help="model directory (config.json + safetensors)")
    p.add_argument("--weights-gib", help="weights of the whole model (GiB)")
    p.add_argument("--kv-bytes-per-token", help="KV bytes per token, whole model, 16-bit")
    p.add_argument("--non-torch-gib")
    p.add_argument("--activation-gib")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--quantization")
    p.add_argument("--tensor-parallel-size", default="1")
    p.add_argument("--held-mib", default="0", help="memory other processes hold on the GPU")
    p.add_argument("--instances", default="1", help="N instances of this size on the GPU")
    p.add_argument("--check", action="store_true", help="exit 1 when the verdict is refuse")
    return p


def main(argv):
    try:
        args = _parser().parse_args(argv)
        if not args.model_dir and args.weights_gib is None:
            raise PlanError("give --model DIR or --weights-gib with --kv-bytes-per-token")
        try:
            count = int(args.instances)
        except ValueError:
            raise PlanError("--instances must be a whole number, got %r" % args.instances)
        if count < 1:
            raise PlanError("--instances must be >= 1, got %d" % count)
        instances = None
        if count > 1:
            instances = [{"name": "instance-%d" % (i + 1), "gpu_index": 0,
                          "gpu_memory_utilization": args.gpu_memory_utilization} for i in range(count)]
        result = plan(
            instances=instances,
            gpu_memory_mib=args.gpu_memory_mib,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            model_dir=args.model_dir,
            weights_gib=args.weights_gib,
            kv_bytes_per_token=args.kv_bytes_per_token,
            non_torch_gib=args.non_torch_gib,
            activation_gib=args.activation_gib,
            kv_cache_dtype=args.kv_cache_dtype,
            quantization=args.quantization,
            tensor_parallel_size=args.tensor_parallel_size,
            held_mib=args.held_mib,
        )
    except PlanError as exc:
        sys.stderr.write("gpuhost plan: %s\n" % exc)
        return 2
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(result))
    return 1 if args.check and result["verdict"] == "refuse" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
