"""`nvidia-smi dmon`: device monitoring, one line per GPU per sample (test code, stdlib only).

Rendered from the real captures (tests/fixtures): nvidia_smi/006 and 017 (590.48.01, `dmon -c 5`, default `puc`),
nvidia_smi_dmon/ `-c 1 -s pucm` (595.91.07) and `--select=pucvmet --options=DT`; nvidia_smi/037 (an old driver's
`-s pucvmet`) for what the `v`, `m`, `e`, `t` groups are. The layout all of them share:
- two header lines, `#` then the column names, `#` then the units; every data line starts with a space where the
  header has `#`;
- `-o D` / `-o T` put a date (`%Y%m%d`, header `Date` / `YYYYMMDD`) and a time (`%H:%M:%S`, `Time` / `HH:MM:SS`)
  column first, each left-aligned in 12 characters (the DT capture: `#Date        Time         gpu`);
- then the GPU index right-aligned in 3 characters and every metric right-aligned in 6, each after one space
  (`# gpu    pwr  gtemp`), and a last space that 006, 017 and the 595.91.07 capture end every line with (the DT paste
  has none: its author's editor or terminal dropped it);
- unsupported values print `-` (mtemp on GDDR boards, sbecc/dbecc without ECC; sm..ofa of a MIG-enabled GPU, 006);
- the groups come in the order p u c v m e t whatever order `-s` names them (every capture names them in that order:
  the output order of another `-s` order is NOT FOUND, so it is assumed).
Columns per group (the DT capture and the 595.91.07 one): p `pwr gtemp mtemp` (W C C), u `sm mem enc dec jpg ofa`
(%), c `mclk pclk` (MHz), v `pviol tviol` (% bool), m `fb bar1 ccpm` (MB), e `sbecc dbecc pci` (errs), t `rxpci txpci`
(MB/s). The header is printed once; a sample is taken at once and then every `-d` seconds, `-c` times (forever
without -c, until interrupted).

Values: the same view nvidia-smi's other forms print (smi.Smi.view), taken afresh from the state and the load
records (gpusim/load.py) at every sample, so they follow a serving engine's work: `sm` is GPU-Util (both are NVML's
utilization rate, the share of time a kernel ran: the 595.91.07 host's query showed 99/99/100/100 % where its dmon
showed 98/99/100/100), `mem` the memory controller's activity (utilization.memory), `fb` the used memory (MiB, what
that host's memory.used said), `bar1` -q's BAR1 used, `pclk` the graphics clock (lowered by a clocks event),
`pviol` 100 while a power reason holds the clocks (SW Power Cap, HW Power Brake), `tviol` 1 while a thermal one does.
Not reproduced: sampling noise, PCIe traffic (rxpci/txpci 0), ECC and replay counters (0), `ccpm` (0), `-f`, `--format
csv`, `--gpm-metrics`; the error text of a bad dmon option (none captured: nvidia-smi's general invalid-combination
text and exit 2, as for any other invalid option).
"""
import time

from .cliargs import Options

GROUPS = (
    ("p", (("pwr", "W"), ("gtemp", "C"), ("mtemp", "C"))),
    ("u", (("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%"))),
    ("c", (("mclk", "MHz"), ("pclk", "MHz"))),
    ("v", (("pviol", "%"), ("tviol", "bool"))),
    ("m", (("fb", "MB"), ("bar1", "MB"), ("ccpm", "MB"))),
    ("e", (("sbecc", "errs"), ("dbecc", "errs"), ("pci", "errs"))),
    ("t", (("rxpci", "MB/s"), ("txpci", "MB/s"))),
)
LETTERS = "".join(g for g, _ in GROUPS)
DEFAULT_SELECT = "puc"
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")


class Args(object):
    def __init__(self):
        self.select = DEFAULT_SELECT
        self.delay = 1
        self.count = None
        self.ids = None
        self.date = False
        self.time = False


def parse_args(argv):
    """`dmon`'s own options; ValueError for anything else (nvidia-smi then prints its invalid-combination text)."""
    a = Args()
    opts = Options(argv)
    value = opts.value
    for name in opts:
        if name in ("-s", "--select"):
            letters = value().replace(",", "").strip()
            if not letters or any(c not in LETTERS for c in letters):
                raise ValueError(name)
            a.select = letters
        elif name in ("-d", "--delay"):
            a.delay = _positive(value(), name)
        elif name in ("-c", "--count"):
            a.count = _positive(value(), name)
        elif name in ("-i", "--id"):
            a.ids = [s.strip() for s in value().split(",") if s.strip()]
        elif name in ("-o", "--options"):
            letters = value().replace(",", "").strip().upper()
            if not letters or any(c not in "DT" for c in letters):
                raise ValueError(name)
            a.date, a.time = "D" in letters, "T" in letters
        else:
            raise ValueError(opts.arg)
    return a


def _positive(text, name):
    try:
        n = int(text)
    except ValueError:
        raise ValueError(name)
    if n < 1:
        raise ValueError(name)
    return n


def columns(args):
    return [c for g, cols in GROUPS if g in args.select for c in cols]


def _line(marker, args, date, clock, gpu, values):
    text = marker
    if args.date:
        text += "%-12s" % date
    if args.time:
        text += "%-12s" % clock
    return text + " %3s" % gpu + "".join(" %6s" % v for v in values) + " "


def header(args):
    cols = columns(args)
    return [_line("#", args, "Date", "Time", "gpu", [n for n, _u in cols]),
            _line("#", args, "YYYYMMDD", "HH:MM:SS", "Idx", [u for _n, u in cols])]


def values(v, cols):
    """One GPU's readings (a view from smi.Smi.view) for the selected columns."""
    mig = v["mig"]
    reasons = v["reasons"]
    bar1_used = min(v["used"] + 1, v["bar1_total"])   # -q's BAR1 Used
    table = {
        "pwr": int(round(v["power_draw"])), "gtemp": v["temp"],
        "mtemp": v["temp"] + 4 if v["memory_temp"] else "-",
        "sm": "-" if mig else v["util_gpu"], "mem": "-" if mig else v["util_memory"],
        "enc": "-" if mig else 0, "dec": "-" if mig else 0, "jpg": "-" if mig else 0, "ofa": "-" if mig else 0,
        "mclk": v["clocks"][2], "pclk": v["clocks"][0],
        "pviol": 100 if any(r in reasons for r in POWER_REASONS) else 0,
        "tviol": 1 if any(r in reasons for r in THERMAL_REASONS) else 0,
        "fb": v["used"], "bar1": bar1_used, "ccpm": 0,
        "sbecc": 0 if v["ecc"] else "-", "dbecc": 0 if v["ecc"] else "-", "pci": 0,
        "rxpci": 0, "txpci": 0,
    }
    return [table[name] for name, _unit in cols]


def rows(args, views, now):
    t = time.localtime(now)
    date, clock = time.strftime("%Y%m%d", t), time.strftime("%H:%M:%S", t)
    cols = columns(args)
    return [_line(" ", args, date, clock, v["index"], values(v, cols)) for v in views]


def run(args, sample, write, clock, sleep):
    """Print the header, then `args.count` samples (forever without -c). sample(now) -> the views to print, or
    None when the GPUs are gone (the loop ends). Returns the exit status."""
    for line in header(args):
        write(line + "\n")
    n = 0
    try:
        while args.count is None or n < args.count:
            if n:
                sleep(args.delay)
            views = sample(clock())
            if views is None:
                break
            for line in rows(args, views, clock()):
                write(line + "\n")
            n += 1
    except KeyboardInterrupt:   # Ctrl-C ends the monitor (the DT capture was stopped so)
        pass
    return 0
