#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read an image's configuration (Env, Labels) from its registry without pulling it."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_image_config
short_description: Read an image's configuration from its registry before pulling it
description:
  - Reads the image configuration (C(config.Env), C(config.Labels)) of an image from its registry over the
    registry HTTP API, as C(skopeo inspect --config) does, without pulling it. Requests the manifest (an OCI
    index or Docker manifest list, then the I(platform)'s manifest) and the config blob only, never a layer.
    Each document is checked against the digest that names it.
  - Answers the registry's token authentication (a 401 with C(WWW-Authenticate Bearer realm=...)) anonymously,
    or with I(username) and I(password); a registry asking for Basic credentials gets them.
  - Never fails because the registry cannot be read. It returns I(reachable=false) with a I(reason) instead, and
    the caller judges the image after the pull. It fails only on an invalid I(image) or I(platform).
  - Read-only, never changed.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  image:
    description:
      - The image reference, C(host[:port]/repository:tag) or C(...@sha256:<digest>). Docker's rule decides
        the registry. The first path component is a registry host only when it contains C(.) or C(:) or is
        C(localhost). A reference with both a tag and a digest is read by its digest.
    type: str
    required: true
  registry_url:
    description:
      - The base URL (C(https://host[:port])) to read references without a registry host from, such as Docker Hub
        short names like C(vllm/vllm-openai:v0.11.0) (a pull-through mirror, or the Hub's registry). One-component
        names are read as C(library/<name>) there, as the Hub names them.
      - Empty (the default). Such images are not read (I(reason=no_registry_host)); the caller judges them
        after the pull.
    type: str
    default: ""
  insecure:
    description:
      - Speak plain HTTP to the image's registry, as docker does for an insecure registry.
      - Registries on C(localhost), C(127.0.0.0/8) and C([::1]) always get plain HTTP, because docker's daemon
        treats them as insecure by default.
    type: bool
    default: false
  platform:
    description:
      - The platform whose image is read from an index or manifest list, C(os/architecture[/variant]).
    type: str
    default: linux/amd64
  username:
    description: The user for the token request (or Basic authentication). Empty means anonymous access.
    type: str
    default: ""
  password:
    description: The password or access token of I(username).
    type: str
    default: ""
  timeout:
    description: Seconds to wait for each HTTP answer.
    type: int
    default: 10
  validate_certs:
    description: Verify the registry's TLS certificate.
    type: bool
    default: true
notes:
  - Supports check mode.
  - The HTTP API is the OCI distribution specification (C(GET /v2/<name>/manifests/<reference>),
    C(GET /v2/<name>/blobs/<digest>)); the token flow is distribution/distribution's docs/spec/auth/token.md.
"""

EXAMPLES = r"""
- name: Read the serving image's configuration from its registry before pulling it
  container_image_config:
    image: 127.0.0.1:5000/vllm/vllm-openai:v0.11.0
  register: vllm_image_remote

- name: The host driver runs the image's CUDA, judged before the pull
  cuda_image_check:
    env: "{{ vllm_image_remote.env }}"
    driver_cuda_version: "{{ ansible_facts.nvidia.cuda_driver_version }}"
    driver_version: "{{ ansible_facts.nvidia.driver_version_userspace }}"
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    image: 127.0.0.1:5000/vllm/vllm-openai:v0.11.0
  when: vllm_image_remote.reachable
"""

RETURN = r"""
reachable:
  description: Whether the image's configuration was read.
  returned: always
  type: bool
reason:
  description: >-
    Why it was not read, or null. no_registry_host (a reference without a registry host and no I(registry_url)),
    unreachable (no answer, or an HTTP error), auth_refused (401/403, or the token server refused),
    not_found (404: no such repository, tag or blob), no_platform (the index has no I(platform) image),
    digest_mismatch (a document is not what its digest names), unsupported (a Docker schema 1 manifest, a
    digest algorithm not known here), invalid_response (a document that is not what the API returns).
  returned: always
  type: str
message:
  description: What was asked and what the registry answered, when I(reachable) is false; else null.
  returned: always
  type: str
registry:
  description: The registry host[:port] of the reference, or null for a reference without one.
  returned: always
  type: str
repository:
  description: The repository read (C(library/<name>) for a one-component name without a registry host).
  returned: always
  type: str
reference:
  description: The tag or digest the manifest was asked for.
  returned: always
  type: str
url:
  description: The registry's base URL used, or null when none was.
  returned: always
  type: str
index_digest:
  description: The digest of the index or manifest list the reference names, or null when it names a manifest.
  returned: always
  type: str
manifest_digest:
  description: The digest of the I(platform)'s image manifest (what a pull by digest names), or null.
  returned: always
  type: str
config_digest:
  description: The digest of the config blob (C(docker image inspect)'s Id after the pull), or null.
  returned: always
  type: str
env:
  description: The configuration's C(config.Env), a list of C(NAME=value), as C(docker image inspect) C(Config.Env).
  returned: always
  type: list
  elements: str
labels:
  description: The configuration's C(config.Labels).
  returned: always
  type: dict
platform:
  description: The configuration's own os/architecture[/variant], or null.
  returned: always
  type: str
requests:
  description: The URLs requested, in order (token requests without their query). They include manifests and the config blob, never a layer.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible.module_utils.containers.registry_image import (
    MAX_DOCUMENT, RegistryImageError, parse_platform, parse_reference, read_config)


def _fetcher(module):
    def fetch(url, headers):
        unredirected = ["Authorization"] if "Authorization" in headers else None
        resp, info = fetch_url(module, url, headers=headers, method="GET", timeout=module.params["timeout"],
                               unredirected_headers=unredirected, use_netrc=False)
        status = info.get("status", -1)
        status = -1 if status is None else int(status)
        if resp is not None:
            body = resp.read(MAX_DOCUMENT + 1)
        else:
            body = info.get("body") or b""
        if not isinstance(body, bytes):
            body = body.encode("utf-8")
        response_headers = dict((k.lower(), v) for k, v in info.items() if isinstance(k, str) and isinstance(v, str))
        return status, response_headers, body, info.get("msg")
    return fetch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            registry_url=dict(type="str", default=""),
            insecure=dict(type="bool", default=False),
            platform=dict(type="str", default="linux/amd64"),
            username=dict(type="str", default=""),
            password=dict(type="str", default="", no_log=True),
            timeout=dict(type="int", default=10),
            validate_certs=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        ref = parse_reference(p["image"])
        platform = parse_platform(p["platform"])
    except RegistryImageError as exc:
        module.fail_json(msg="image layer: %s. Fix: give the image as host[:port]/repository:tag or "
                             "repository@sha256:<digest>, and the platform as os/architecture[/variant]" % exc)
    registry_url = p["registry_url"].strip()
    if registry_url and not registry_url.startswith(("http://", "https://")):
        module.fail_json(msg="image layer: registry_url %r is not an http(s):// URL. Fix: give the registry's "
                             "base URL, e.g. https://mirror.example:5000" % registry_url)
    result = read_config(ref, _fetcher(module), platform=platform, registry_url=registry_url or None,
                         insecure=p["insecure"], username=p["username"] or None, password=p["password"] or None)
    warnings = []
    if not result["reachable"] and result["reason"] != "no_registry_host":
        warnings.append("image layer: %s: its configuration could not be read from its registry before the pull "
                        "(%s: %s); it is judged after the pull instead" % (p["image"], result["reason"],
                                                                           result["message"]))
    module.exit_json(changed=False, warnings=warnings, **result)


if __name__ == "__main__":
    main()
