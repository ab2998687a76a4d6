# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An image's configuration read from its registry before any pull: the manifest and the config blob only.

Pure stdlib, no Ansible imports (shipped to hosts as module_utils; library/container_image_config.py is the
thin shell that does the HTTP through ansible.module_utils.urls).  What `skopeo inspect --config` does:

    GET /v2/<repository>/manifests/<tag or digest>   (Accept: OCI index, Docker list, OCI and Docker manifest)
    -> an index/list: pick the platform's entry, GET /v2/<repository>/manifests/<its digest>
    GET /v2/<repository>/blobs/<config digest>       (the image configuration: config.Env, config.Labels)

and never a layer blob.  Every document is checked against the digest that named it.

    result = read_config(parse_reference("127.0.0.1:5000/vllm/vllm-openai:v0.11.0"), fetch)
    result["reachable"], result["env"]

fetch(url, headers) -> (status, headers with lower-case names, body bytes, error text); status -1 when no
HTTP answer came (refused, timed out, TLS).  The flow follows the registry HTTP API (distribution/distribution
docs/content/spec/api.md) and its token authentication (docs/content/spec/auth/token.md): a 401 carrying
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` is answered by a GET of the realm with service and
scope (anonymous, or with Basic credentials), and the request is retried with `Authorization: Bearer <token>`.

Reference rules: docker/distribution reference (normalize.go splitDockerDomain): the first path component is a
registry host only when it contains "." or ":" or is "localhost"; otherwise the reference has no registry host
(Docker Hub), whose one-component names are "library/<name>" there.  A reference with both a tag and a digest
is pulled by its digest.
"""
import base64
import hashlib
import json
import re

try:
    from urllib.parse import quote, urlencode
except ImportError:  # Python 2
    from urllib import quote, urlencode  # noqa: F401


class RegistryImageError(ValueError):
    """The image reference or the platform cannot be read, or a registry document is not what it should be;
    the message names it.  reason: the result's reason when a registry document raised it."""

    def __init__(self, message, reason="unsupported"):
        ValueError.__init__(self, message)
        self.reason = reason


# Media types, most specific first: the Accept list of a manifest GET (as containers/image and docker send).
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")
MANIFEST_ACCEPT = (OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)

# Why a configuration could not be read (result "reason"); the role then judges the image after the pull.
REASONS = ("no_registry_host", "unreachable", "auth_refused", "not_found", "unsupported", "no_platform",
           "digest_mismatch", "invalid_response")

MAX_DOCUMENT = 4 * 1024 * 1024   # a manifest or config larger than this is not one (vLLM's config: ~20 KB)

# docker/distribution reference/regexp.go
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY = re.compile(r"^%s(?:/%s)*$" % (_COMPONENT, _COMPONENT))
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")
_HOST = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
                   r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$")
_HASHES = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}


def registry_host(name):
    """(host[:port], the rest) when a name's first component is a registry host - docker's rule: it has a '.' or a ':'
    or is localhost, and a '/' follows - else (None, name): a Docker Hub name."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, name


def parse_reference(reference):
    """{"registry": host[:port] or None, "repository", "tag", "digest", "reference": what the manifest GET names}.

    registry None: a Docker Hub short name (no registry host); its repository is then the Hub's
    ("library/ubuntu" for "ubuntu")."""
    text = (reference or "").strip()
    if not text:
        raise RegistryImageError("the image reference is empty: give repo:tag or repo@sha256:<digest>")
    name, digest = text, None
    if "@" in text:
        name, digest = text.split("@", 1)
        if not _DIGEST.match(digest):
            raise RegistryImageError("%r: the digest %r is not algorithm:hex (sha256:<64 hex digits>)" % (text, digest))
    tag = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.match(tag):
            raise RegistryImageError("%r: the tag %r is not a valid tag (letters, digits, _ . -, at most 128)"
                                     % (text, tag))
    registry, path = registry_host(name)
    if registry is not None:
        if not _HOST.match(registry):
            raise RegistryImageError("%r: %r is not a registry host[:port]" % (text, registry))
    if not _REPOSITORY.match(path):
        raise RegistryImageError("%r: the repository %r is not lower-case components separated by /"
                                 % (text, path))
    if registry is None and "/" not in path:
        path = "library/" + path
    if digest is None and tag is None:
        tag = "latest"
    return {"registry": registry, "repository": path, "tag": tag, "digest": digest,
            "reference": digest or tag}


def parse_platform(text):
    """"linux/amd64", "linux/arm/v7" -> {"os", "architecture", "variant" or None}."""
    parts = (text or "").strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise RegistryImageError("platform %r is not os/architecture[/variant] (e.g. linux/amd64)" % text)
    return {"os": parts[0], "architecture": parts[1], "variant": parts[2] if len(parts) == 3 else None}


def is_loopback_host(registry):
    """localhost, 127.0.0.0/8 and [::1], with or without a port: docker's daemon treats them as insecure
    registries by default (its insecure-registries always holds 127.0.0.0/8), so they speak plain HTTP."""
    host = registry
    if host.startswith("["):
        host = host[1:host.index("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host == "localhost" or host == "::1" or bool(re.match(r"^127(?:\.\d{1,3}){3}$", host))


def base_url(registry, insecure=False):
    """The registry's base URL: https, or http for an insecure (or loopback) registry."""
    scheme = "http" if insecure or is_loopback_host(registry) else "https"
    return "%s://%s" % (scheme, registry)


def manifest_url(base, repository, reference):
    return "%s/v2/%s/manifests/%s" % (base.rstrip("/"), repository, quote(reference, safe=":"))


def blob_url(base, repository, digest):
    return "%s/v2/%s/blobs/%s" % (base.rstrip("/"), repository, quote(digest, safe=":"))


def manifest_headers():
    return {"Accept": ", ".join(MANIFEST_ACCEPT)}


def verify_digest(data, digest):
    """True when data is what digest names; RegistryImageError when the algorithm is not one we can compute."""
    algorithm, expected = digest.partition(":")[::2]
    if algorithm not in _HASHES:
        raise RegistryImageError("digest %r: algorithm %r is not one of %s" % (digest, algorithm, ", ".join(_HASHES)))
    return _HASHES[algorithm](data).hexdigest() == expected.lower()


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json_object(body, what):
    """The JSON object a registry answered (bytes or text), or RegistryImageError naming `what` it was."""
    try:
        document = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
    except ValueError as exc:
        raise RegistryImageError("%s is not JSON: %s" % (what, exc), "invalid_response")
    if not isinstance(document, dict):
        raise RegistryImageError("%s is not a JSON object" % what, "invalid_response")
    return document


def parse_manifest(body, content_type=None):
    """(kind, document): kind "index" (OCI index / Docker manifest list) or "manifest" (OCI / Docker v2).

    The document's own mediaType wins over the Content-Type header (registries send text/plain at times);
    a Docker schema 1 manifest (no config blob to read) raises RegistryImageError."""
    document = _json_object(body, "the manifest")
    media_type = document.get("mediaType") or (content_type or "").split(";")[0].strip()
    if media_type in DOCKER_SCHEMA1 or document.get("schemaVersion") == 1:
        raise RegistryImageError("a Docker schema 1 manifest has no configuration blob to read")
    if media_type in INDEX_TYPES or (not media_type and isinstance(document.get("manifests"), list)):
        return "index", document
    if media_type in MANIFEST_TYPES or (not media_type and isinstance(document.get("config"), dict)):
        return "manifest", document
    raise RegistryImageError("media type %r is neither an image index nor an image manifest" % media_type)


def platform_name(platform):
    parts = [platform.get("os") or "?", platform.get("architecture") or "?"]
    if platform.get("variant"):
        parts.append(platform["variant"])
    return "/".join(parts)


def select_platform(index, platform):
    """The index's descriptor of an image manifest for platform ({"os", "architecture", "variant"}).

    Entries of other media types (nested indexes, artifacts) and buildkit's attestation manifests
    (platform unknown/unknown) are not images of a platform.  Without a wanted variant the entry without a
    variant is preferred, then the first.  RegistryImageError names the platforms the index has."""
    candidates = []
    offered = []
    for entry in index.get("manifests") or []:
        if not isinstance(entry, dict):
            continue
        entry_platform = entry.get("platform") or {}
        if entry.get("mediaType") not in MANIFEST_TYPES + (None,):
            continue
        if entry_platform.get("os") in (None, "unknown"):
            continue
        offered.append(platform_name(entry_platform))
        if entry_platform.get("os") != platform["os"] or entry_platform.get("architecture") != platform["architecture"]:
            continue
        if platform.get("variant") and entry_platform.get("variant") != platform["variant"]:
            continue
        candidates.append(entry)
    if not candidates:
        raise RegistryImageError("no %s image in the index (it has: %s)"
                                 % (platform_name(platform), ", ".join(offered) or "no platform images"), "no_platform")
    plain = [entry for entry in candidates if not (entry.get("platform") or {}).get("variant")]
    return (plain or candidates)[0]


def config_descriptor(manifest):
    config = manifest.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("digest"), str):
        raise RegistryImageError("the manifest names no config blob", "invalid_response")
    if not _DIGEST.match(config["digest"]):
        raise RegistryImageError("the manifest's config digest %r is not algorithm:hex" % config["digest"],
                                 "invalid_response")
    return config


def image_config(body):
    """{"env": [...], "labels": {...}, "platform": "os/arch[/variant]"} of an image configuration blob (the
    JSON `docker image inspect` shows as .Config, here under the key "config")."""
    document = _json_object(body, "the config blob")
    config = document.get("config") or {}
    return {"env": list(config.get("Env") or []), "labels": dict(config.get("Labels") or {}),
            "platform": platform_name(document)}


_CHALLENGE_PARAM = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))\s*(?:,|$)')


def parse_challenge(header):
    """(scheme lower-case, {param: value}) of one WWW-Authenticate challenge (RFC 7235 auth-param list;
    quoted values may hold commas, as scope="repository:samalba/my-app:pull,push")."""
    text = (header or "").strip()
    scheme, rest = text.partition(" ")[::2]
    params = {}
    position = 0
    rest = rest.strip()
    while position < len(rest):
        match = _CHALLENGE_PARAM.match(rest, position)
        if not match or match.end() == position:
            break
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        position = match.end()
    return scheme.lower(), params


def token_url(params, repository):
    """The token request of a Bearer challenge: realm?service=...&scope=... (the challenge's scope, else pull
    of the repository)."""
    query = []
    if params.get("service"):
        query.append(("service", params["service"]))
    query.append(("scope", params.get("scope") or "repository:%s:pull" % repository))
    realm = params["realm"]
    return "%s%s%s" % (realm, "&" if "?" in realm else "?", urlencode(query))


def token_from_response(body):
    """The token of a token server's answer ("token", or OAuth2's "access_token"), or None."""
    try:
        document = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    return document.get("token") or document.get("access_token") or None


def basic_authorization(username, password):
    raw = ("%s:%s" % (username, password or "")).encode("utf-8")
    return "Basic " + base64.b64encode(raw).decode("ascii")


class _Unreadable(Exception):
    def __init__(self, reason, message):
        Exception.__init__(self, message)
        self.reason = reason
        self.message = message


class _Client(object):
    """GETs against one registry, answering its auth challenge once per repository (the token is reused)."""

    def __init__(self, fetch, repository, username=None, password=None):
        self.fetch = fetch
        self.repository = repository
        self.username = username
        self.password = password
        self.authorization = None
        self.requests = []

    def get(self, url, headers=None, what="document"):
        headers = dict(headers or {})
        status, response_headers, body, error = self._get(url, headers)
        if status == 401 and self.authorization is None:
            self.authorization = self._authorize(response_headers.get("www-authenticate", ""), url)
            status, response_headers, body, error = self._get(url, headers)
        if status == -1:
            raise _Unreadable("unreachable", "%s: no answer (%s)" % (url, error or "connection failed"))
        if status in (401, 403):
            raise _Unreadable("auth_refused", "%s: HTTP %d, the registry refused %s access%s"
                              % (url, status, "the token's" if self.authorization else "anonymous",
                                 _error_text(body)))
        if status == 404:
            raise _Unreadable("not_found", "%s: HTTP 404, the registry has no such %s%s"
                              % (url, what, _error_text(body)))
        if status != 200:
            raise _Unreadable("unreachable", "%s: HTTP %d%s" % (url, status, _error_text(body)))
        if len(body) > MAX_DOCUMENT:
            raise _Unreadable("invalid_response", "%s: more than %d bytes: not a %s" % (url, MAX_DOCUMENT, what))
        return response_headers, body

    def _get(self, url, headers):
        if self.authorization:
            headers["Authorization"] = self.authorization
        self.requests.append(url)
        return self.fetch(url, headers)

    def _authorize(self, header, url):
        scheme, params = parse_challenge(header)
        if scheme == "basic":
            if not self.username:
                raise _Unreadable("auth_refused", "%s: the registry wants Basic credentials; none were given" % url)
            return basic_authorization(self.username, self.password)
        if scheme != "bearer" or not params.get("realm"):
            raise _Unreadable("auth_refused", "%s: HTTP 401 without a Bearer or Basic challenge (%r)" % (url, header))
        headers = {}
        if self.username:
            headers["Authorization"] = basic_authorization(self.username, self.password)
        token_request = token_url(params, self.repository)
        self.requests.append(token_request.split("?", 1)[0])
        status, _headers, body, error = self.fetch(token_request, headers)
        if status == -1:
            raise _Unreadable("unreachable", "token server %s: no answer (%s)" % (params["realm"], error))
        if status != 200:
            raise _Unreadable("auth_refused", "token server %s: HTTP %d for %s access%s"
                              % (params["realm"], status, "the given user's" if self.username else "anonymous",
                                 _error_text(body)))
        token = token_from_response(body)
        if not token:
            raise _Unreadable("auth_refused", "token server %s: no token in its answer" % params["realm"])
        return "Bearer " + token


def _error_text(body):
    """The registry's error code and message ({"errors": [{"code", "message"}]}), as ': CODE message'."""
    try:
        errors = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body).get("errors") or []
        first = errors[0]
        return ": %s %s" % (first.get("code", ""), first.get("message", ""))
    except (ValueError, AttributeError, IndexError, TypeError):
        return ""


def read_config(ref, fetch, platform=None, registry_url=None, insecure=False, username=None, password=None):
    """Read ref's (parse_reference) image configuration for platform (default linux/amd64) through fetch.

    Never raises for what the registry does: the result says reachable false with a reason (REASONS) and
    a message.  registry_url: the base URL for a reference without a registry host (none: not read,
    reason no_registry_host)."""
    platform = platform or parse_platform("linux/amd64")
    result = {"reachable": False, "reason": None, "message": None, "registry": ref["registry"],
              "repository": ref["repository"], "reference": ref["reference"], "url": None,
              "manifest_digest": None, "index_digest": None, "config_digest": None, "env": [], "labels": {},
              "platform": None, "requests": []}
    if ref["registry"]:
        base = base_url(ref["registry"], insecure)
    elif registry_url:
        base = registry_url.rstrip("/")
    else:
        result.update(reason="no_registry_host",
                      message="the reference names no registry host (a Docker Hub name) and no registry URL "
                              "was given for such names: not read before the pull")
        return result
    result["url"] = base
    client = _Client(fetch, ref["repository"], username, password)
    try:
        _read(client, base, ref, platform, result)
    except _Unreadable as exc:
        result.update(reachable=False, reason=exc.reason, message=exc.message)
    except RegistryImageError as exc:
        result.update(reachable=False, reason=exc.reason, message=str(exc))
    result["requests"] = client.requests
    return result


def _read(client, base, ref, platform, result):
    url = manifest_url(base, ref["repository"], ref["reference"])
    headers, body = client.get(url, manifest_headers(), "manifest")
    named = ref["digest"] or headers.get("docker-content-digest")
    if named and not _checked(body, named):
        raise _Unreadable("digest_mismatch", "%s: the manifest is not %s (it hashes to %s)"
                          % (url, named, sha256_digest(body)))
    digest = named or sha256_digest(body)
    kind, document = parse_manifest(body, headers.get("content-type"))
    if kind == "index":
        result["index_digest"] = digest
        entry = select_platform(document, platform)
        url = manifest_url(base, ref["repository"], entry["digest"])
        headers, body = client.get(url, manifest_headers(), "manifest")
        if not _checked(body, entry["digest"]):
            raise _Unreadable("digest_mismatch", "%s: the %s manifest is not %s (it hashes to %s)"
                              % (url, platform_name(platform), entry["digest"], sha256_digest(body)))
        kind, document = parse_manifest(body, headers.get("content-type"))
        if kind != "manifest":
            raise RegistryImageError("the index's %s entry is not an image manifest" % platform_name(platform))
        digest = entry["digest"]
    result["manifest_digest"] = digest
    config = config_descriptor(document)
    url = blob_url(base, ref["repository"], config["digest"])
    _headers, body = client.get(url, {}, "config blob")
    if not _checked(body, config["digest"]):
        raise _Unreadable("digest_mismatch", "%s: the config blob is not %s (it hashes to %s)"
                          % (url, config["digest"], sha256_digest(body)))
    parsed = image_config(body)
    result.update(reachable=True, reason=None, message=None, config_digest=config["digest"], env=parsed["env"],
                  labels=parsed["labels"], platform=parsed["platform"])


def _checked(body, digest):
    try:
        return verify_digest(body, digest)
    except RegistryImageError:
        raise _Unreadable("unsupported", "digest %s: its algorithm cannot be checked here" % digest)
