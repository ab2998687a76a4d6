"""An image's configuration read from its registry before the pull: the manifest and the config blob, never a layer.

Real documents only (tests/fixtures/registry, sources in tests/fixtures/README.md): regclient's testrepo (an OCI
index built by docker buildx for linux/amd64 and linux/arm64 with buildkit's unknown/unknown attestation entries,
its manifests and configs), go-containerregistry's test_index (a Docker v2 manifest and its config), and the
401 challenge and token answer of distribution's token authentication specification.  The registry the module
talks to is an http.server on 127.0.0.1 in this test that serves those bytes at their /v2/ paths and records
every request.
"""
import hashlib
import http.server
import json
import os
import threading

import pytest

from containers import registry_image as ri
from conftest import FIXTURES, ROOT, run_ansible_module

REGISTRY = os.path.join(FIXTURES, "registry")
V1_INDEX = "sha256:7ceb9b6bcc274697d0c38be6214b50cec79d601bc61708747d3f6cb772f6c6fa"       # testrepo:v1
V1_AMD64 = "sha256:1effc9d48232693f4584ceb9c5e8d84ddeb5924ea4aff341aa8204510422f668"
V1_AMD64_CONFIG = "sha256:03d7b3c657a4af5b4ff7967bf843d04a93008f28d658a7df3f679b2c7e519639"
V1_ARM64 = "sha256:7e87ffc91b9ceafa85be2777b16b1be10e4664fd4f3acc86e4295b97da5163ba"
V1_ARM64_CONFIG = "sha256:cffb7c92259a9caaf27dd5ce2d7d0191b33de116cedff2f078611987291952fd"
V1_AMD64_LAYERS = ("sha256:ac4ae1712ec852391e6aae58abf8ff4665df9ae87c71d1e81aa421508a7b831d",
                   "sha256:5fcd3f90f6c7214b2f48d998385f38dd9f047fd219f03255f3c823c0e93f630a")
DOCKER_V2 = "sha256:eebff607b1628d67459b0596643fc07de70d702eccf030f0bc7bb6fc2b278650"      # ggcr test_index "1"
DOCKER_V2_CONFIG = "sha256:6e0b05049ed9c17d02e1a55e80d6599dbfcce7f4f4b022e3c673e685789c470e"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def blob(source, digest):
    with open(os.path.join(REGISTRY, source, "sha256", digest.split(":", 1)[1]), "rb") as handle:
        return handle.read()


def http_capture(name):
    """(status line, {header: value}, body) of an HTTP response copied from a document."""
    with open(os.path.join(REGISTRY, "distribution_token_spec", name), encoding="utf-8") as handle:
        head, _, body = handle.read().partition("\n\n")
    lines = head.splitlines()
    return lines[0], dict(line.split(": ", 1) for line in lines[1:]), body.strip()


# --- references: docker's rules -----------------------------------------------------------------


@pytest.mark.parametrize("text, registry, repository, tag, digest", [
    ("vllm/vllm-openai:v0.11.0", None, "vllm/vllm-openai", "v0.11.0", None),         # Docker Hub: no host
    ("ubuntu:22.04", None, "library/ubuntu", "22.04", None),                          # the Hub's library/
    ("localhost/vllm:1", "localhost", "vllm", "1", None),                             # localhost is a host
    ("127.0.0.1:5000/vllm/vllm-openai:v0.11.0", "127.0.0.1:5000", "vllm/vllm-openai", "v0.11.0", None),
    ("nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04", "nvcr.io", "nvidia/cuda", "12.8.1-base-ubuntu22.04", None),
    ("registry:5000/team/app:1.2", "registry:5000", "team/app", "1.2", None),         # a port makes a host
    ("team/app", None, "team/app", "latest", None),                                   # docker's implied tag
    ("[::1]:5000/app:1", "[::1]:5000", "app", "1", None),
    ("example.com/app:1@" + V1_INDEX, "example.com", "app", "1", V1_INDEX),           # pulled by digest
    ("app@" + V1_AMD64, None, "library/app", None, V1_AMD64),
])
def test_reference_follows_dockers_rules(text, registry, repository, tag, digest):
    ref = ri.parse_reference(text)
    assert (ref["registry"], ref["repository"], ref["tag"], ref["digest"]) == (registry, repository, tag, digest)
    assert ref["reference"] == (digest or tag)


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("Vllm/App:1", "lower-case"),                 # upper case is not a repository (nor a host: no . or :)
    ("app:bad/tag", "registry host"),             # a : before the last / makes a host, with no port here
    ("app@sha256:abc", "digest"),
    ("app:" + "x" * 129, "tag"),
])
def test_reference_errors_name_the_part(text, words):
    with pytest.raises(ri.RegistryImageError, match=words):
        ri.parse_reference(text)


def test_loopback_registries_are_plain_http_others_https():
    assert ri.base_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert ri.base_url("localhost:5000") == "http://localhost:5000"
    assert ri.base_url("[::1]:5000") == "http://[::1]:5000"
    assert ri.base_url("registry.example:5000") == "https://registry.example:5000"
    assert ri.base_url("registry.example:5000", insecure=True) == "http://registry.example:5000"


def test_urls_and_accept_list():
    assert ri.manifest_url("http://127.0.0.1:5000", "vllm/vllm-openai", "v0.11.0") == \
        "http://127.0.0.1:5000/v2/vllm/vllm-openai/manifests/v0.11.0"
    assert ri.blob_url("http://h/", "a/b", V1_AMD64_CONFIG) == "http://h/v2/a/b/blobs/" + V1_AMD64_CONFIG
    accept = ri.manifest_headers()["Accept"].split(", ")
    assert accept == ["application/vnd.oci.image.index.v1+json",
                      "application/vnd.docker.distribution.manifest.list.v2+json",
                      "application/vnd.oci.image.manifest.v1+json",
                      "application/vnd.docker.distribution.manifest.v2+json"]


# --- real documents ------------------------------------------------------------------------------


def test_fixtures_are_the_bytes_their_digests_name():
    for source, digest in [("regclient_testrepo", d) for d in (V1_INDEX, V1_AMD64, V1_AMD64_CONFIG, V1_ARM64,
                                                               V1_ARM64_CONFIG)] + \
            [("ggcr_test_index", DOCKER_V2), ("ggcr_test_index", DOCKER_V2_CONFIG)]:
        assert ri.verify_digest(blob(source, digest), digest), digest


def test_digest_verification_refuses_one_changed_byte():
    data = blob("regclient_testrepo", V1_AMD64_CONFIG)
    assert not ri.verify_digest(data.replace(b"amd64", b"arm64"), V1_AMD64_CONFIG)
    assert ri.sha256_digest(data) == V1_AMD64_CONFIG
    with pytest.raises(ri.RegistryImageError, match="algorithm"):
        ri.verify_digest(data, "md5:" + "0" * 32)


def test_index_platform_selection_skips_attestations():
    kind, index = ri.parse_manifest(blob("regclient_testrepo", V1_INDEX))
    assert kind == "index"
    assert ri.select_platform(index, ri.parse_platform("linux/amd64"))["digest"] == V1_AMD64
    assert ri.select_platform(index, ri.parse_platform("linux/arm64"))["digest"] == V1_ARM64
    # buildkit's two attestation manifests (platform unknown/unknown) are not offered as images
    with pytest.raises(ri.RegistryImageError, match=r"no linux/arm/v7 image in the index \(it has: "
                                                    r"linux/amd64, linux/arm64\)") as info:
        ri.select_platform(index, ri.parse_platform("linux/arm/v7"))
    assert info.value.reason == "no_platform"


def test_oci_and_docker_manifests_name_their_config():
    kind, manifest = ri.parse_manifest(blob("regclient_testrepo", V1_AMD64))
    assert kind == "manifest" and ri.config_descriptor(manifest)["digest"] == V1_AMD64_CONFIG
    kind, manifest = ri.parse_manifest(blob("ggcr_test_index", DOCKER_V2))
    assert kind == "manifest" and ri.config_descriptor(manifest)["digest"] == DOCKER_V2_CONFIG
    assert manifest["mediaType"] == ri.DOCKER_MANIFEST


def test_config_env_and_labels():
    parsed = ri.image_config(blob("regclient_testrepo", V1_AMD64_CONFIG))
    assert parsed == {"env": [PATH_ENV], "labels": {"arg_label": "arg_for_label", "version": "1"},
                      "platform": "linux/amd64"}
    # a Bazel-built image whose config is {}: no Env at all is an empty list, not an error
    assert ri.image_config(blob("ggcr_test_index", DOCKER_V2_CONFIG)) == {"env": [], "labels": {},
                                                                         "platform": "linux/amd64"}


def test_bearer_challenge_of_the_token_spec():
    _status, headers, _body = http_capture("401-unauthorized_token-md-lines-60-68.http")
    scheme, params = ri.parse_challenge(headers["Www-Authenticate"])
    assert scheme == "bearer"
    assert params == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                      "scope": "repository:samalba/my-app:pull,push"}    # the comma inside the quotes stays
    url = ri.token_url(params, "samalba/my-app")
    assert url == ("https://auth.docker.io/token?service=registry.docker.io"
                   "&scope=repository%3Asamalba%2Fmy-app%3Apull%2Cpush")
    assert ri.token_url({"realm": "http://h/token?x=1"}, "a/b") == "http://h/token?x=1&scope=repository%3Aa%2Fb%3Apull"


def test_token_answer_of_the_token_spec():
    _status, _headers, body = http_capture("200-token_token-md-lines-232-235.http")
    assert ri.token_from_response(body.encode()).startswith("eyJ0eXAiOiJKV1Qi")
    assert ri.token_from_response(b'{"access_token": "abc"}') == "abc"
    assert ri.token_from_response(b"<html>") is None


# --- read_config through a fetch double (the flow without HTTP) -------------------------------


def fake_registry(documents, status_of=None):
    """fetch(url, headers) over {path: bytes}; the requests are recorded in fetch.calls."""
    def fetch(url, headers):
        fetch.calls.append((url, dict(headers)))
        path = "/" + url.split("/", 3)[3]
        if status_of and path in status_of:
            return status_of[path]
        if path in documents:
            return 200, {}, documents[path], None
        return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}', None
    fetch.calls = []
    return fetch


def v1_documents(repository="testrepo"):
    docs = {"/v2/%s/manifests/v1" % repository: blob("regclient_testrepo", V1_INDEX)}
    for digest in (V1_INDEX, V1_AMD64, V1_ARM64):
        docs["/v2/%s/manifests/%s" % (repository, digest)] = blob("regclient_testrepo", digest)
    for digest in (V1_AMD64_CONFIG, V1_ARM64_CONFIG):
        docs["/v2/%s/blobs/%s" % (repository, digest)] = blob("regclient_testrepo", digest)
    return docs


def test_read_config_index_to_amd64_config():
    fetch = fake_registry(v1_documents())
    result = ri.read_config(ri.parse_reference("127.0.0.1:5000/testrepo:v1"), fetch)
    assert result["reachable"] and result["reason"] is None
    assert (result["index_digest"], result["manifest_digest"], result["config_digest"]) == \
        (V1_INDEX, V1_AMD64, V1_AMD64_CONFIG)
    assert result["env"] == [PATH_ENV] and result["platform"] == "linux/amd64"
    assert [url for url, _ in fetch.calls] == [
        "http://127.0.0.1:5000/v2/testrepo/manifests/v1",
        "http://127.0.0.1:5000/v2/testrepo/manifests/" + V1_AMD64,
        "http://127.0.0.1:5000/v2/testrepo/blobs/" + V1_AMD64_CONFIG]
    assert fetch.calls[0][1]["Accept"].startswith("application/vnd.oci.image.index.v1+json")


def test_read_config_arm64():
    result = ri.read_config(ri.parse_reference("127.0.0.1:5000/testrepo:v1"), fake_registry(v1_documents()),
                            platform=ri.parse_platform("linux/arm64"))
    assert result["manifest_digest"] == V1_ARM64 and result["platform"] == "linux/arm64"


def test_read_config_docker_v2_manifest_by_digest():
    docs = {"/v2/app/manifests/" + DOCKER_V2: blob("ggcr_test_index", DOCKER_V2),
            "/v2/app/blobs/" + DOCKER_V2_CONFIG: blob("ggcr_test_index", DOCKER_V2_CONFIG)}
    result = ri.read_config(ri.parse_reference("localhost:5000/app@" + DOCKER_V2), fake_registry(docs))
    assert result["reachable"] and result["index_digest"] is None and result["manifest_digest"] == DOCKER_V2
    assert result["env"] == []


def test_tampered_config_is_a_digest_mismatch_not_an_env():
    docs = v1_documents()
    path = "/v2/testrepo/blobs/" + V1_AMD64_CONFIG
    docs[path] = docs[path].replace(b'"Cmd":["sh"]', b'"Cmd":["ls"]')
    result = ri.read_config(ri.parse_reference("127.0.0.1:5000/testrepo:v1"), fake_registry(docs))
    assert not result["reachable"] and result["reason"] == "digest_mismatch" and result["env"] == []
    assert V1_AMD64_CONFIG in result["message"]


def test_manifest_by_digest_must_hash_to_it():
    docs = {"/v2/app/manifests/" + V1_AMD64: blob("regclient_testrepo", V1_ARM64)}   # the wrong manifest
    result = ri.read_config(ri.parse_reference("localhost/app@" + V1_AMD64), fake_registry(docs))
    assert result["reason"] == "digest_mismatch"


def test_docker_content_digest_header_is_checked():
    docs = v1_documents()
    fetch = fake_registry(docs, {"/v2/testrepo/manifests/v1": (200, {"docker-content-digest": V1_ARM64},
                                                                docs["/v2/testrepo/manifests/v1"], None)})
    assert ri.read_config(ri.parse_reference("127.0.0.1:5000/testrepo:v1"), fetch)["reason"] == "digest_mismatch"


@pytest.mark.parametrize("reference, status_of, reason", [
    ("127.0.0.1:5000/testrepo:v9", None, "not_found"),
    ("127.0.0.1:5000/testrepo:v1", {"/v2/testrepo/manifests/v1": (-1, {}, b"", "Connection refused")}, "unreachable"),
    ("127.0.0.1:5000/testrepo:v1", {"/v2/testrepo/manifests/v1": (500, {}, b"", None)}, "unreachable"),
    ("127.0.0.1:5000/testrepo:v1", {"/v2/testrepo/manifests/v1": (403, {}, b"", None)}, "auth_refused"),
    ("127.0.0.1:5000/testrepo:v1", {"/v2/testrepo/manifests/v1": (401, {}, b"", None)}, "auth_refused"),
    ("127.0.0.1:5000/testrepo:v1", {"/v2/testrepo/manifests/v1": (401, {"www-authenticate": 'Basic realm="r"'},
                                                                  b"", None)}, "auth_refused"),
])
def test_unreadable_registries_give_a_reason_not_an_error(reference, status_of, reason):
    result = ri.read_config(ri.parse_reference(reference), fake_registry(v1_documents(), status_of))
    assert result["reachable"] is False and result["reason"] == reason and result["message"]


def test_not_found_names_the_registry_error():
    result = ri.read_config(ri.parse_reference("127.0.0.1:5000/testrepo:v9"), fake_registry({}))
    assert "HTTP 404" in result["message"] and "MANIFEST_UNKNOWN manifest unknown" in result["message"]


def test_hub_names_are_not_read_without_a_registry_url():
    fetch = fake_registry(v1_documents("library/testrepo"))
    result = ri.read_config(ri.parse_reference("testrepo:v1"), fetch)
    assert result["reason"] == "no_registry_host" and fetch.calls == []
    result = ri.read_config(ri.parse_reference("testrepo:v1"), fetch, registry_url="http://127.0.0.1:5000/")
    assert result["reachable"] and fetch.calls[0][0] == "http://127.0.0.1:5000/v2/library/testrepo/manifests/v1"


# --- the module against a registry on loopback ----------------------------------------------------


class Registry(http.server.ThreadingHTTPServer):
    """Serves documents at their /v2/ paths; with token set, only to `Authorization: Bearer <token>` (else the
    spec's 401 with its challenge, the realm pointed at this server's /token); records every request."""

    def __init__(self, documents, token=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.documents = documents
        self.token = token
        self.requests = []

    @property
    def address(self):
        return "127.0.0.1:%d" % self.server_address[1]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        server = self.server
        server.requests.append((self.path, self.headers.get("Authorization"), self.headers.get("Accept")))
        if self.path.startswith("/token"):
            _status, _headers, body = http_capture("200-token_token-md-lines-232-235.http")
            return self.answer(200, {"Content-Type": "application/json"}, body.encode())
        if server.token and self.headers.get("Authorization") != "Bearer " + server.token:
            _status, headers, body = http_capture("401-unauthorized_token-md-lines-60-68.http")
            challenge = headers["Www-Authenticate"].replace("https://auth.docker.io/token",
                                                            "http://%s/token" % server.address)
            return self.answer(401, {"Content-Type": "application/json", "Www-Authenticate": challenge}, body.encode())
        if self.path in server.documents:
            data = server.documents[self.path]
            media = json.loads(data).get("mediaType", "application/octet-stream")
            return self.answer(200, {"Content-Type": media,
                                     "Docker-Content-Digest": "sha256:" + hashlib.sha256(data).hexdigest()}, data)
        return self.answer(404, {"Content-Type": "application/json"},
                           b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')

    def answer(self, status, headers, body):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def registry(request):
    token = getattr(request, "param", None)
    server = Registry(v1_documents(), token=token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_module_reads_manifest_and_config_never_a_layer(registry):
    res = run_ansible_module("container_image_config", {"image": "%s/testrepo:v1" % registry.address})
    assert res.get("failed") is not True, res
    assert res["changed"] is False and res["reachable"] is True
    assert res["env"] == [PATH_ENV] and res["labels"] == {"arg_label": "arg_for_label", "version": "1"}
    assert (res["manifest_digest"], res["config_digest"]) == (V1_AMD64, V1_AMD64_CONFIG)
    paths = [path for path, _auth, _accept in registry.requests]
    assert paths == ["/v2/testrepo/manifests/v1", "/v2/testrepo/manifests/" + V1_AMD64,
                     "/v2/testrepo/blobs/" + V1_AMD64_CONFIG]
    assert not any(layer in path for path in paths for layer in V1_AMD64_LAYERS)
    assert registry.requests[0][2].startswith("application/vnd.oci.image.index.v1+json, ")
    assert not res.get("warnings")


@pytest.mark.parametrize("registry", ["eyJ0eXAiOiJKV1Qi"], indirect=True)
def test_module_answers_the_bearer_challenge(registry):
    registry.token = http_capture("200-token_token-md-lines-232-235.http")[2].split('"')[3]
    res = run_ansible_module("container_image_config", {"image": "%s/testrepo:v1" % registry.address},
                             "--check")
    assert res["reachable"] is True and res["env"] == [PATH_ENV], res
    first, token_request, retry = registry.requests[:3]
    assert first[0] == "/v2/testrepo/manifests/v1" and first[1] is None
    # the challenge's service and scope, as the spec's client sends them; anonymous (no Authorization)
    assert token_request[0] == "/token?service=registry.docker.io&scope=repository%3Asamalba%2Fmy-app%3Apull%2Cpush"
    assert token_request[1] is None
    assert retry == ("/v2/testrepo/manifests/v1", "Bearer " + registry.token, retry[2])
    assert all(auth == "Bearer " + registry.token for _path, auth, _accept in registry.requests[3:])
    assert len(registry.requests) == 5   # one token for the three documents


@pytest.mark.parametrize("registry", ["eyJ0eXAiOiJKV1Qi"], indirect=True)
def test_module_sends_credentials_to_the_token_server_only(registry):
    registry.token = http_capture("200-token_token-md-lines-232-235.http")[2].split('"')[3]
    res = run_ansible_module("container_image_config", {"image": "%s/testrepo:v1" % registry.address,
                                                        "username": "puller", "password": "s3cret"})
    assert res["reachable"] is True
    assert registry.requests[1][1] == "Basic cHVsbGVyOnMzY3JldA=="     # base64("puller:s3cret")
    assert "s3cret" not in json.dumps(res)


def test_module_reports_unreadable_without_failing(registry):
    res = run_ansible_module("container_image_config", {"image": "%s/testrepo:v9" % registry.address})
    assert res.get("failed") is not True and res["reachable"] is False and res["reason"] == "not_found"
    assert "judged after the pull" in res["warnings"][0]
    registry.shutdown()
    registry.server_close()
    res = run_ansible_module("container_image_config", {"image": "%s/testrepo:v1" % registry.address,
                                                        "timeout": 5})
    assert res["reachable"] is False and res["reason"] == "unreachable", res


def test_module_hub_name_is_skipped_with_its_reason():
    res = run_ansible_module("container_image_config", {"image": "vllm/vllm-openai:v0.11.0"})
    assert res["reachable"] is False and res["reason"] == "no_registry_host" and res["requests"] == []
    assert "no registry URL" in res["message"] and not res.get("warnings")


@pytest.mark.parametrize("args, words", [
    ({"image": "Vllm/Bad:1"}, "image layer: 'Vllm/Bad:1'"),
    ({"image": "a:1", "platform": "amd64"}, "platform 'amd64'"),
    ({"image": "a:1", "registry_url": "mirror:5000"}, "registry_url 'mirror:5000'"),
])
def test_module_fails_only_on_invalid_options(args, words):
    res = run_ansible_module("container_image_config", args)
    assert res["failed"] is True and words in res["msg"] and "Fix:" in res["msg"]


# --- the vllm role: judged before the pull, pulled only when it passes ------------------------------

STUB = r'''#!/usr/bin/python
# WANT_JSON
import json, sys
with open(sys.argv[1]) as handle:
    args = json.load(handle)
with open(args["log"], "a") as handle:
    handle.write(json.dumps([%(kind)r, args.get("name") or args["image"]]) + "\n")
%(body)s
'''
STUBS = {
    # docker_image_info: the images the case's host has (their Config.Env)
    "stub_image_info": "print(json.dumps({'changed': False, 'images': [{'Config': {'Env': args['local'][args['name']]}}]"
                       " if args['name'] in args['local'] else []}))",
    # docker_image source: pull: recorded only
    "stub_pull": "print(json.dumps({'changed': True}))",
    # container_image_config: what the case's registry gives
    "stub_remote": "print(json.dumps(dict({'changed': False}, **args['remote'][args['image']])))",
}


def run_image_tasks(cases, tmp_path):
    import role_harness
    from test_cuda_image_guard import facts
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / (name + ".py")).write_text(STUB % {"kind": name, "body": body})
    with open(os.path.join(ROOT, "roles", "vllm", "tasks", "image.yml"), encoding="utf-8") as handle:
        tasks = role_harness.load_tasks(handle.read())
    swaps = {"community.docker.docker_image_info": "stub_image_info", "community.docker.docker_image": "stub_pull",
             "container_image_config": "stub_remote"}
    tasks = [role_harness.replace_module(t, role_harness.module_of(t), swaps.get(role_harness.module_of(t),
                                                                                    role_harness.module_of(t)))
             for t in tasks]
    log = {"log": "{{ case_dir }}/calls"}
    defaults = {"stub_image_info": dict(log, local="{{ case_local }}"), "stub_pull": log,
                "stub_remote": dict(log, remote="{{ case_remote }}")}
    for case in cases.values():
        nvidia = facts(case.pop("smi"))   # nvidia_gpu_facts' driver_version_userspace is nvidia-smi's driver
        case["vars"]["ansible_facts"] = {"nvidia": dict(nvidia, driver_version_userspace=nvidia["driver_version"])}
        case["vars"].setdefault("case_local", {})
        case["vars"].setdefault("vllm_image_precheck", True)
        case["vars"]["vllm_image_precheck_registry_url"] = ""
    capture = {"calls": "{{ lookup('ansible.builtin.file', case_dir ~ '/calls', errors='ignore') | default('') }}",
               "verdicts": "{{ vllm_image_cuda_by_image | default(none) }}",
               "before_pull": "{{ vllm_image_cuda_before_pull.results | default([]) | map(attribute='msg', default='')"
                              " | list }}"}
    out = role_harness.run_cases(cases, tasks, capture, "%s:%s" % (stubs, os.path.join(ROOT, "library")),
                                 os.path.join(ROOT, "module_utils"), module_defaults=defaults)
    for result in out.values():
        result["calls"] = [tuple(json.loads(line)) for line in (result["calls"] or "").splitlines()]
    return out


def test_vllm_role_refuses_before_the_pull_and_pulls_what_passes(tmp_path):
    from test_cuda_requirement import image_env
    new = image_env("001_cuda-12.8.1_ubuntu2204_x86_64.txt", "12.8.1")    # no GeForce alternative
    old = image_env("002_cuda-12.4.1_ubuntu2204_x86_64.txt", "12.4.1")    # geforce,driver>=535 among them
    image, local_image, hub_image = "127.0.0.1:5000/vllm/vllm-openai:v0.11.0", "local/standin:1", "vllm/x:1"
    instance = {"name": "a", "image": image, "gpu_indexes": [0]}
    reachable = {"reachable": True, "reason": None, "env": new}
    cases = {
        # RTX 4090 on 535 (CUDA 12.2): the CUDA 12.8 image is refused, its pull never asked for
        "refused": {"smi": "022_qx_535_RTX4090.xml",
                    "vars": {"vllm_resolved": [instance], "case_remote": {image: reachable}}},
        # 8x H100 on 565 (CUDA 12.7): the same image passes with forward compatibility (a warning) and is pulled
        "datacenter": {"smi": "055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt",
                       "vars": {"vllm_resolved": [instance], "case_remote": {image: reachable}}},
        # an image the host has (loaded from a tarball) is never looked up in a registry nor pulled, and is judged
        # after the pull step; a Hub name the module could not read is pulled and judged after the pull
        "local_and_unread": {"smi": "022_qx_535_RTX4090.xml",
                             "vars": {"vllm_resolved": [dict(instance, image=local_image),
                                                        dict(instance, name="b", image=hub_image)],
                                      "case_local": {local_image: old},
                                      "case_remote": {hub_image: {"reachable": False, "reason": "no_registry_host",
                                                                  "env": []}}}},
        "precheck_off": {"smi": "022_qx_535_RTX4090.xml",
                         "vars": {"vllm_resolved": [instance], "case_remote": {}, "vllm_image_precheck": False}},
    }
    out = run_image_tasks(cases, tmp_path)
    refused = out["refused"]
    assert refused["failed"]["task"] == "The driver runs each serving image's CUDA, judged before the pull"
    (msg,) = refused["before_pull"]
    assert "12.8" in msg and "12.2" in msg and "fix:" in msg
    assert refused["calls"] == [("stub_image_info", image), ("stub_remote", image)]     # no pull
    assert out["datacenter"]["failed"] is None
    assert out["datacenter"]["calls"] == [("stub_image_info", image), ("stub_remote", image), ("stub_pull", image)]
    assert out["datacenter"]["verdicts"][image]["verdict"] == "forward_compat"
    mixed = out["local_and_unread"]
    assert mixed["calls"] == [("stub_image_info", local_image), ("stub_image_info", hub_image),
                              ("stub_remote", hub_image), ("stub_pull", hub_image),
                              ("stub_image_info", local_image), ("stub_image_info", hub_image)]
    # the local CUDA 12.4 image is still judged after the pull step, as before: on a GeForce its brand/driver
    # alternative (forward compatibility) does not hold, so it is refused there
    assert mixed["failed"]["task"] == "The driver runs each serving image's CUDA"
    assert [item["item"] for item in mixed["failed"]["items"]] == [local_image]
    off = out["precheck_off"]
    assert ("stub_remote", image) not in off["calls"] and ("stub_pull", image) in off["calls"]
