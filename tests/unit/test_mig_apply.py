"""module_utils/gpu/mig_apply.py (the nvidia_mig module and the boot script): driven through the simulated nvidia-smi
(molecule/simulator/gpusim, whose MIG texts are checked against real captures in simulator/test_sim_mig.py), so each
test runs the real command sequence against a GPU that refuses, pends and numbers instances as the captures show.
Expected profile lists and instance ids come from the real H100 captures (tests/fixtures/mig/), not from this code."""
import io
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "module_utils"))
sys.path.insert(0, os.path.join(HERE, "simulator"))

from gpu import mig_apply  # noqa: E402
from gpu import mig_parse  # noqa: E402
from simhelpers import BIN, edit, make_state, run_smi  # noqa: E402
from gpusim import ctl, mig as simmig, state as simstate  # noqa: E402

MIGFX = os.path.join(ROOT, "tests", "fixtures", "mig")


def fixture(name):
    for f in sorted(os.listdir(MIGFX)):
        if f.startswith(name):
            with open(os.path.join(MIGFX, f), encoding="utf-8") as fh:
                return fh.read()
    raise FileNotFoundError(name)


class Sim(object):
    """A simulated host: run(argv) as the module's run_command, and a log of the commands that ran."""

    def __init__(self, tmp_path, *models, **extra):
        self.path = tmp_path / "state.json"
        make_state(self.path, models=models or ("h100",), **extra)
        self.log = []

    def run(self, argv):
        assert argv[0] == "nvidia-smi"
        self.log.append(" ".join(argv))
        out, rc = run_smi(self.path, *argv[1:])
        return rc, out, ""

    def smi(self, *argv):
        return run_smi(self.path, *argv)

    def changes(self):
        """The commands that ran and change something (everything but reads)."""
        reads = ("-q -x", "-lgip", "-lgipp", "-lgi", "-lci")
        return [c for c in self.log if not c.endswith(reads)]

    def snapshot(self):
        with open(str(self.path)) as fh:
            return fh.read()

    def gis(self, gpu=0):
        out, rc = self.smi("mig", "-i", str(gpu), "-lgi")
        return [] if rc == 6 else mig_parse.parse_lgi(out)


TWO = {"0": ["3g.40gb", "3g.40gb"]}


def test_two_slices_on_a_fresh_h100_then_nothing_to_do(tmp_path):
    sim = Sim(tmp_path)
    result = mig_apply.apply(TWO, sim.run)
    assert result["changed"]
    assert sim.changes() == ["nvidia-smi -i 0 -mig 1", "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C"]
    gis = sim.gis()
    # H100 3g.40gb is profile 9 (the real -lgip), halves at 0:4 and 4:4 (the real -lgipp)
    assert sorted((g["name"], g["profile_id"], g["placement_start"], g["placement_size"]) for g in gis) == \
        [("3g.40gb", 9, 0, 4), ("3g.40gb", 9, 4, 4)]
    out, _ = sim.smi("-L")
    assert out.count("MIG 3g.40gb") == 2
    assert result["before"] == {0: "MIG disabled"} and result["after"] == {0: "MIG enabled: 3g.40gb, 3g.40gb"}
    sim.log = []
    again = mig_apply.apply(TWO, sim.run)
    assert not again["changed"] and again["commands"] == [] and sim.changes() == []


def test_check_mode_changes_nothing_and_says_what_would_run(tmp_path):
    sim = Sim(tmp_path)
    before = sim.snapshot()
    result = mig_apply.apply(TWO, sim.run, check_mode=True)
    assert result["changed"] and result["commands"] == ["nvidia-smi -i 0 -mig 1"]
    assert sim.snapshot() == before and sim.changes() == []
    # with MIG on already, check mode names the instance commands too
    sim.smi("-mig", "1")
    result = mig_apply.apply(TWO, sim.run, check_mode=True)
    assert result["commands"] == ["nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C"]
    assert sim.gis() == []


def test_a_profile_the_gpu_does_not_offer_is_refused_listing_its_profiles(tmp_path):
    sim = Sim(tmp_path)
    sim.smi("-mig", "1")
    before = sim.snapshot()
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"0": ["3g.20gb"]}, sim.run)   # an A100-40GB name
    # the real H100 -lgip's profiles, each named
    offered = [p["name"] for p in mig_parse.parse_lgip(fixture("lgip_H100-80GB-HBM3_all-free"))]
    assert offered and "7g.80gb" in offered
    for name in offered:
        assert name in err.value.msg
    assert "3g.20gb" in err.value.msg and "nvidia_mig_layout[0]" in err.value.msg
    assert sim.snapshot() == before and not err.value.changed


def test_a_layout_beyond_the_slices_is_refused_before_any_change(tmp_path):
    sim = Sim(tmp_path)
    mig_apply.apply({"0": ["1g.10gb"]}, sim.run)
    before = sim.snapshot()
    sim.log = []
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"0": ["4g.40gb", "3g.40gb", "1g.10gb"]}, sim.run)   # 8 compute slices of 7
    assert "compute slices" in err.value.msg
    assert sim.snapshot() == before and sim.changes() == []


def test_mig_mode_turned_on_to_read_the_profiles_is_turned_off_again(tmp_path):
    sim = Sim(tmp_path)
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"0": ["2g.48gb"]}, sim.run)
    assert "turned off again" in err.value.msg
    out, _ = sim.smi("--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert out.strip() == "Disabled, Disabled"


def test_a_gpu_with_processes_is_not_changed_without_allow_disruption(tmp_path):
    sim = Sim(tmp_path)
    mig_apply.apply({"0": ["3g.40gb"]}, sim.run)
    gi = sim.gis()[0]["instance_id"]
    edit(sim.path, lambda s: s["processes"].append(
        {"pid": 4242, "name": "python3", "gpu_index": 0, "used_mib": 1000, "type": "C", "gi_id": gi, "ci_id": 0}))
    before = sim.snapshot()
    sim.log = []
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply(TWO, sim.run)
    assert "4242" in err.value.msg and "nvidia_mig_allow_disruption" in err.value.msg
    assert sim.snapshot() == before and sim.changes() == []
    # a layout already in place is no change, processes or not
    assert not mig_apply.apply({"0": ["3g.40gb"]}, sim.run)["changed"]
    # allowed: the kept instance stays (the process keeps its MIG device), the second is created
    result = mig_apply.apply(TWO, sim.run, allow_disruption=True)
    assert result["changed"] and [g["instance_id"] for g in sim.gis()].count(gi) == 1 and len(sim.gis()) == 2


def test_changing_a_layout_destroys_only_what_differs(tmp_path):
    sim = Sim(tmp_path)
    mig_apply.apply({"0": ["3g.40gb", "1g.10gb", "1g.10gb"]}, sim.run)
    kept = [g["instance_id"] for g in sim.gis() if g["name"] == "3g.40gb"]
    sim.log = []
    mig_apply.apply({"0": ["3g.40gb", "2g.20gb"]}, sim.run)
    names = sorted(g["name"] for g in sim.gis())
    assert names == ["2g.20gb", "3g.40gb"]
    assert [g["instance_id"] for g in sim.gis() if g["name"] == "3g.40gb"] == kept
    assert not any("-dgi -gi %d" % kept[0] in c for c in sim.changes())


def test_disabled_destroys_the_instances_and_turns_mig_off(tmp_path):
    sim = Sim(tmp_path, "h100", "h100")
    mig_apply.apply({"0": ["3g.40gb", "3g.40gb"], "1": ["7g.80gb"]}, sim.run)
    result = mig_apply.apply({"1": "disabled"}, sim.run)
    assert result["changed"] and result["after"] == {1: "MIG disabled"}
    out, _ = sim.smi("--query-gpu=index,mig.mode.current", "--format=csv,noheader")
    assert out.split("\n")[:2] == ["0, Enabled", "1, Disabled"]
    assert len(sim.gis(0)) == 2     # GPU 0 was not named: left alone
    assert not mig_apply.apply({"1": "disabled"}, sim.run)["changed"]


def test_ampere_pending_without_a_possible_reset_says_reset_or_reboot(tmp_path):
    sim = Sim(tmp_path, "a100-80gb")
    edit(sim.path, lambda s: s["gpus"][0].update(persistence_mode=True))   # persistence holds an A100
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"0": ["3g.40gb", "3g.40gb"]}, sim.run)
    assert "pending" in err.value.msg and "reboot" in err.value.msg and err.value.changed
    # the reboot: Ampere's pending mode takes effect (InfoROM), the instances are created then
    edit(sim.path, simmig.reset_at_boot)
    assert mig_apply.apply({"0": ["3g.40gb", "3g.40gb"]}, sim.run)["changed"]
    assert sorted(g["name"] for g in sim.gis()) == ["3g.40gb", "3g.40gb"]


def test_ampere_pending_then_reset_when_nothing_holds_the_gpu(tmp_path):
    sim = Sim(tmp_path, "a100-80gb")
    result = mig_apply.apply({"0": ["3g.40gb"]}, sim.run)
    assert result["changed"] and [g["name"] for g in sim.gis()] == ["3g.40gb"]


@pytest.mark.parametrize("layout, words", [
    ({"zero": ["3g.40gb"]}, "not a GPU index"),
    ({"0": "3g.40gb"}, "list of MIG profile names"),
    ({"0": ["3g"]}, "not a MIG profile name"),
    (["3g.40gb"], "mapping"),
])
def test_malformed_layouts(layout, words):
    with pytest.raises(mig_apply.LayoutError) as err:
        mig_apply.normalise_layout(layout)
    assert words in err.value.msg and "nvidia_mig" in err.value.msg


def test_layout_names_are_normalised():
    assert mig_apply.normalise_layout({0: ["MIG 3G.40GB"], "1": "Disabled"}) == {0: ["3g.40gb"], 1: "disabled"}
    assert mig_apply.normalise_layout({}) == {} and mig_apply.normalise_layout(None) == {}


def test_a_gpu_that_is_not_there_or_has_no_mig(tmp_path):
    sim = Sim(tmp_path, "h100", "l4")
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"3": ["3g.40gb"]}, sim.run)
    assert "GPU 3" in err.value.msg and "0, 1" in err.value.msg
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"1": ["1g.10gb"]}, sim.run)
    assert "does not support MIG" in err.value.msg


def test_boot_restores_the_layout(tmp_path):
    """A reboot drops the instances and, on Hopper, MIG mode (research §3, §6); the boot script brings both back."""
    sim = Sim(tmp_path)
    mig_apply.apply(TWO, sim.run)
    uuids = sorted(line.split("UUID: ")[1] for line in sim.smi("-L")[0].splitlines() if "MIG " in line)
    edit(sim.path, simmig.reset_at_boot)
    assert sim.gis() == []
    layout = tmp_path / "mig-layout.json"
    layout.write_text(json.dumps({"layout": TWO, "allow_disruption": False, "reset": True}))
    out = io.StringIO()
    assert mig_apply.main([str(layout)], run=sim.run, out=out) == 0
    assert "MIG disabled -> MIG enabled: 3g.40gb, 3g.40gb" in out.getvalue()
    # the same GIs in the same places: the MIG UUIDs (CDI names them) are the ones from before the reboot
    assert sorted(line.split("UUID: ")[1] for line in sim.smi("-L")[0].splitlines() if "MIG " in line) == uuids
    out = io.StringIO()
    assert mig_apply.main([str(layout)], run=sim.run, out=out) == 0 and "(unchanged)" in out.getvalue()


def _role_copies(task_name):
    """The loop of the nvidia_mig role's task of that name."""
    import yaml

    def tasks(node):
        for task in node if isinstance(node, list) else []:
            yield task
            yield from tasks(task.get("block"))
    with open(os.path.join(ROOT, "roles", "nvidia_mig", "tasks", "main.yml"), encoding="utf-8") as handle:
        return next(t["loop"] for t in tasks(yaml.safe_load(handle)) if t.get("name") == task_name)


def test_boot_script_file_runs_with_the_copied_modules(tmp_path):
    """roles/nvidia_mig/files/gpuhost-mig-apply as the unit runs it: python3, GPUHOST_MIG_LIB, nvidia-smi on PATH."""
    state = tmp_path / "state.json"
    make_state(state, models=("h100",))
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in _role_copies("Copy the layout logic for the boot script"):   # what the role copies, as it lays them
        (lib / name).parent.mkdir(exist_ok=True)
        (lib / name).write_text(open(os.path.join(ROOT, "module_utils", name)).read())
    (lib / "module_utils_path.py").write_text(open(os.path.join(ROOT, "bin", "gpuhost_cli", "module_utils_path.py")).read())
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"layout": {"0": ["2g.20gb", "2g.20gb", "2g.20gb"]}}))
    env = dict(os.environ, GPUSIM_STATE=str(state), GPUHOST_MIG_LIB=str(lib),
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH="")
    script = os.path.join(ROOT, "roles", "nvidia_mig", "files", "gpuhost-mig-apply")
    proc = subprocess.run([sys.executable, "-S", script, str(layout)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert [g["name"] for g in mig_parse.parse_lgi(run_smi(state, "mig", "-lgi")[0])] == ["2g.20gb"] * 3
    layout.write_text(json.dumps({"layout": {"0": ["9g.99gb"]}}))
    proc = subprocess.run([sys.executable, "-S", script, str(layout)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, cwd=str(tmp_path))
    assert proc.returncode == 1 and "does not offer MIG profile 9g.99gb" in proc.stdout


def test_diff_text_one_line_per_gpu():
    text = mig_apply.diff_text({"before": {0: "MIG disabled"}, "after": {0: "MIG enabled: 3g.40gb"}})
    assert text == {"before": "GPU 0: MIG disabled\n", "after": "GPU 0: MIG enabled: 3g.40gb\n"}


def test_state_module_is_the_simulators():
    # guard: the tests drive the simulator, not a stub
    assert hasattr(ctl, "init_state") and hasattr(simstate, "load")


class DcgmHost(Sim):
    """The simulated host with DCGM's host engine running as nvidia-dcgm.service (it has every GPU open, so a MIG
    mode change stays pending: gpusim/mig.py), and systemctl for that unit."""

    UNIT = "nvidia-dcgm.service"

    def __init__(self, tmp_path, *models):
        Sim.__init__(self, tmp_path, *models)
        self.start()

    def start(self):
        edit(self.path, lambda s: s.update(hostengine={"pid": os.getpid(), "version": "4.5.2", "daemon": True,
                                                       "gpus": [g["uuid"] for g in s["gpus"]]}))

    def run(self, argv):
        if argv[0] != "systemctl":
            return Sim.run(self, argv)
        self.log.append(" ".join(argv))
        verb, unit = argv[1], argv[2]
        active = unit == self.UNIT and bool((simstate_load(self.path).get("hostengine") or {}).get("gpus"))
        if verb == "is-active":
            return (0, "active\n", "") if active else (3, "inactive\n", "")
        if verb == "stop" and unit == self.UNIT:
            edit(self.path, lambda s: s.update(hostengine={"pid": None, "gpus": []}))
        if verb == "start" and unit == self.UNIT:
            self.start()
        return 0, "", ""


def simstate_load(path):
    with open(str(path)) as fh:
        return json.load(fh)


def test_dcgm_is_stopped_around_a_mig_mode_change_and_started_again(tmp_path):
    host = DcgmHost(tmp_path)
    # Without the clients list the host engine keeps the H100 open: the mode stays pending and the reset fails.
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply(TWO, host.run)
    assert "pending" in err.value.msg
    host.smi("-mig", "0")
    host.log = []
    result = mig_apply.apply(TWO, host.run, clients=mig_apply.CLIENTS)
    assert result["changed"] and result["clients_stopped"] == ["nvidia-dcgm.service"]
    changes = [c for c in host.changes() if not c.startswith("systemctl is-active")]
    assert changes == ["systemctl stop nvidia-dcgm.service", "nvidia-smi -i 0 -mig 1",
                       "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C", "systemctl start nvidia-dcgm.service"]
    assert sorted(g["name"] for g in host.gis()) == ["3g.40gb", "3g.40gb"]
    assert simstate_load(host.path)["hostengine"]["gpus"], "the host engine runs again"


def test_instance_changes_and_check_mode_stop_no_client(tmp_path):
    host = DcgmHost(tmp_path)
    host.run(["systemctl", "stop", DcgmHost.UNIT])
    host.smi("-mig", "1")
    host.start()
    host.log = []
    result = mig_apply.apply(TWO, host.run, clients=mig_apply.CLIENTS)
    assert result["changed"] and result["clients_stopped"] == []
    assert not [c for c in host.log if c.startswith("systemctl")]
    host.log = []
    result = mig_apply.apply({"0": "disabled"}, host.run, check_mode=True, clients=mig_apply.CLIENTS)
    assert result["changed"] and result["clients_stopped"] == []
    assert not [c for c in host.log if c.startswith("systemctl")]


def test_clients_are_started_again_when_the_change_fails(tmp_path):
    host = DcgmHost(tmp_path, "a100-80gb")
    edit(host.path, lambda s: s["gpus"][0].update(persistence_mode=True))   # persistence holds an A100 as well
    with pytest.raises(mig_apply.MigError) as err:
        mig_apply.apply({"0": ["3g.40gb"]}, host.run, clients=mig_apply.CLIENTS)
    assert "pending" in err.value.msg
    assert host.log[-1] == "systemctl start nvidia-dcgm.service"
    assert simstate_load(host.path)["hostengine"]["gpus"]
