"""The diagnosis of a CDI spec too new for the engine: stack_check.check_cdi_spec_version, its wiring into
the cdi_spec check, and the error table's row for the engine's own text (tests/fixtures/cdi_versions/)."""
import json
import os

from diagnosis import error_catalogue as catalogue
from diagnosis import explain as ex
from layers import stack_check as sc
from conftest import FIXTURES
from test_stack_check import DOCKER_INFO, PROBE_OPTS, containerd_host, healthy_host, spec_text

HERE = os.path.join(FIXTURES, "cdi_versions")
MANAGED = "/etc/cdi/nvidia.yaml"


def read(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as handle:
        return handle.read()


def spec_070(text=None):
    """The real 1.20.0 spec (corpus nvidia_ctk/) as toolkit 1.19.1+ writes it where /dev/nvidia0 is 0660 with
    group 44: the device gets `additionalGids: [44]` and the spec cdiVersion 0.7.0 (constructed here from the
    toolkit's source, internal/edits/device.go; no complete real 0.7.0 spec was found)."""
    text = text or spec_text()
    text = text.replace("cdiVersion: 0.5.0", "cdiVersion: 0.7.0", 1)
    return text.replace("              hostPath: /dev/nvidia0\n",
                        "              hostPath: /dev/nvidia0\n        additionalGids:\n            - 44\n")


def test_the_constructed_spec_reads_as_0_7_0():
    assert spec_070().count("additionalGids:") == 3
    assert sc.read_spec(spec_070())["devices"] == sc.read_spec(spec_text())["devices"]
    assert sc.read_spec(spec_070())["cdi_version"] == "0.7.0"


def test_too_new_for_docker_26_0():
    check = sc.check_cdi_spec_version({MANAGED: spec_070()}, {"docker": "26.0.2"})
    assert check["status"] == "fail" and check["layer"] == "cdi"
    assert check["summary"] == ("spec version too new for docker 26.0.2: /etc/cdi/nvidia.yaml is cdiVersion 0.7.0, "
                                "docker 26.0.2 reads up to 0.6.0")
    assert ("`nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes "
            "--output=/etc/cdi/nvidia.yaml`") in check["remedy"]
    assert check["remedy"].endswith("or upgrade docker to 26.1.0 or later")
    assert check["evidence"]["lines"] == ["/etc/cdi/nvidia.yaml: cdiVersion 0.7.0",
                                          "docker 26.0.2: reads CDI specs up to 0.6.0"]


def test_readable_specs_and_engines_without_cdi():
    ok = sc.check_cdi_spec_version({MANAGED: spec_070()}, {"docker": "26.1.5+dfsg1"})
    assert ok["status"] == "ok"
    assert ok["summary"] == "/etc/cdi/nvidia.yaml cdiVersion 0.7.0, readable by docker 26.1.5+dfsg1"
    assert sc.check_cdi_spec_version({MANAGED: spec_070()}, {"containerd": "1.7.24~ds1"})["status"] == "ok"
    assert sc.check_cdi_spec_version({MANAGED: spec_text()}, {"docker": "26.0.2"})["status"] == "ok"
    # Debian 12's docker 20.10 has no CDI: nothing to judge
    skipped = sc.check_cdi_spec_version({MANAGED: spec_070()}, {"docker": "20.10.24+dfsg1"})
    assert skipped["status"] == "skipped" and "docker 20.10.24+dfsg1" in skipped["summary"]
    assert sc.check_cdi_spec_version({MANAGED: spec_070()}, {"docker": None})["status"] == "skipped"
    assert sc.check_cdi_spec_version({}, {"docker": "26.0.2"})["status"] == "skipped"
    assert sc.check_cdi_spec_version({MANAGED: "not: a spec\n"}, {"docker": "26.0.2"})["status"] == "skipped"


def test_a_refreshed_spec_in_var_run_is_named_too():
    # nvidia-cdi-refresh's spec, as in NVIDIA/nvidia-container-toolkit#1860: both files too new
    specs = {MANAGED: spec_070(), "/var/run/cdi/nvidia.yaml": spec_070()}
    check = sc.check_cdi_spec_version(specs, {"containerd": "1.7.13"})
    assert check["summary"].startswith("spec version too new for containerd 1.7.13: /etc/cdi/nvidia.yaml is")
    assert check["summary"].endswith("(and 1 more)")
    assert check["data"]["too_new"][1].startswith("spec version too new for containerd 1.7.13: /var/run/cdi/")


def test_pipeline_fails_the_cdi_layer_with_the_finding():
    io = healthy_host()
    healthy = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    io = healthy_host()
    io.files[MANAGED] = spec_070(io.files[MANAGED])
    io.commands[("/usr/bin/docker", "info")] = (0, json.dumps(dict(DOCKER_INFO, ServerVersion="26.0.2")), "")
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "cdi"
    assert out["message"].startswith("CDI spec: spec version too new for docker 26.0.2: /etc/cdi/nvidia.yaml is "
                                     "cdiVersion 0.7.0, docker 26.0.2 reads up to 0.6.0 — regenerate it for "
                                     "docker 26.0.2: `nvidia-ctk cdi generate --feature-flag "
                                     "no-additional-gids-for-device-nodes")
    cdi = next(c for c in out["checks"] if c["name"] == "cdi_spec")
    assert cdi["status"] == "fail" and cdi["data"]["spec_versions"] == {MANAGED: "0.7.0"}
    assert cdi["data"]["driver_versions"] == ["590.44.01"]
    # one check, not a new one: the reports keep their count
    assert [c["name"] for c in out["checks"]] == [c["name"] for c in healthy["checks"]]


def test_pipeline_on_a_healthy_host_is_unchanged():
    out = sc.evaluate(sc.capture(healthy_host(), PROBE_OPTS), PROBE_OPTS)
    cdi = next(c for c in out["checks"] if c["name"] == "cdi_spec")
    assert cdi["status"] == "ok" and cdi["summary"].startswith("/etc/cdi/nvidia.yaml fresh for driver 590.44.01")


def test_a_stale_spec_is_reported_as_stale_first():
    io = healthy_host()
    io.files[MANAGED] = spec_070()          # made for driver 999.88.77, 590.44.01 is loaded
    io.commands[("/usr/bin/docker", "info")] = (0, json.dumps(dict(DOCKER_INFO, ServerVersion="26.0.2")), "")
    cdi = next(c for c in sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)["checks"] if c["name"] == "cdi_spec")
    assert cdi["status"] == "fail" and "is stale" in cdi["summary"]


def test_containerd_node_is_judged_by_its_server_version():
    io = containerd_host()
    io.files[MANAGED] = spec_070(spec_text().replace("999.88.77", "590.44.01"))
    io.dirs["/etc/cdi"] = ["nvidia.yaml"]
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    cdi = next(c for c in out["checks"] if c["name"] == "cdi_spec")
    assert cdi["status"] == "ok", cdi          # Debian's containerd 1.7.24~ds1 reads 0.7.0


# --- the engine's own text ------------------------------------------------------------------------

def test_the_engines_text_is_explained():
    debug = ex.explain(read("podman-4.9.3_debug-log_nvidia-container-toolkit-1865.txt"))["findings"]
    assert [(f["layer"], f["kind"]) for f in debug] == [("cdi", "cdi_spec_too_new")]
    assert debug[0]["meaning"].startswith("spec version too new for the engine")
    assert "--feature-flag no-additional-gids-for-device-nodes" in debug[0]["fix"]
    for name in ("podman-4.9.3_run-error_nvidia-container-toolkit-1865.txt",
                 "podman-4.9.3_run-error_nvidia-container-toolkit-1940.txt"):
        found = ex.explain(read(name))["findings"]
        assert [(f["layer"], f["kind"]) for f in found] == [("cdi", "cdi_unresolvable")], name


def test_the_version_check_text_and_a_malformed_spec():
    entry = next(e for e in catalogue.ENTRIES if e["kind"] == "cdi_spec_too_new")
    # container-device-interface pkg/cdi/spec.go: fmt.Errorf("invalid CDI Spec: %w", ...) around
    # fmt.Errorf("invalid version %q", version) (from the code; no real capture was found)
    assert catalogue.matches(entry, 'failed to load CDI Spec invalid CDI Spec: invalid version "0.7.0"')
    # a spec that is merely malformed is not "too new"
    assert not catalogue.matches(entry, 'failed to parse CDI Spec "/etc/cdi/nvidia.yaml": failed to unmarshal '
                                        'CDI Spec: error converting YAML to JSON: yaml: line 3: mapping values are '
                                        'not allowed in this context')
