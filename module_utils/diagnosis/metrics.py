# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuhost's check of a host as Prometheus metrics, for the node exporter's textfile collector (issue 40 item 4):
the text exposition format (prometheus.io "Exposition formats", text 0.0.4), one file per host.

No timestamp is written: the node exporter exports each file's mtime (node_textfile_mtime_seconds), so the same
state writes the same bytes and a run that found nothing new changes nothing.

    text = render(stack_result, instances)   # gpu_stack_check's result (gpu_validate_result); the serving
                                             # instances of gpuhost's record (runs.rollout.record_instances)

Pure stdlib, no Ansible imports.
"""
from ansible.module_utils.layers import registry

OK_STATUSES = ("ok", "warn")


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name, labels, value):
    pairs = ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels)
    return "%s%s %s" % (name, "{%s}" % pairs if pairs else "", value)


class _Family(object):
    def __init__(self, name, help_text):
        self.name, self.help, self.samples = name, help_text, []

    def add(self, value, **labels):
        self.samples.append(_sample(self.name, sorted(labels.items()), value))

    def lines(self):
        if not self.samples:
            return []
        return ["# HELP %s %s" % (self.name, self.help), "# TYPE %s gauge" % self.name] + self.samples


def _check(result, name):
    return next((c for c in result.get("checks") or [] if c.get("name") == name), None) or {}


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _serving(result, instances, up, kv_tokens, concurrency, model_len):
    """Per serving instance (label vllm_instance: `instance` is the scrape target's own): whether it runs (the
    serving layer's check) and, from gpuhost's record, the KV cache its plan and its startup log gave it and how
    many requests of max_model_len tokens that holds (KV tokens over max_model_len, vLLM's "Maximum concurrency"):
    the instance's headroom."""
    data = _check(result, "serving_running").get("data") or {}
    for name in data.get("running") or []:
        up.add(1, vllm_instance=name)
    for name in (data.get("stopped") or []) + (data.get("missing") or []):
        up.add(0, vllm_instance=name)
    for name, inst in sorted((instances or {}).items()):
        if not isinstance(inst, dict):
            continue
        if _number(inst.get("max_model_len")) is not None:
            model_len.add(inst["max_model_len"], vllm_instance=name)
        for source in ("plan", "startup"):
            figures = inst.get(source) if isinstance(inst.get(source), dict) else {}
            if _number(figures.get("kv_cache_tokens")) is not None:
                kv_tokens.add(figures["kv_cache_tokens"], vllm_instance=name, source=source)
            if _number(figures.get("max_concurrency")) is not None:
                concurrency.add(figures["max_concurrency"], vllm_instance=name, source=source)


def render(result, instances=None):
    """The metrics of a gpu_stack_check result (and of the serving instances of gpuhost's record, by name), as the
    text the textfile collector reads."""
    layers = result.get("layers") or {}
    host_ok = _Family("gpuhost_host_ok", "1 when every layer gpuhost requires on the host checks out, 0 when one fails.")
    layer_ok = _Family("gpuhost_layer_ok", "1 when the layer checks out (ok or warn), 0 when it fails; a layer the "
                                           "check skipped is absent.")
    gpus = _Family("gpuhost_gpus", "GPUs nvidia-smi lists on the host.")
    xids = _Family("gpuhost_xid_events", "Xid errors in the kernel log since boot, per Xid and NVIDIA's immediate "
                                         "action for it.")
    xid_gpus = _Family("gpuhost_xid_gpu", "1 per GPU (PCI address as the kernel logs it) that logged the Xid since boot.")
    out = _Family("gpuhost_gpu_out_of_service", "1 per GPU gpuhost's Xid policy took out of service this boot.")
    diag = _Family("gpuhost_dcgm_diag_ok", "DCGM's diagnostic per GPU at the level run: 1 every test passed, 0 a "
                                           "test failed.")
    drifted = _Family("gpuhost_drift_findings", "What drift found per layer against gpuhost's record (a drift run).")
    up = _Family("gpuhost_vllm_instance_up", "1 when the serving container runs, 0 when it is stopped or missing.")
    kv_tokens = _Family("gpuhost_vllm_kv_cache_tokens", "KV cache tokens of the serving instance: its memory plan's "
                                                        "(source=plan) and its startup log's (source=startup).")
    concurrency = _Family("gpuhost_vllm_max_concurrency", "Requests of max_model_len tokens the KV cache holds at "
                                                          "once (KV tokens / max_model_len): the instance's headroom.")
    model_len = _Family("gpuhost_vllm_max_model_len", "The serving instance's max_model_len (tokens per request).")
    host_ok.add(0 if result.get("failed_layer") else 1)
    for name in registry.STACK_LAYERS:
        layer = layers.get(name) or {}
        if layer.get("status") in OK_STATUSES + ("fail",):
            layer_ok.add(1 if layer["status"] in OK_STATUSES else 0, layer=name,
                         required="true" if layer.get("required") else "false")
    if result.get("gpu_count") is not None:
        gpus.add(result["gpu_count"])
    for xid in result.get("xids") or []:
        xids.add(xid.get("count") or 0, xid=xid.get("code"), action=xid.get("action") or "")
        for pci in xid.get("gpus") or []:
            xid_gpus.add(1, xid=xid.get("code"), pci=pci)
    for mark in (_check(result, "xid").get("data") or {}).get("out_of_service") or []:
        out.add(1, gpu=mark.get("index") if mark.get("index") is not None else "", bus_id=mark.get("bus_id") or "")
    dcgm = _check(result, "dcgm_diag")
    data = dcgm.get("data") or {}
    if dcgm.get("status") in ("ok", "fail"):
        failed = set(str(f.get("gpu")) for f in data.get("failed") or [])
        for gpu in data.get("gpus") or []:
            diag.add(0 if str(gpu) in failed else 1, gpu=gpu, level=data.get("level"))
    for name, layer in sorted(((result.get("drift") or {}).get("layers") or {}).items()):
        drifted.add(len(layer.get("findings") or []), layer=name)
    _serving(result, instances, up, kv_tokens, concurrency, model_len)
    families = (host_ok, layer_ok, gpus, xids, xid_gpus, out, diag, drifted, up, kv_tokens, concurrency, model_len)
    return "\n".join(line for family in families for line in family.lines()) + "\n"
