"""`vllm bench serve` of the vLLM stand-in image: a bounded load through a server's OpenAI API (test harness only).

The serving acceptance run (issue 40 items 3 and 6) runs `vllm bench serve` inside the serving container, as one
would with the real image, while `nvidia-smi dmon` samples the GPUs. This is vLLM's benchmark client rewritten on the
standard library (threads and http.client instead of asyncio and aiohttp, no numpy, no tokenizer), following
vllm-project/vllm `vllm/benchmarks/serve.py` @ 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 and
`vllm/benchmarks/lib/endpoint_request_func.py` (docs/research/serving-acceptance.md 1a-1c):
- the flags of a random-dataset run, their defaults, and the ones real vLLM forces (`--ignore-eos` for `random` with
  an OpenAI-compatible backend);
- the requests: `--backend openai|vllm` POSTs `{"model", "prompt", "repetition_penalty": 1.0, "max_tokens",
  "logprobs", "stream": true, "stream_options": {"include_usage": true}}` to `--endpoint` (default /v1/completions),
  `openai-chat` POSTs `{"model", "messages": [{"role": "user", "content": [{"type": "text", "text": ...}]}],
  "max_completion_tokens", "stream", "stream_options"}`; the SSE stream is read as the real request functions do
  (TTFT at the first chunk with choices, one ITL per later one, the usage chunk's token counts);
- arrivals: all at once for `--request-rate inf`, else gamma-distributed gaps (`--burstiness`, Poisson at 1.0)
  normalised to num_prompts / rate; `--max-concurrency` as a semaphore (client queue time measured);
- what it prints (the progress lines, then the "Serving Benchmark Result" block row for row in
  `"{:<40} {:<10}"`), the metrics (calculate_metrics: TPOT over output_len - 1, pooled ITLs, numpy's linear
  percentiles and population std, the per-second peak output tokens, the sweep-line peak concurrency) and the
  `--save-result` JSON (result_json's keys and order; per-request lists only with --save-detailed, `latencies` and
  `queue_times` always).
Differences: the Namespace line lists only this client's options; no tqdm bar (as with --disable-tqdm); a tokenizer
counts as loaded (the rows that need one are printed; `--skip-tokenizer-init` leaves them out as the real one
does) and a random prompt of N tokens is N four-character words, which the stand-in server counts as N tokens; no
prompt re-alignment through /tokenize; only the random dataset and the generation backends; no --profile, --plot-*,
--ramp-up-*, --lora-*, --probe-request-rate; no `.pytorch.json` (the real one writes it only with
SAVE_TO_PYTORCH_BENCHMARK_FORMAT set).
"""
import argparse
import json
import math
import os
import random
import sys
import threading
import time
import traceback
import uuid
from datetime import datetime
from http.client import HTTPConnection, HTTPSConnection
from urllib.parse import urlsplit

# The generation backends of ASYNC_REQUEST_FUNCS (endpoint_request_func.py): all OpenAI-compatible.
BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}
TIMEOUT_S = 6 * 60 * 60   # AIOHTTP_TIMEOUT
WORD = "abcdefghijklmnopqrstuvwxyz"


class ArgumentError(Exception):
    pass


def parser():
    p = argparse.ArgumentParser(prog="vllm bench serve")
    # datasets/arg_utils.py add_dataset_parser (random dataset)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--dataset-name", type=str, default="random", choices=["random"])
    p.add_argument("--dataset-path", type=str, default=None)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--random-prefix-len", type=int, default=0)
    # serve.py add_cli_args
    p.add_argument("--label", type=str, default=None)
    p.add_argument("--backend", type=str, default="openai", choices=list(BACKENDS))
    p.add_argument("--base-url", type=str, default=None)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--endpoint", type=str, default="/v1/completions")
    p.add_argument("--header", metavar="KEY=VALUE", nargs="*")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--model", type=str, default=None)
    p.add_argument("--input-len", type=int, default=None)
    p.add_argument("--output-len", type=int, default=None)
    p.add_argument("--tokenizer", type=str)
    p.add_argument("--tokenizer-mode", type=str, default="auto")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--logprobs", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--num-warmups", type=int, default=0)
    p.add_argument("--save-result", action="store_true")
    p.add_argument("--save-detailed", action="store_true")
    p.add_argument("--append-result", action="store_true")
    p.add_argument("--metadata", metavar="KEY=VALUE", nargs="*")
    p.add_argument("--result-dir", type=str, default=None)
    p.add_argument("--result-filename", type=str, default=None)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--percentile-metrics", type=str, default=None)
    p.add_argument("--metric-percentiles", type=str, default="99")
    p.add_argument("--goodput", nargs="+", required=False)
    p.add_argument("--request-id-prefix", type=str, default="bench-%s-" % uuid.uuid4().hex[:8])
    for name, kind in (("--top-p", float), ("--top-k", int), ("--min-p", float), ("--temperature", float),
                       ("--frequency-penalty", float), ("--presence-penalty", float),
                       ("--repetition-penalty", float)):
        p.add_argument(name, type=kind, default=None)
    p.add_argument("--served-model-name", type=str, default=None)
    p.add_argument("--ready-check-timeout-sec", type=int, default=0)
    p.add_argument("--extra-body", type=json.loads, default=None)
    p.add_argument("--skip-tokenizer-init", action="store_true", default=False)
    p.add_argument("--insecure", action="store_true", default=False)
    return p


class Output(object):
    """RequestFuncOutput."""

    def __init__(self, prompt_len):
        self.generated_text, self.success, self.latency, self.output_tokens = "", False, 0.0, 0
        self.ttft, self.itl, self.prompt_len, self.error = 0.0, [], prompt_len, ""
        self.start_time, self.client_queue_time = 0.0, 0.0


class Request(object):
    def __init__(self, prompt, prompt_len, output_len, request_id=None):
        self.prompt, self.prompt_len, self.output_len, self.request_id = prompt, prompt_len, output_len, request_id


def _messages(text):
    """SSE messages as StreamedResponseHandler splits them: on blank lines."""
    buffer = ""
    while True:
        piece = yield
        buffer += piece
        while "\n\n" in buffer:
            message, buffer = buffer.split("\n\n", 1)
            if message.strip():
                text.append(message.strip())


def send(url, payload, headers, kind, insecure=False):
    """One streamed request as async_request_openai_completions / _chat_completions measure it."""
    out = Output(payload.pop("_prompt_len"))
    parts = urlsplit(url)
    conn_cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    st = time.perf_counter()
    out.start_time = st
    recent = st
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=TIMEOUT_S)
        path = parts.path + ("?" + parts.query if parts.query else "")
        conn.request("POST", path, body=json.dumps(payload), headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            out.error = response.reason or ""
            response.read()
            conn.close()
            return out
        first, text, messages = False, [], []
        reader = _messages(messages)
        next(reader)
        while True:
            chunk = response.read1(65536)
            if not chunk:
                break
            reader.send(chunk.decode("utf-8"))
            for message in messages:
                if message.startswith(":"):
                    continue
                data = message[len("data: "):] if message.startswith("data: ") else message
                if data == "[DONE]":
                    continue
                now = time.perf_counter()
                body = json.loads(data)
                choices = body.get("choices")
                if choices:
                    piece = choices[0].get("text") if kind == "completions" else choices[0]["delta"].get("content")
                    if not first:
                        first = True
                        out.ttft = now - st
                    else:
                        out.itl.append(now - recent)
                    recent = now
                    text.append(piece or "")
                elif body.get("usage"):
                    out.output_tokens = body["usage"].get("completion_tokens")
                    if body["usage"].get("prompt_tokens") is not None:
                        out.prompt_len = body["usage"]["prompt_tokens"]
            del messages[:]
        conn.close()
        out.generated_text = "".join(text)
        if first:
            out.success = True
        else:
            out.error = "Never received a valid chunk to calculate TTFT.This response will be marked as failed!"
        out.latency = recent - st
    except Exception:  # noqa: BLE001  (the real one keeps the traceback as the error)
        out.success = False
        out.error = "".join(traceback.format_exception(*sys.exc_info()))
    return out


def payload_for(kind, model, request, ignore_eos, extra_body, logprobs):
    if kind == "completions":
        body = {"model": model, "prompt": request.prompt, "repetition_penalty": 1.0,
                "max_tokens": request.output_len, "logprobs": logprobs, "stream": True,
                "stream_options": {"include_usage": True}}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": request.prompt}]}],
                "max_completion_tokens": request.output_len, "stream": True,
                "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = ignore_eos
    if extra_body:
        body.update(extra_body)
    body["_prompt_len"] = request.prompt_len
    return body


def random_requests(args):
    """RandomDataset's lengths (uniform within the range ratio); a prompt of N tokens is N short words."""
    rng = random.Random(args.seed)
    ratio = args.random_range_ratio

    def length(base, floor):
        low, high = max(int(base * (1 - ratio)), floor), max(int(base * (1 + ratio)), floor)
        return rng.randint(low, high)

    def words(n):
        return "".join(rng.choice(WORD) + rng.choice(WORD) + rng.choice(WORD) + " " for _ in range(n))
    prefix = words(args.random_prefix_len)
    out = []
    for i in range(args.num_prompts):
        n = length(args.random_input_len, 1)
        out.append(Request(prefix + words(n), args.random_prefix_len + n, length(args.random_output_len, 1),
                           "%s%d" % (args.request_id_prefix, i)))
    return out


def arrivals(count, rate, burstiness, rng):
    """get_request's cumulative delays: 0 for inf, else gamma gaps scaled so the last lands at count / rate."""
    if rate == float("inf"):
        return [0.0] * count
    delays = []
    for _ in range(count):
        if burstiness == float("inf"):
            delays.append(1.0 / rate)
        else:
            delays.append(rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
    for i in range(1, len(delays)):
        delays[i] += delays[i - 1]
    if delays and delays[-1]:
        factor = (count / rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


# ---------------------------------------------------------------- numpy's statistics

def mean(values):
    values = list(values) or [0]
    return sum(values) / float(len(values))


def std(values):
    values = list(values) or [0]
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / float(len(values)))


def percentile(values, p):
    """np.percentile's default (linear) method."""
    values = sorted(values) or [0]
    pos = (len(values) - 1) * p / 100.0
    low = int(math.floor(pos))
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)


def calculate_metrics(outputs, duration, tokenizer, percentiles, goodput):
    lens, total_input, completed, good = [], 0, 0, 0
    itls, tpots, all_tpots, ttfts, e2els = [], [], [], [], []
    for o in outputs:
        if o.success:
            output_len = o.output_tokens or (max(1, len(o.generated_text) // 4) if tokenizer else 1)
            lens.append(output_len)
            total_input += o.prompt_len
            tpot = 0.0
            if output_len > 1:
                tpot = (o.latency - o.ttft) / (output_len - 1)
                tpots.append(tpot)
            all_tpots.append(tpot)
            itls += o.itl
            ttfts.append(o.ttft)
            e2els.append(o.latency)
            completed += 1
        else:
            lens.append(0)
    if goodput:
        series, slos = [], []
        for name, values in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)):
            if name in goodput:
                series.append(values)
                slos.append(goodput[name] / 1000.0)
        for request in zip(*series):
            if all(s >= r for s, r in zip(slos, request)):
                good += 1
    successful = [o for o in outputs if o.success]
    failed = [o for o in outputs if not o.success]
    if failed:
        print("Failed requests during benchmark run detected (capping to 10):")
        for i, o in enumerate(failed[:10]):
            print("Error %d: %s" % (i, o.error))
    peak_tokens, peak_concurrency = 0.0, 0
    if successful:
        start = min(o.start_time for o in successful)
        end = max(o.start_time + o.latency for o in successful)
        buckets = [0] * (int(math.ceil(end - start)) + 1)
        for o in successful:
            t = o.start_time + o.ttft
            stamps = [t]
            for gap in o.itl:
                t += gap
                stamps.append(t)
            for stamp in stamps:
                second = int(stamp - start)
                if 0 <= second < len(buckets):
                    buckets[second] += 1
        events = sorted([(o.start_time, 1) for o in successful] +
                        [(o.start_time + o.latency, -1) for o in successful])
        current = 0
        for _t, delta in events:
            current += delta
            peak_concurrency = max(peak_concurrency, current)
        peak_tokens = float(max(buckets))
        print("tip: install termplotlib and gnuplot to plot the metrics")
    m = {"completed": completed, "failed": len(failed), "total_input": total_input, "total_output": sum(lens),
         "request_throughput": completed / duration, "request_goodput": good / duration,
         "output_throughput": sum(lens) / duration,
         "total_token_throughput": (total_input + sum(lens)) / duration,
         "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_concurrency}
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        m["mean_%s_ms" % name] = mean(values) * 1000
        m["std_%s_ms" % name] = std(values) * 1000
        m["median_%s_ms" % name] = percentile(values, 50) * 1000
        m["percentiles_%s_ms" % name] = [(p, percentile(values, p) * 1000) for p in percentiles]
    return m, lens


# ---------------------------------------------------------------- the run

def _run_requests(jobs, rate, burstiness, max_concurrency, seed):
    """Start each job at its arrival time; at most max_concurrency run at once. Returns the outputs in order."""
    gate = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
    outputs = [None] * len(jobs)
    delays = arrivals(len(jobs), rate, burstiness, random.Random(seed))

    def work(i, job, arrived):
        if gate:
            gate.acquire()
        try:
            out = job()
        finally:
            if gate:
                gate.release()
        out.client_queue_time = out.start_time - arrived
        outputs[i] = out
    threads = []
    start = time.time()
    for i, job in enumerate(jobs):
        wait = start + delays[i] - time.time()
        if delays[i] > 0 and wait > 0:
            time.sleep(wait)
        thread = threading.Thread(target=work, args=(i, job, time.perf_counter()), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return outputs


def _get_json(url, headers, insecure=False):
    parts = urlsplit(url)
    conn_cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=60)
    conn.request("GET", parts.path, headers=headers or {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError("Failed to fetch models from server at %s. Check that:\n1. The server is running\n"
                           "2. The server URL is correct\nError: %d, message='%s', url='%s'"
                           % (url, response.status, response.reason, url))
    return json.loads(body.decode())


def benchmark(args, kind, api_url, model_id, model_name, tokenizer, requests, percentile_metrics, percentiles,
              goodput, headers, extra_body):
    model = model_name or model_id

    def job(request):
        return lambda: send(api_url, payload_for(kind, model, request, args.ignore_eos, extra_body, args.logprobs),
                            dict(headers, **({"x-request-id": request.request_id} if request.request_id else {})),
                            kind)
    test = Request(requests[0].prompt, requests[0].prompt_len, requests[0].output_len)
    print("Starting initial single prompt test run...")
    if args.ready_check_timeout_sec > 0:
        deadline = time.time() + args.ready_check_timeout_sec
        while True:
            out = job(test)()
            if out.success or time.time() >= deadline:
                break
            time.sleep(1)
        if not out.success:
            raise ValueError("Initial test run failed - Please make sure benchmark arguments are correctly "
                             "specified. Error: %s" % out.error)
        print("Initial test run completed.")
    else:
        print("Skipping endpoint ready check.")
    if args.num_warmups > 0:
        print("Warming up with %d requests..." % args.num_warmups)
        _run_requests([job(test)] * args.num_warmups, float("inf"), 1.0, args.max_concurrency, args.seed)
        print("Warmup run completed.")
    print("Starting main benchmark run...")
    distribution = "Poisson process" if args.burstiness == 1.0 else "Gamma distribution"
    print("Traffic request rate: %s" % args.request_rate)
    print("Burstiness factor: %s (%s)" % (args.burstiness, distribution))
    print("Maximum request concurrency: %s" % args.max_concurrency)
    t0 = time.perf_counter()
    outputs = _run_requests([job(r) for r in requests], args.request_rate, args.burstiness, args.max_concurrency,
                            args.seed)
    duration = time.perf_counter() - t0
    m, lens = calculate_metrics(outputs, duration, tokenizer, percentiles, goodput)

    row = "{:<40} {:<10}".format
    rowf = "{:<40} {:<10.2f}".format
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(row("Successful requests:", m["completed"]))
    print(row("Failed requests:", m["failed"]))
    if args.max_concurrency is not None:
        print(row("Maximum request concurrency:", args.max_concurrency))
    if args.request_rate != float("inf"):
        print(rowf("Request rate configured (RPS):", args.request_rate))
    print(rowf("Benchmark duration (s):", duration))
    print(row("Total input tokens:", m["total_input"]))
    if tokenizer:
        print(row("Total generated tokens:", m["total_output"]))
    print(rowf("Request throughput (req/s):", m["request_throughput"]))
    if goodput:
        print(rowf("Request goodput (req/s):", m["request_goodput"]))
    if tokenizer:
        print(rowf("Output token throughput (tok/s):", m["output_throughput"]))
        print(rowf("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"]))
    print(rowf("Peak concurrent requests:", m["max_concurrent_requests"]))
    if tokenizer:
        print(rowf("Total token throughput (tok/s):", m["total_token_throughput"]))

    result = {
        "duration": duration, "completed": m["completed"], "failed": m["failed"],
        "total_input_tokens": m["total_input"], "total_output_tokens": m["total_output"],
        "request_throughput": m["request_throughput"],
        "request_goodput": m["request_goodput"] if goodput else None,
        "output_throughput": m["output_throughput"], "total_token_throughput": m["total_token_throughput"],
        "input_lens": [o.prompt_len for o in outputs], "output_lens": lens,
        "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
        "latencies": [o.latency for o in outputs], "start_times": [o.start_time for o in outputs],
        "queue_times": [o.client_queue_time for o in outputs],
        "generated_texts": [o.generated_text for o in outputs], "errors": [o.error for o in outputs],
        "max_output_tokens_per_s": m["max_output_tokens_per_s"],
        "max_concurrent_requests": m["max_concurrent_requests"], "rtfx": 0.0,
    }
    queue_times = queue_e2el = None
    if args.max_concurrency is not None:
        queue_times = [o.client_queue_time for o in outputs if o.success]
        if not math.isinf(args.request_rate):
            queue_e2el = [o.latency + o.client_queue_time for o in outputs if o.success]

    def section(attr, name, header, values=None):
        if attr not in percentile_metrics:
            return
        if values is None:
            avg, med, dev = m["mean_%s_ms" % attr], m["median_%s_ms" % attr], m["std_%s_ms" % attr]
            points = m["percentiles_%s_ms" % attr]
        else:
            avg, med, dev = mean(values) * 1000, percentile(values, 50) * 1000, std(values) * 1000
            points = [(p, percentile(values, p) * 1000) for p in percentiles]
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        print(rowf("Mean %s (ms):" % name, avg))
        print(rowf("Median %s (ms):" % name, med))
        result["mean_%s_ms" % attr], result["median_%s_ms" % attr], result["std_%s_ms" % attr] = avg, med, dev
        for p, value in points:
            word = str(int(p)) if int(p) == p else str(p)
            print(rowf("P%s %s (ms):" % (word, name), value))
            result["p%s_%s_ms" % (word, attr)] = value

    if tokenizer:
        section("ttft", "TTFT", "Time to First Token")
        section("tpot", "TPOT", "Time per Output Token (excl. 1st token)")
        section("itl", "ITL", "Inter-token Latency")
    section("e2el", "E2EL", "End-to-end Latency")
    if queue_times is not None:
        section("client_queue_time", "Client Queue Time", "Client-side Queueing", queue_times)
    if queue_e2el is not None:
        section("e2el_including_client_queue", "E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency",
                queue_e2el)
    print("=" * 50)
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["serve"]:
        sys.stderr.write("usage: vllm bench <bench_type> [options]\nvllm bench: error: only `vllm bench serve` "
                         "is in the stand-in image\n")
        return 2
    args = parser().parse_args(argv[1:])
    print(args)
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise ValueError("--max-concurrency must be greater than 0")
    if args.base_url is not None:
        api_url, base_url = args.base_url + args.endpoint, args.base_url
    else:
        host = "[%s]" % args.host if ":" in args.host else args.host
        api_url = "http://%s:%d%s" % (host, args.port, args.endpoint)
        base_url = "http://%s:%d" % (host, args.port)
    headers = {}
    for item in args.header or []:
        if "=" not in item:
            raise ValueError("Invalid header format. Please use KEY=VALUE format.")
        key, value = item.split("=", 1)
        headers[key.strip()] = value.strip()
    if os.environ.get("OPENAI_API_KEY"):   # _get_headers
        headers.setdefault("Authorization", "Bearer " + os.environ["OPENAI_API_KEY"])
    kind = BACKENDS[args.backend]
    if kind == "chat":
        headers.setdefault("Content-Type", "application/json")
    if args.model is None:
        print("Model not specified, fetching first model from server...")
        data = _get_json(base_url + "/v1/models", headers)
        if not data.get("data"):
            raise ValueError("No models found on the server at %s. Make sure the server is running and has models "
                             "loaded." % base_url)
        model_name, model_id = data["data"][0]["id"], data["data"][0]["root"]
        print("First model name: %s, first model id: %s" % (model_name, model_id))
    else:
        model_name, model_id = args.served_model_name, args.model
    tokenizer_id = None if args.skip_tokenizer_init else (args.tokenizer or model_id)
    tokenizer = tokenizer_id is not None
    if args.dataset_path is not None:
        raise ValueError("Cannot use '%s' dataset with --dataset-path. Please specify the appropriate --dataset-name "
                         "(e.g., 'sharegpt', 'custom', 'hf') for your dataset file: %s"
                         % (args.dataset_name, args.dataset_path))
    if args.input_len is not None:
        args.random_input_len = args.input_len
    if args.output_len is not None:
        args.random_output_len = args.output_len
    args.ignore_eos = True   # a random dataset on an OpenAI-compatible backend runs to the requested length
    requests = random_requests(args)
    goodput = {}
    for pair in args.goodput or []:
        name, value = pair.split(":")
        goodput[name] = float(value)
        if name not in ("ttft", "tpot", "e2el"):
            raise ValueError("Invalid metric name found, %s: %s. The service level objective name should be one of "
                             "['ttft', 'tpot', 'e2el']. " % (name, goodput[name]))
    sampling = dict((k, v) for k, v in (
        ("top_p", args.top_p), ("top_k", args.top_k), ("min_p", args.min_p), ("temperature", args.temperature),
        ("frequency_penalty", args.frequency_penalty), ("presence_penalty", args.presence_penalty),
        ("repetition_penalty", args.repetition_penalty)) if v is not None)
    if "temperature" not in sampling:
        print("WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by default. The default "
              "will be determined on the server side and can be model/API specific. For the old behavior, include "
              "--temperature=0.")
    extra_body = dict(sampling, **(args.extra_body or {}))
    percentile_metrics = (args.percentile_metrics or "ttft,tpot,itl").split(",")
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]
    result = benchmark(args, kind, api_url, model_id, model_name, tokenizer, requests, percentile_metrics,
                       percentiles, goodput, headers, extra_body)

    current_dt = datetime.now().strftime("%Y%m%d-%H%M%S")
    saved = {"date": current_dt, "endpoint_type": args.backend, "backend": args.backend, "label": args.label,
             "model_id": model_id, "tokenizer_id": tokenizer_id, "num_prompts": args.num_prompts}
    for item in args.metadata or []:
        if "=" not in item:
            raise ValueError("Invalid metadata format. Please use KEY=VALUE format.")
        key, value = item.split("=", 1)
        saved[key.strip()] = value.strip()
    saved["request_rate"] = args.request_rate if args.request_rate < float("inf") else "inf"
    saved["burstiness"] = args.burstiness
    saved["max_concurrency"] = args.max_concurrency
    saved.update(result)
    if not args.save_detailed:
        for field in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
            saved.pop(field, None)
    if args.save_result or args.append_result:
        label = args.label or args.backend
        concurrency = "-concurrency%d" % args.max_concurrency if args.max_concurrency is not None else ""
        name = args.result_filename or "%s-%sqps%s-%s-%s.json" % (
            label, args.request_rate, concurrency, model_id.split("/")[-1], current_dt)
        if args.result_dir:
            os.makedirs(args.result_dir, exist_ok=True)
            name = os.path.join(args.result_dir, name)
        with open(name, "a+" if args.append_result else "w", encoding="utf-8") as handle:
            if args.append_result and handle.tell() != 0:
                handle.write("\n")
            json.dump(saved, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
