"""daemon.json parse/merge/render, checked against files the real nvidia-ctk 1.20.0 wrote."""
import json
import os

import pytest

from conftest import FIXTURES
from containers.daemon_json import DaemonJsonError, changed_keys, keep_features, merge, parse, render

CTK = os.path.join(FIXTURES, "nvidia_ctk")
REAL_OUTPUTS = [
    "docker_configure_cdi-enabled.json",
    "docker_configure_existing-keys.json",
    "docker_configure_missing-file.json",
    "docker_configure_set-as-default.json",
    "docker_configure_set-as-default_keeps-crun.json",
]


def read(name):
    with open(os.path.join(CTK, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("name", REAL_OUTPUTS)
def test_render_is_byte_identical_to_nvidia_ctk(name):
    # Whatever nvidia-ctk wrote, re-rendering it must not change a byte, or the two writers of
    # daemon.json would flip the file back and forth on every run.
    text = read(name)
    assert not text.endswith("\n")
    assert render(parse(text)) == text


def test_render_escapes_like_go():
    assert render({"a": "<b>&"}) == '{\n    "a": "\\u003cb\\u003e\\u0026"\n}'


def test_merge_keeps_operator_keys_and_merges_nested_objects():
    current = {"registry-mirrors": ["https://mirror.example"], "log-opts": {"max-size": "10m"},
               "features": {"buildkit": True}}
    merged = merge(current, {"features": {"cdi": True}, "log-opts": {"max-file": "3"}})
    assert merged == {"registry-mirrors": ["https://mirror.example"],
                      "log-opts": {"max-size": "10m", "max-file": "3"},
                      "features": {"buildkit": True, "cdi": True}}
    assert current["features"] == {"buildkit": True}, "merge must not change its input"


def test_merge_replaces_lists_and_scalars_and_none_removes():
    merged = merge({"dns": ["1.1.1.1"], "debug": True, "x": 1}, {"dns": ["9.9.9.9"], "debug": False, "x": None})
    assert merged == {"dns": ["9.9.9.9"], "debug": False}


def test_keep_features_restores_what_cdi_enabled_dropped():
    before = {"features": {"buildkit": True, "containerd-snapshotter": False}}
    after = {"features": {"cdi": True}, "runtimes": {}}
    assert keep_features(before, after)["features"] == {"buildkit": True, "containerd-snapshotter": False, "cdi": True}
    assert keep_features({}, after) == after


def test_changed_keys():
    assert changed_keys({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == ["b", "c"]
    assert changed_keys({"a": 1}, {}) == ["a"]
    assert changed_keys({"a": {"x": 1}}, {"a": {"x": 1}}) == []


@pytest.mark.parametrize("text", ["", "  \n"])
def test_empty_file_means_no_settings(text):
    assert parse(text) == {}


@pytest.mark.parametrize("text,needle", [
    ('{"bridge": none', "not valid JSON"),
    ("{bad}", "not valid JSON"),
    ('["bridge"]', "must hold a JSON object"),
])
def test_malformed_file_is_reported_with_its_path(text, needle):
    with pytest.raises(DaemonJsonError) as err:
        parse(text, "/etc/docker/daemon.json")
    assert "/etc/docker/daemon.json" in str(err.value) and needle in str(err.value)


def test_merge_then_render_round_trip_is_stable():
    config = merge(parse(read("docker_configure_existing-keys.json")), {"log-opts": {"max-size": "100m"}})
    text = render(config)
    assert json.loads(text) == config
    assert render(parse(text)) == text
