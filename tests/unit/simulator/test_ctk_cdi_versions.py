"""The simulated `nvidia-ctk cdi generate`: the cdiVersion each toolkit version writes for its content, and
--feature-flag as the real tool takes it (tests/fixtures/cdi_versions/README.md names the toolkit sources).

Device nodes are real char devices made with mknod in a temporary dev root (skipped where mknod is not
permitted), so the spec describes them as the toolkit does from the host's nodes.
"""
import json
import os
import sys

import pytest

from test_ctk import UUID, make_state, mock_driver_root, run, state_env, untimed  # noqa: F401 (fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
for sub in ("module_utils",):
    if os.path.join(ROOT, sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, sub))

from containers.cdi_spec import read_spec  # noqa: E402

FLAG = "no-additional-gids-for-device-nodes"


def char_node(path, major, minor, mode, gid):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    try:
        os.mknod(str(path), 0o020000 | mode, os.makedev(major, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip("mknod not permitted here: %s" % exc)
    os.chmod(str(path), mode)
    os.chown(str(path), 0, gid)


@pytest.fixture
def host(tmp_path, state_env):  # noqa: F811
    """The mock driver root, /dev/nvidia0 made 0660 root:44 (NVreg_DeviceFileMode=0660,
    NVreg_DeviceFileGID=44: video), /dev/nvidiactl 0666 root:root."""
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    os.unlink(str(root / "dev" / "nvidiactl"))
    char_node(root / "dev" / "nvidia0", 195, 0, 0o660, 44)
    char_node(root / "dev" / "nvidiactl", 195, 255, 0o666, 0)
    return root


def generate(root, *flags, version="1.20.0", env=None):
    rc, out, err = run(["cdi", "generate", "--driver-root=%s" % root] + list(flags), version=version, env=env)
    assert rc == 0, err
    return out, untimed(err)


DEVICE_0_070 = '''    - name: "0"
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia0
              hostPath: /dev/nvidia0
              major: 195
              fileMode: 432
              permissions: rwm
              gid: 44
        additionalGids:
            - 44
'''


def test_group_only_node_gives_additional_gids_and_0_7_0(host):
    out, log = generate(host)
    assert out.startswith("---\ncdiVersion: 0.7.0\nkind: nvidia.com/gpu\ndevices:\n" + DEVICE_0_070)
    assert out.count("additionalGids:") == 3                       # "0", the UUID, "all"
    # nvidiactl is world read/writable: described, but no additional gid, none at the spec level
    assert ("    deviceNodes:\n        - path: /dev/nvidiactl\n          hostPath: /dev/nvidiactl\n"
            "          major: 195\n          minor: 255\n          fileMode: 438\n          permissions: rwm\n"
            "    hooks:\n") in out
    assert log[-1] == 'level=info msg="Generated CDI spec with version 0.7.0"'
    spec = read_spec(out)
    assert spec["cdi_version"] == "0.7.0" and spec["devices"] == ["0", UUID, "all"]


def test_feature_flag_drops_the_gids_and_the_version(host):
    out, log = generate(host, "--feature-flag", FLAG)
    assert "additionalGids" not in out and "cdiVersion: 0.5.0\n" in out
    assert "              gid: 44\n" in out                          # the node keeps its group
    assert log[-1] == 'level=info msg="Generated CDI spec with version 0.5.0"'
    for form in (["--feature-flag=%s" % FLAG], ["--feature-flags", FLAG], ["-feature-flag", FLAG]):
        assert generate(host, *form)[0] == out
    assert generate(host, env={"NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS": FLAG})[0] == out


def test_unknown_feature_flag_is_accepted_and_does_nothing(host):
    plain = generate(host)[0]
    out, log = generate(host, "--feature-flag", "no-such-flag")
    assert out == plain and not [l for l in log if "level=warning" in l and "no-such-flag" in l]


def test_comma_list_is_split_from_1_19_not_in_1_18(host):
    assert generate(host, "--feature-flag", "no-such-flag," + FLAG)[0] == generate(host, "--feature-flag", FLAG)[0]
    assert generate(host, "--device-name-strategy", "index,uuid")[0] == generate(host)[0]
    rc, _out, err = run(["cdi", "generate", "--driver-root=%s" % host, "--device-name-strategy", "index,uuid"],
                        version="1.18.0")
    assert rc == 1 and untimed(err)[-1] == 'level=error msg="invalid device name strategy: index,uuid"'


def test_1_19_0_describes_nodes_but_drops_every_gid(host):
    out, log = generate(host, version="1.19.0")
    assert "cdiVersion: 0.5.0\n" in out and "additionalGids" not in out and "              gid: 44\n" in out
    assert log[-1] == 'level=info msg="Generated CDI spec with version 0.5.0"'


def test_1_18_takes_the_option_but_not_the_flag(host):
    plain, log = generate(host, version="1.18.0")
    assert "cdiVersion: 0.5.0\n" in plain and "major:" not in plain and "additionalGids" not in plain
    assert generate(host, "--feature-flag", FLAG, version="1.18.0")[0] == plain
    # 1.18 logged the version before Save set the minimum one: the CDI library's current version
    assert log[-1] == 'level=info msg="Generated CDI spec with version 1.0.0"'


def test_1_17_has_no_feature_flag_option(host):
    rc, out, err = run(["cdi", "generate", "--driver-root=%s" % host, "--feature-flag", FLAG], version="1.17.8")
    assert (rc, out) == (1, "")
    assert untimed(err)[-1] == 'level=error msg="flag provided but not defined: -feature-flag"'
    assert generate(host, version="1.17.8")[1][-1] == 'level=info msg="Generated CDI spec with version 0.8.0"'


def test_world_rw_node_with_a_group_adds_no_gid(tmp_path, state_env):  # noqa: F811
    make_state(state_env)
    root = mock_driver_root(tmp_path / "root")
    char_node(root / "dev" / "nvidia0", 195, 0, 0o666, 44)
    out = generate(root)[0]
    assert "cdiVersion: 0.5.0\n" in out and "additionalGids" not in out and "              gid: 44\n" in out


def test_json_keeps_the_field_order(host):
    spec = json.loads(generate(host, "--format", "json")[0])
    assert spec["cdiVersion"] == "0.7.0"
    assert list(spec["devices"][0]["containerEdits"]) == ["deviceNodes", "additionalGids"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0] == {
        "path": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "major": 195, "fileMode": 432, "permissions": "rwm",
        "gid": 44}
    assert list(spec["containerEdits"])[-1] == "mounts"


def test_cdi_list_reads_a_0_7_0_spec(host, tmp_path):
    out_dir = tmp_path / "etc-cdi"
    rc = run(["cdi", "generate", "--driver-root=%s" % host, "--output=%s" % (out_dir / "nvidia.yaml")])[0]
    assert rc == 0
    rc, out, _err = run(["cdi", "list", "--spec-dir=%s" % out_dir])
    assert out.splitlines() == ["nvidia.com/gpu=0", "nvidia.com/gpu=%s" % UUID, "nvidia.com/gpu=all"]
