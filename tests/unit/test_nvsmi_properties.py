"""Property tests: no input makes a parser fail with anything but its declared error."""
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from gpu import host_parse
from gpu import nvsmi_parse as n
from gpu.nvsmi_common import ParseError
from gpu.nvsmi_csv import parse_compute_apps_csv, parse_query_gpu_csv
from gpu.nvsmi_dmon import parse_dmon, parse_pmon
from gpu.nvsmi_error import parse_error
from gpu.nvsmi_list import parse_list, parse_version
from gpu.nvsmi_q import parse_q
from gpu.nvsmi_table import parse_table
from gpu.nvsmi_xml import parse_xml
from conftest import FIXTURES
from gpuhost_cli import smi as smi_cli

SMI = os.path.join(FIXTURES, "nvidia_smi")
HOST = os.path.join(FIXTURES, "host")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _texts(directory):
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".md"):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            out.append(handle.read())
    return out


SMI_TEXTS = _texts(SMI)
HOST_TEXTS = _texts(HOST)
def _partial(parse):
    def read(text):
        return parse(text, partial=True)
    return read


SMI_PARSERS = (n.facts_from_output, parse_xml, parse_q, parse_table, parse_query_gpu_csv,
               parse_compute_apps_csv, parse_list, parse_version, parse_error, parse_dmon, parse_pmon) + \
    tuple(_partial(p) for p in (n.facts_from_output, parse_xml, parse_q, parse_table, parse_query_gpu_csv,
                                parse_compute_apps_csv)) + \
    (smi_cli.answer,)  # `gpuhost smi`'s one door: every reader it tries, and its refusal
HOST_PARSERS = (host_parse.parse_proc_version, host_parse.parse_lspci,
                host_parse.parse_ubuntu_drivers_devices)


def _only_declared_errors(parsers, error, text):
    for parse in parsers:
        try:
            parse(text)
        except error:
            pass


# Characters nvidia-smi output is made of, so random text reaches deep into the parsers.
SMI_ALPHABET = st.sampled_from(list("|+-=: \n\t0123456789.%/ABCDEFGHIMNOPSTUWabcdefimnorstuxCGPUMiBW[]()<>?\"'_,#"))
SMI_WORDS = st.sampled_from([
    "NVIDIA-SMI ", "Driver Version: ", "CUDA Version: ", "KMD Version: ", "| ", " |", "+----+",
    "|====|", "Processes:", "MIG devices:", "GPU ", "00000000:01:00.0", "MiB", " / ", "Off", "On",
    "N/A", "Default", "\n", "  ", "==============NVSMI LOG==============", "Attached GPUs : 1",
    "GPU 00000000:01:00.0", "    Product Name : X", "    FB Memory Usage", "        Total : 10 MiB",
    "    Processes", "        Process ID : 12", "index, name, uuid", "pid, process_name, used_memory",
    "GPU 0: X (UUID: GPU-1)", "NVIDIA-SMI version : 1", "No devices were found", "# gpu pwr",
])


@SETTINGS
@given(st.text(max_size=400))
def test_random_text(text):
    _only_declared_errors(SMI_PARSERS, ParseError, text)
    _only_declared_errors(HOST_PARSERS, host_parse.HostParseError, text)


@SETTINGS
@given(st.lists(st.one_of(SMI_WORDS, st.text(SMI_ALPHABET, max_size=12)), max_size=80).map("".join))
def test_nvidia_smi_shaped_text(text):
    _only_declared_errors(SMI_PARSERS, ParseError, text)


XML_TAGS = st.sampled_from(["nvidia_smi_log", "gpu", "fb_memory_usage", "total", "used", "pci",
                            "pci_device_id", "processes", "process_info", "pid", "used_memory",
                            "mig_devices", "mig_device", "clocks_event_reasons", "attached_gpus"])


@st.composite
def xmlish(draw, depth=0):
    tag = draw(XML_TAGS)
    if depth > 3 or draw(st.booleans()):
        body = draw(st.text(st.sampled_from(list("0123456789 MiB.N/A&<>x")), max_size=10))
    else:
        body = "".join(draw(st.lists(xmlish(depth + 1), max_size=3)))
    return "<%s>%s</%s>" % (tag, body, tag)


@SETTINGS
@given(xmlish(), st.booleans())
def test_random_xmlish(doc, declaration):
    text = ('<?xml version="1.0" ?>\n' if declaration else "") + doc
    _only_declared_errors(SMI_PARSERS, ParseError, text)


@SETTINGS
@given(st.sampled_from(range(len(SMI_TEXTS))), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_truncated_and_sliced_real_files(which, start, end):
    text = SMI_TEXTS[which]
    lo, hi = sorted((int(start * len(text)), int(end * len(text))))
    _only_declared_errors(SMI_PARSERS, ParseError, text[:hi])
    _only_declared_errors(SMI_PARSERS, ParseError, text[lo:hi])


@SETTINGS
@given(st.sampled_from(range(len(HOST_TEXTS))), st.floats(0.0, 1.0))
def test_truncated_host_files(which, end):
    text = HOST_TEXTS[which]
    _only_declared_errors(HOST_PARSERS, host_parse.HostParseError, text[:int(end * len(text))])


@SETTINGS
@given(st.sampled_from(range(len(SMI_TEXTS))), st.integers(0, 10 ** 6), st.text(max_size=3))
def test_real_files_with_a_corrupted_character(which, position, replacement):
    text = SMI_TEXTS[which]
    if not text:
        return
    at = position % len(text)
    _only_declared_errors(SMI_PARSERS, ParseError, text[:at] + replacement + text[at + 1:])


def test_deep_indentation_does_not_overflow():
    text = "\n".join(" " * i + "Key%d" % i for i in range(1500))  # deeper than the recursion limit
    _only_declared_errors(SMI_PARSERS, ParseError, text)
