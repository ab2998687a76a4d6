"""Work on the simulated GPUs: the load records that make nvidia-smi's readings follow a serving engine.

Test code only, stdlib only (the serving stand-in writes the same records without importing this module).

Why a directory of records and not the state file: a container's nvidia-smi reads the state *copy* the hook
wrote into its rootfs, and a CDI container sees the host's /var/lib/gpu-sim read-only, so a writer in a container
cannot change the state that the host's nvidia-smi reads. Load lives in `<state dir>/load/` (default
/var/lib/gpu-sim/load; $GPUSIM_LOAD_DIR overrides), which the prestart hook binds read-write into every container it
gives GPUs (as it binds the reload record, gpusim/reload.py), at the same path, so the writer in the container and
the readers on the host and in every container see one directory. A boot empties it (no process survives a boot).

A record is one JSON file per writer, `<name>.json`, written atomically (temp file + rename):
  {"writer": "vllm-standin", "gpus": ["GPU-<uuid>", ...], "in_flight": 3, "capacity": 256,
   "busy_since": 1784016750.0, "memory_mib": 72000, "updated": 1784016758.0, "ttl_s": 10}
- `gpus`: UUIDs, not indexes (a container's indexes are re-numbered from 0; UUIDs are the same everywhere);
- `in_flight`: requests the engine is working on now (0: idle, the record may stay for its memory);
- `capacity`: how many it can batch (vLLM's max_num_seqs); in_flight / capacity is how full the batch is;
- `busy_since`: when in_flight last went from 0 to more (temperature rises from then on);
- `memory_mib`: optional, what the writer holds on each of its GPUs while it runs (a vLLM instance holds its
  --gpu-memory-utilization budget from start to stop);
- `updated` + `ttl_s`: a record not refreshed within ttl_s seconds is ignored (its writer died without removing
  it: a container killed with SIGKILL); `ttl_s` null: never expires (`gpusim load start`).

What a reading makes of it (Smi.view, gpusim/dmon.py): while any request is in flight GPU-Util and dmon's `sm`
read 100 % (NVML's utilization is the share of the sample period in which a kernel ran: one running kernel is
100 %, and a serving engine's decode loop always has one), the memory controller's activity (`utilization.memory`,
dmon `mem`) grows with how full the batch is, the power draw rises towards the limit and the temperature climbs
with a time constant. These are the simulator's own curves (there is no measurement behind the numbers); the
real captures only give the direction and the end points (tests/fixtures nvidia_smi/017: sm 100, 631 W of 700 W,
63-65 C on an H100 under load; nvidia_smi_dmon/: 98-100 % sm, 51-58 % mem at the 300 W cap).
"""
import json
import math
import os

LOAD_DIR = "/var/lib/gpu-sim/load"
DEFAULT_TTL_S = 10.0
THERMAL_TAU_S = 20.0          # how fast a busy GPU warms up (simulator's figure)
THERMAL_RISE_C = 35.0         # degrees above its idle temperature at full power (017: ~64 C at 90 % of 700 W)


def load_dir(state_path=None, env=None):
    """$GPUSIM_LOAD_DIR, else `load` next to the state file."""
    env = os.environ if env is None else env
    if env.get("GPUSIM_LOAD_DIR"):
        return env["GPUSIM_LOAD_DIR"]
    path = state_path or env.get("GPUSIM_STATE") or "/var/lib/gpu-sim/state.json"
    return os.path.join(os.path.dirname(os.path.abspath(path)), "load")


def read_records(directory, now):
    """The records that are still valid at `now` (unreadable or half-written files are skipped)."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict):
            continue
        ttl = rec.get("ttl_s", DEFAULT_TTL_S)
        if ttl is not None and now - float(rec.get("updated") or 0) > float(ttl):
            continue
        rec["name"] = name[:-len(".json")]
        out.append(rec)
    return out


def by_gpu(records):
    """{uuid: {"in_flight", "capacity", "busy_since", "memory_mib"}} summed over the records naming that GPU."""
    out = {}
    for rec in records:
        for uuid in rec.get("gpus") or []:
            cur = out.setdefault(uuid, {"in_flight": 0, "capacity": 0, "busy_since": None, "memory_mib": 0})
            n = int(rec.get("in_flight") or 0)
            cur["in_flight"] += n
            cur["capacity"] += int(rec.get("capacity") or 0)
            cur["memory_mib"] += int(rec.get("memory_mib") or 0)
            since = rec.get("busy_since")
            if n and since is not None and (cur["busy_since"] is None or since < cur["busy_since"]):
                cur["busy_since"] = float(since)
    return out


def read(state_path=None, now=0.0):
    return by_gpu(read_records(load_dir(state_path), now))


def fill(info):
    """How full the engine's batch is, 0 < fill <= 1, or None when nothing is in flight."""
    if not info or not info.get("in_flight"):
        return None
    capacity = info.get("capacity") or info["in_flight"]
    return min(1.0, max(info["in_flight"], 1) / float(max(capacity, 1)))


def memory_activity(f):
    """Memory controller busy %: decode reads all the weights every step whatever the batch, and more KV cache as
    the batch fills (the fixture's serving engines: 51-58 %; domain.md section 7's healthy load: ~71 %)."""
    return int(round(35 + 40 * f))


def power_draw(idle_w, limit_w, f):
    """Watts: well above idle as soon as kernels run, towards 95 % of the limit with a full batch."""
    return idle_w + (limit_w - idle_w) * (0.45 + 0.5 * f)


def temperature(base_c, draw_w, idle_w, limit_w, busy_since, now):
    """Idle temperature plus a rise proportional to the power above idle, reached with THERMAL_TAU_S."""
    if limit_w <= idle_w:
        return base_c
    share = max(0.0, min(1.0, (draw_w - idle_w) / (limit_w - idle_w)))
    elapsed = max(0.0, now - busy_since) if busy_since is not None else 0.0
    return int(round(base_c + THERMAL_RISE_C * share * (1.0 - math.exp(-elapsed / THERMAL_TAU_S))))


def write_record(directory, name, record):
    """Atomic write of one record (readers never see half a file)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name + ".json")
    tmp = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def remove_record(directory, name):
    try:
        os.unlink(os.path.join(directory, name + ".json"))
        return True
    except OSError:
        return False


def clear(directory):
    """A boot: every writer is gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.endswith(".json") or name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
