#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module (role vllm): the served name is listed, warm-up requests, then one timed request."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_api_check
short_description: Check a started vLLM server through its OpenAI API and time one request after warm-up
description:
  - C(GET /v1/models) must list O(served_model_name).
  - Then O(warmup_requests) chat completions warm the server up (JIT compilation, cache misses -
    the first request is seconds slower); their latencies are returned apart and never enter the
    timed figure.
  - Then one timed C(POST /v1/chat/completions); its wall-clock latency (monotonic clock, measured
    here rather than by Ansible, whose task overhead is larger than a short request) is returned.
  - Talks to the server from the managed host; changes nothing (always C(changed=false)).
version_added: "0.1.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  url:
    description: Base URL of the server, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  served_model_name:
    description: The name requests use (vLLM C(--served-model-name)).
    type: str
    required: true
  api_key:
    description: Bearer token of a server started with C(VLLM_API_KEY). Never returned or logged.
    type: str
  warmup_requests:
    description: Chat completions sent (and not timed) before the timed one.
    type: int
    default: 10
  warmup_max_tokens:
    description: C(max_tokens) of each warm-up request.
    type: int
    default: 16
  max_tokens:
    description: C(max_tokens) of the timed request.
    type: int
    default: 128
  prompt:
    description: User message of every request.
    type: str
    default: Write a Python function that returns the n-th Fibonacci number.
  timeout:
    description: Seconds each request may take.
    type: float
    default: 120
"""

EXAMPLES = r"""
- name: Warm up and time one request
  vllm_api_check:
    url: http://127.0.0.1:8000
    served_model_name: qwen3-32b
    warmup_requests: 10
  register: vllm_check
"""

RETURN = r"""
models:
  description: Model ids C(/v1/models) lists.
  returned: success
  type: list
  elements: str
warmup:
  description: "{count, latencies_s}: the warm-up requests (excluded from the timed figure)."
  returned: success
  type: dict
timed:
  description: "{latency_s, prompt_tokens, completion_tokens, tokens_per_s, max_tokens}: the one timed request."
  returned: success
  type: dict
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError

ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    served_model_name=dict(type="str", required=True),
    api_key=dict(type="str", no_log=True),
    warmup_requests=dict(type="int", default=10),
    warmup_max_tokens=dict(type="int", default=16, no_log=False),
    max_tokens=dict(type="int", default=128, no_log=False),
    prompt=dict(type="str", default="Write a Python function that returns the n-th Fibonacci number."),
    timeout=dict(type="float", default=120),
)


class CheckError(Exception):
    pass


def _request(opener, method, url, api_key, timeout, body=None):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode() if body is not None else None
    try:
        response = opener(url, data=data, headers=headers, method=method, timeout=timeout,
                          validate_certs=True, follow_redirects="none")
        text = response.read()
    except HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace") if hasattr(exc, "read") else ""
        raise CheckError("%s %s: HTTP %d %s" % (method, url, exc.code, detail.strip()))
    except (URLError, OSError, ValueError) as exc:
        raise CheckError("%s %s: %s" % (method, url, getattr(exc, "reason", exc)))
    try:
        return json.loads(text.decode("utf-8"))
    except ValueError:
        raise CheckError("%s %s: the answer is not JSON: %r" % (method, url, text[:200]))


def check(params, opener=open_url, clock=time.monotonic):
    """The module's result for params; raises CheckError with a one-line reason."""
    base = params["url"].rstrip("/")
    key, timeout, name = params.get("api_key"), params["timeout"], params["served_model_name"]
    listed = _request(opener, "GET", base + "/v1/models", key, timeout)
    models = [m.get("id") for m in listed.get("data") or [] if isinstance(m, dict)]
    if name not in models:
        raise CheckError("GET %s/v1/models lists %s, not the served name %r" % (base, models, name))

    def chat(max_tokens):
        body = {"model": name, "max_tokens": max_tokens, "temperature": 0,
                "messages": [{"role": "user", "content": params["prompt"]}]}
        started = clock()
        answer = _request(opener, "POST", base + "/v1/chat/completions", key, timeout, body)
        elapsed = clock() - started
        choices = answer.get("choices") or []
        if not choices or not isinstance(choices[0], dict) or "message" not in choices[0]:
            raise CheckError("POST %s/v1/chat/completions: no choices in the answer" % base)
        return elapsed, answer.get("usage") or {}

    warm = [round(chat(params["warmup_max_tokens"])[0], 4) for _request in range(max(0, params["warmup_requests"]))]
    latency, usage = chat(params["max_tokens"])
    completion = int(usage.get("completion_tokens") or 0)
    return {
        "changed": False,
        "models": models,
        "warmup": {"count": len(warm), "latencies_s": warm},
        "timed": {
            "latency_s": round(latency, 4),
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": completion,
            "tokens_per_s": round(completion / latency, 1) if latency > 0 else None,
            "max_tokens": params["max_tokens"],
        },
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = check(module.params)
    except CheckError as exc:
        module.fail_json(msg="vllm: %s" % exc, changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
