"""Every nvidia-smi corpus file, with values read off the file by eye (not from the parser).

Fixtures are copies of /work/shared/corpus/nvidia_smi/ in tests/fixtures/nvidia_smi/ (same
names, unedited). Keys of a GPU expectation: name, mem (used, total), persistence, and any other
normalised GPU key. Processes: (gpu_index, pid, name, used_mib) tuples, in file order.
"""
import os

import pytest

from gpu import nvsmi_parse as n
from gpu.nvsmi_common import ParseError, UnsupportedForm
from conftest import CORPUS, FIXTURES

SMI_FIXTURES = os.path.join(FIXTURES, "nvidia_smi")
H100 = "NVIDIA H100 80GB HBM3"
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"

EXPECTED = {
    "001_table_570.133.20_2xH100_no-processes.txt": dict(
        form="table", driver="570.133.20", cuda="12.8",
        gpus=[dict(index=0, name=H100, mem=(0, 81559), persistence=False, pci_bus_id="00000000:AB:00.0",
                   mig_mode=False, power_draw_w=73.0, power_limit_w=700.0, temperature_c=33),
              dict(index=1, name=H100, mem=(0, 81559), persistence=False, pci_bus_id="00000000:BA:00.0")],
        processes=[]),
    "002_table_590.48.01_H100-MIG_load_processes.txt": dict(
        form="table", driver="590.48.01", cuda="13.1",
        gpus=[dict(name=H100, mem=(11125, 81559), persistence=True, mig_mode=True, utilization_gpu=None,
                   mig_gi=[2, 3, 9, 10])],
        processes=[(0, 21180, "/root/tools/memhog", 2296), (0, 21181, "/root/tools/memhog", 1272),
                   (0, 21198, "./gpu_burn", 7484)]),
    "003_q_590.48.01_H100-MIG_load.txt": dict(
        form="q", driver="590.48.01", cuda="13.1",
        gpus=[dict(name=H100, mem=(11125, 81559), persistence=True, mig_mode=True, uuid=MASKED_UUID,
                   pci_device_id="0x2330", memory_free_mib=69956, memory_reserved_mib=479,
                   utilization_gpu=None, power_draw_w=432.21, power_limit_w=700.0, temperature_c=53,
                   clocks_event_reasons_active=[], mig_gi=[2, 3, 9, 10])],
        processes=[(0, 21180, "/root/tools/memhog", 2296), (0, 21181, "/root/tools/memhog", 1272),
                   (0, 21198, "./gpu_burn", 7484)]),
    "004_query-gpu_590.48.01_H100-MIG_many-fields.csv": dict(
        form="csv_query_gpu", driver="590.48.01", cuda=None,
        gpus=[dict(index=0, name=H100, mem=(11125, 81559), persistence=True, mig_mode=True,
                   memory_free_mib=69956, memory_reserved_mib=479, pci_device_id="0x2330",
                   compute_capability="9.0", utilization_gpu=None, power_draw_w=433.78,
                   power_limit_w=700.0, temperature_c=53, performance_state="P0",
                   clocks_event_reasons_active=[])],
        processes=[]),
    "005_query-compute-apps_590.48.01_H100-MIG.csv": dict(
        form="csv_compute_apps", gpus=[],
        processes=[(None, 21180, "/root/tools/memhog", 2296), (None, 21181, "/root/tools/memhog", 1272),
                   (None, 21198, "./gpu_burn", 7484)],
        process_bus="00000000:00:09.0"),
    # dmon/pmon: a time series by GPU index; the last sample is reported. Under MIG sm and mem are "-".
    "006_dmon_590.48.01_H100-MIG_load.txt": dict(
        form="dmon", driver=None, samples=5,
        gpus=[dict(index=0, name=None, mem=(None, None), power_draw_w=439.0, temperature_c=56,
                   utilization_gpu=None, utilization_memory=None)],
        processes=[], warning="5 sample(s) per GPU"),
    # five samples of the same three processes; pmon prints no memory without -s m
    "007_pmon_590.48.01_H100-MIG_load.txt": dict(
        form="pmon", samples=5, gpus=[dict(index=0, name=None)],
        processes=[(0, 21180, "memhog", None), (0, 21181, "memhog", None), (0, 21198, "gpu_burn", None)],
        process_types=["C", "C", "C"]),
    "010_table_590.48.01_H200-MIG_load.txt": dict(
        form="table", driver="590.48.01", cuda="13.1",
        gpus=[dict(name="NVIDIA H200", mem=(16959, 143771), persistence=True, mig_mode=True,
                   mig_gi=[2, 2, 3, 9, 10], architecture="Hopper", compute_capability="9.0")],
        processes=[(0, 12249, "/root/tools/memhog", 2194), (0, 12250, "/root/tools/memhog", 1170),
                   (0, 12267, "./gpu_burn", 13526)]),
    "011_table_595.80_L40S_load.txt": dict(
        form="table", driver="595.80", cuda="13.2",
        gpus=[dict(name="NVIDIA L40S", mem=(1235, 46068), persistence=False, mig_mode=None,
                   utilization_gpu=9, architecture="Ada Lovelace", compute_capability="8.9")],
        processes=[(0, 20037, "ffmpeg", 538), (0, 20038, "ffmpeg", 681)]),
    "013_table_595.71.05_RTX4080S_load_desktop-processes.txt": dict(
        form="table", driver="595.71.05", cuda="13.2",
        gpus=[dict(name="NVIDIA GeForce RTX 4080 ...", mem=(1474, 16376), persistence=False,
                   fan_speed_pct=0)],
        processes=[(0, 2165, "/usr/bin/kwin_wayland", 25), (0, 2496, "/usr/bin/plasma-keyboard", 200),
                   (0, 2620, "/usr/bin/Xwayland", 4), (0, 2954, "/usr/bin/plasmashell", 120),
                   (0, 3527, "/usr/bin/xwaylandvideobridge", 3), (0, 5021, "ffmpeg", 360),
                   (0, 5022, "ffmpeg", 503)],
        process_types=["C+G", "G", "G", "G", "G", "C", "C"]),
    # Windows forms are parsed (not refused): no persistence, WDDM driver model, no per-process memory.
    "015_table_610.62_RTX2080S_windows-wddm_load.txt": dict(
        form="table", driver="610.62", cuda="13.3",
        gpus=[dict(name="NVIDIA GeForce RTX 2080 ...", mem=(1366, 8192), persistence=None,
                   driver_model="WDDM", fan_speed_pct=38)],
        process_count=21, first_process=(0, 2140, "C:\\Windows\\System32\\dwm.exe", None),
        warning="WDDM"),
    "016_q_610.62_RTX2080S_windows_idle.txt": dict(
        form="q", driver="610.62", cuda="13.3",
        gpus=[dict(name="NVIDIA GeForce RTX 2080 SUPER", mem=(797, 8192), persistence=None,
                   driver_model="WDDM", pci_device_id="0x1e81", power_limit_w=250.0,
                   clocks_event_reasons_active=["gpu_idle"])],
        process_count=19, first_process=(0, 2140, "C:\\Windows\\System32\\dwm.exe", None),
        warning="WDDM"),
    "017_dmon_590.48.01_H100_load.txt": dict(
        form="dmon", samples=5,
        gpus=[dict(index=0, power_draw_w=636.0, temperature_c=65, utilization_gpu=100, utilization_memory=9)],
        processes=[]),
    "018_table_590.48.01_H100_idle_no-processes.txt": dict(
        form="table", driver="590.48.01", cuda="13.1",
        gpus=[dict(name=H100, mem=(0, 81559), persistence=True, mig_mode=False)], processes=[]),
    "019_qx_A100-SXM4-MIG.xml": dict(
        form="xml", schema="v11", driver="510.47.03", cuda="11.6",
        gpus=[dict(name="NVIDIA A100-SXM4-40GB", mem=(38, 40960), persistence=False, mig_mode=True,
                   uuid="GPU-27b94a00-ed54-5c24-b1fd-1054085de32a", pci_device_id="0x20b0",
                   mig_gi=[1, 2], utilization_gpu=None, clocks_event_reasons_active=[],
                   compute_capability="8.0")],
        processes=[]),
    "020_qx_RTX2080-windows.xml": dict(
        form="xml", schema="v11", driver="516.59", cuda="11.7",
        gpus=[dict(name="NVIDIA GeForce RTX 2080", mem=(862, 8192), persistence=None, driver_model="WDDM",
                   clocks_event_reasons_active=["gpu_idle"])],
        process_count=26, unnamed_processes=5,
        first_process=(0, 7724, "C:\\Program Files\\WindowsApps\\Microsoft.YourPhone_1.22062.543.0_x64__"
                                "8wekyb3d8bbwe\\PhoneExperienceHost.exe", None)),
    "021_qx_RTX3060.xml": dict(
        form="xml", schema="v11", driver="515.65.01", cuda="11.7",
        gpus=[dict(name="NVIDIA GeForce RTX 3060 Laptop GPU", mem=(5, 6144), persistence=False,
                   power_limit_w=None, compute_capability="8.6")],
        processes=[(0, 28543, "/usr/libexec/Xorg", 4)], process_types=["G"]),
    "022_qx_535_RTX4090.xml": dict(
        form="xml", schema="v12", driver="535.86.05", cuda="12.2",
        gpus=[dict(name="NVIDIA GeForce RTX 4090", mem=(2, 24564), persistence=True,
                   clocks_event_reasons_active=["gpu_idle"], power_draw_w=26.84, power_limit_w=450.0)],
        processes=[]),
    "023_qx_Tesla-P100.xml": dict(
        form="xml", schema="v11", driver="510.47.03", cuda="11.6",
        gpus=[dict(name="Tesla P100-PCIE-16GB", mem=(0, 16384), persistence=False,
                   architecture="Pascal", compute_capability="6.0")],
        processes=[]),
    "024_query-gpu_Tesla-P100.csv": dict(
        form="csv_query_gpu", driver=None, cuda=None,
        gpus=[dict(name="Tesla P100-PCIE-16GB", uuid="GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
                   mem=(0, None), memory_free_mib=16280, memory_reserved_mib=103, fan_speed_pct=None,
                   temperature_c=37, power_draw_w=28.16, persistence=None)],
        processes=[]),
    "026_version_610.57.04_RTX2080S_linux.txt": dict(
        form="version", driver="610.57.04", cuda="13.3", nvml="610.57", gpus=[], processes=[]),
    "027_L_590.48.01_H100.txt": dict(
        form="list", gpus=[dict(index=0, name=H100, uuid=MASKED_UUID)], processes=[]),
    "028_L_590.48.01_H100-MIG.txt": dict(
        form="list", gpus=[dict(index=0, name=H100, mig_mode=True,
                                mig_profiles=["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])],
        processes=[]),
    "029_error_nvml-version-mismatch_570.124.txt": dict(
        form="error", state="version_mismatch", driver="570.124", gpus=[], processes=[]),
    "030_error_nvml-version-mismatch_550.144.txt": dict(
        form="error", state="version_mismatch", driver="550.144", gpus=[], processes=[]),
    "031_error_nvml-version-mismatch_old-460-no-version-line.txt": dict(
        form="error", state="version_mismatch", driver=None, gpus=[], processes=[]),
    "032_error_couldnt-communicate-with-driver.txt": dict(
        form="error", state="driver_not_loaded", driver=None, gpus=[], processes=[]),
    "033_q_537.13_RTX4090_persistence-on.txt": dict(
        form="q", driver="537.13", cuda="12.2",
        gpus=[dict(name="NVIDIA GeForce RTX 4090", mem=(2136, 24564), persistence=True,
                   driver_model="WDDM", uuid="GPU-e1f55e56-2016-d918-7dd5-7cd29c440e50",
                   utilization_gpu=2, power_draw_w=72.62, power_limit_w=450.0,
                   clocks_event_reasons_active=["gpu_idle"])],
        processes=[(0, 20, "/Xwayland", None), (0, 20, "/Xwayland", None), (0, 23, "/Xwayland", None)]),
    "035_table_550.144.03_A100-SXM4-40GB.txt": dict(
        form="table", driver="550.144.03", cuda="12.4",
        gpus=[dict(name="NVIDIA A100-SXM4-40GB", mem=(1, 40960), persistence=False)], processes=[]),
    # -s pucvmet columns: temp (not gtemp), fb 145 MB used; pviol/tviol/pci have no GPU fact
    "037_dmon_extended-columns_pviol-tviol-pci.txt": dict(
        form="dmon", samples=10,
        gpus=[dict(index=0, power_draw_w=14.0, temperature_c=59, utilization_gpu=10, utilization_memory=4,
                   memory_used_mib=145)],
        processes=[]),
    "038_table_460.32.03_A100-PCIE-40GB_MIG-7x1g_old-layout.txt": dict(
        form="table", driver="460.32.03", cuda="11.2",
        gpus=[dict(name="A100-PCIE-40GB", mem=(13, 40536), persistence=False, mig_mode=True,
                   utilization_gpu=None, mig_gi=[7, 8, 9, 10, 11, 12, 13])],
        processes=[]),
    "039_qx_535.54.03_4xA100-SXM4-80GB_MIG.xml": dict(
        form="xml", schema="v12", driver="535.54.03", cuda="12.2", attached=4,
        gpus=[dict(name="NVIDIA A100-SXM4-80GB", mem=(50, 81920), persistence=False, mig_mode=True,
                   mig_gi=[3, 4, 5, 6])],
        processes=[], warning="attached_gpus says 4"),
    "041_qx_515.105.01_A10G.xml": dict(
        form="xml", schema="v11", driver="515.105.01", cuda="11.7",
        gpus=[dict(name="NVIDIA A10G", mem=(22, 23028), persistence=False, pci_device_id=None,
                   architecture="Ampere", compute_capability="8.6",
                   clocks_event_reasons_active=["gpu_idle"])],
        processes=[(0, 725, "/usr/lib/xorg/Xorg", 22)], warning="000000DE"),
    "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml": dict(
        form="xml", schema="v13", driver="590.44.01", cuda="13.1",
        gpus=[dict(name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", mem=(65720, 97887),
                   persistence=True, uuid="GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                   pci_bus_id="00000000:61:00.0", pci_device_id="0x2bb4", pci_id="10de:2bb4",
                   architecture="Blackwell", compute_capability="12.0", open_kernel_modules_required=True,
                   memory_reserved_mib=637, memory_free_mib=31531, power_draw_w=3.97, power_limit_w=300.0,
                   temperature_c=24, fan_speed_pct=30, performance_state="P8",
                   clocks_event_reasons_active=[])],
        processes=[(0, 116860, "/root/src/llama.cpp/build/bin/llama-server", 65710)]),
    "044_qx_GTX1070Ti_dtd-v10_minimal.xml": dict(
        form="xml", schema="v10", driver=None, cuda=None,
        gpus=[dict(name="GeForce GTX 1070 Ti", mem=(42, 4096), persistence=None,
                   uuid="GPU-f9ba66fc-a7f5-94c5-da19-019ef2f9c665", fan_speed_pct=100, power_draw_w=None,
                   clocks_event_reasons_active=None)],
        processes=[]),
    "045_qx_513.46_GRID-P4-1Q_vGPU_13procs.xml": dict(
        form="xml", schema="v11", driver="513.46", cuda="11.6",
        gpus=[dict(name="GRID P4-1Q", mem=(807, 1024), persistence=None, driver_model="WDDM",
                   pci_device_id="0x1bb3")],
        process_count=13, unnamed_processes=12, last_process=(0, 15104, "C:\\Windows\\explorer.exe", None)),
    "047_table_390.25_8xGTX1080Ti_processes_no-cuda-version.txt": dict(
        form="table", driver="390.25", cuda=None, gpu_count=8,
        gpus=[dict(index=0, name="GeForce GTX 108...", mem=(10807, 11178), persistence=False,
                   fan_speed_pct=53, temperature_c=75, power_draw_w=223.0, utilization_gpu=98)],
        last_gpu=dict(index=7, pci_bus_id="00000000:89:00.0", mem=(7773, 11178)),
        process_count=13, first_process=(0, 1032, "python", 10781),
        last_process=(7, 9908, "python", 7755),
        some_process=(3, 4755, "...ware/MATLAB/matlab94/bin/glnxa64/MATLAB", 389)),
    "048_table_346.46_GRID-K520_no-processes_2017.txt": dict(
        form="table", driver="346.46", cuda=None,
        gpus=[dict(name="GRID K520", mem=(10, 4095), persistence=False, pci_bus_id="0000:00:03.0",
                   pci_address="0000:00:03.0", architecture="Kepler")],
        processes=[]),
    "049_table_440.82_2xGTX1080Ti_docker-no-process-info.txt": dict(
        form="table", driver="440.82", cuda="10.2",
        gpus=[dict(name="GeForce GTX 108...", mem=(10916, 11175), persistence=False),
              dict(name="GeForce GTX 108...", mem=(149, 11178), persistence=False)],
        processes=[], warning="no process is listed"),
    "051_table_550.90.07_2xL4_vllm-ray-pods_0MiB-processes_indented.txt": dict(
        form="table", driver="550.90.07", cuda="12.4",
        gpus=[dict(name="NVIDIA L4", mem=(20313, 23034), persistence=False, power_limit_w=72.0),
              dict(name="NVIDIA L4", mem=(20305, 23034), persistence=False)],
        processes=[(0, 8, "/usr/bin/python3", 0), (1, 1082, "ray::RayWorkerWrapper", 0)],
        warning="per-process memory is unreliable"),
    "052_table_570.195.03_T4G-graviton_no-processes.txt": dict(
        form="table", driver="570.195.03", cuda="13.0",
        gpus=[dict(name="NVIDIA T4G", mem=(0, 15360), persistence=True, architecture="Turing",
                   compute_capability="7.5", performance_state="P8")],
        processes=[]),
    "053_query-gpu_RTX2070_repeated-header-samples.csv": dict(
        form="csv_query_gpu", driver=None, samples=20,
        # the last of 20 samples: 2023/06/22 18:57:15.802, 11 %, 827 MiB used, 7155 MiB free
        gpus=[dict(index=0, name="NVIDIA GeForce RTX 2070", mem=(827, 8192), memory_free_mib=7155,
                   utilization_gpu=11, utilization_memory=2, pci_bus_id="00000000:01:00.0")],
        processes=[]),
    # refused as a capture; read with partial=True (test_partial_readings)
    "054_q-grep_clocks-throttle-reasons_old-naming_2018.txt": dict(
        refused=UnsupportedForm, reason="excerpt"),
    # Full -q of HGX / SXM boards: the Fabric section is read past (fabric facts are other work).
    "055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt": dict(
        form="q", driver="565.57.01", cuda="12.7", attached=8, gpu_count=8,
        gpus=[dict(index=0, name=H100, mem=(1, 81559), persistence=True, mig_mode=False,
                   uuid="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", pci_bus_id="00000000:18:00.0",
                   pci_device_id="0x2330", memory_reserved_mib=454, memory_free_mib=81106,
                   architecture="Hopper", performance_state="P0", fan_speed_pct=None, utilization_gpu=0,
                   power_draw_w=100.89, power_limit_w=700.0, temperature_c=30,
                   clocks_event_reasons_active=["gpu_idle"])],
        last_gpu=dict(index=7, name=H100, mem=(1, 81559), persistence=True,
                      uuid="GPU-33135771-a848-ece1-b61e-489e221d663c", pci_bus_id="00000000:DB:00.0",
                      memory_reserved_mib=454, power_draw_w=75.09, temperature_c=29),
        processes=[]),
    "056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt": dict(
        form="q", driver="555.42.02", cuda="12.5", attached=4,
        gpus=[dict(index=0, name="NVIDIA A100-SXM4-80GB", mem=(1, 81920), persistence=True, mig_mode=False,
                   uuid="GPU-31515c3d-1414-7c2c-004a-f86a898946ac", pci_bus_id="00000000:68:00.0",
                   pci_device_id="0x20b2", memory_reserved_mib=763, memory_free_mib=81158,
                   architecture="Ampere", power_draw_w=59.77, power_limit_w=500.0, temperature_c=25,
                   clocks_event_reasons_active=["gpu_idle"]),
              dict(index=1, name="NVIDIA A100-SXM4-80GB", mem=(1, 81920), persistence=True,
                   uuid="GPU-72d87681-01db-370e-567d-41afcf20fad0", pci_bus_id="00000000:9E:00.0"),
              dict(index=2, name="NVIDIA A100-SXM4-80GB", mem=(1, 81920), persistence=True,
                   uuid="GPU-62989189-9e1e-ac75-4676-114f14998542", pci_bus_id="00000000:C2:00.0"),
              dict(index=3, name="NVIDIA A100-SXM4-80GB", mem=(1, 81920), persistence=True,
                   uuid="GPU-011b2cfe-2b8e-1cb0-19e1-1b764e854dfc", pci_bus_id="00000000:D4:00.0",
                   power_draw_w=62.21, temperature_c=23)],
        processes=[]),
    # driver 590: only "Average/Instantaneous Power Draw"; the average is reported
    "057_q_590.48.01_H100-SXM-1gpu-vm_fabric-completed-health-block.txt": dict(
        form="q", driver="590.48.01", cuda="13.1", attached=1,
        gpus=[dict(index=0, name=H100, mem=(0, 81559), persistence=True, mig_mode=False, uuid=MASKED_UUID,
                   pci_bus_id="00000000:00:09.0", pci_device_id="0x2330", memory_reserved_mib=479,
                   memory_free_mib=81081, architecture="Hopper", utilization_gpu=0, power_draw_w=69.85,
                   power_limit_w=700.0, temperature_c=41, clocks_event_reasons_active=["gpu_idle"])],
        processes=[]),
    "058_topo-m_590.48.01_H100-SXM-1gpu-vm_ansi-underline-header.txt": dict(
        refused=UnsupportedForm, reason="topo"),
    "059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt": dict(
        refused=UnsupportedForm, reason="excerpt"),
    "060_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_completed.txt": dict(
        refused=UnsupportedForm, reason="excerpt"),
    # the table shows nothing of the fabric: 8 healthy-looking idle GPUs
    "061_table_570.133.20_8xH100-SXM_p5-rhel9_fabric-in-progress-looks-healthy.txt": dict(
        form="table", driver="570.133.20", cuda="12.8", gpu_count=8,
        gpus=[dict(index=0, name=H100, mem=(0, 81559), persistence=False, pci_bus_id="00000000:53:00.0",
                   mig_mode=False, fan_speed_pct=None, temperature_c=26, performance_state="P0",
                   power_draw_w=67.0, power_limit_w=700.0, utilization_gpu=0, compute_mode="Default")],
        last_gpu=dict(index=7, name=H100, mem=(0, 81559), persistence=False, pci_bus_id="00000000:CA:00.0",
                      mig_mode=False, temperature_c=26, power_draw_w=70.0),
        processes=[]),
    "062_topo-m_8xH200_NV18_10xNIC-mlx5.txt": dict(refused=UnsupportedForm, reason="topo"),
    "063_topo-m_8xRTX4090_pcie-only_all-SYS_legend-cut.txt": dict(refused=UnsupportedForm, reason="topo"),
    "064_topo-m_2xRTX5090_pcie-PHB.txt": dict(refused=UnsupportedForm, reason="topo"),
    "065_topo-p2p-rw_2xRTX5090_GNS-gpu-not-supported.txt": dict(refused=UnsupportedForm, reason="topo"),
    "066_q-grep-fabric_completed-success_health-unhealthy_cliqueid2.txt": dict(
        refused=UnsupportedForm, reason="excerpt"),
    "067_q-fabric_completed-insufficient-resources_cliqueid0_dedented.txt": dict(
        refused=UnsupportedForm, reason="excerpt"),
    "068_L_535.216.01_A100-SXM4-80GB_MIG-7x1g.10gb.txt": dict(
        form="list", gpus=[dict(index=0, name="NVIDIA A100-SXM4-80GB", mig_mode=True,
                                uuid="GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16",
                                mig_profiles=["1g.10gb"] * 7)],
        processes=[]),
    "069_mig-lgip_A30-profiles_all-allocated-0-free.txt": dict(refused=UnsupportedForm, reason="mig instance listing"),
    "070_mig-lgi_A30_4x1g.6gb.txt": dict(refused=UnsupportedForm, reason="mig instance listing"),
}


def _load(name):
    with open(os.path.join(SMI_FIXTURES, name), "rb") as handle:
        return handle.read()


def test_fixtures_are_unedited_copies_of_the_corpus():
    corpus = os.path.join(CORPUS, "nvidia_smi")
    if not os.path.isdir(corpus):
        pytest.skip("shared corpus not mounted")
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), "rb") as original:
            assert original.read() == _load(name), name


def test_every_fixture_has_expectations():
    assert sorted(os.listdir(SMI_FIXTURES)) == sorted(EXPECTED)


def _check_gpu(gpu, want):
    for key, value in want.items():
        if key == "mem":
            assert (gpu["memory_used_mib"], gpu["memory_total_mib"]) == value
        elif key == "persistence":
            assert gpu["persistence_mode"] is value
        elif key == "mig_gi":
            if value is not None:
                assert [m["gpu_instance_id"] for m in gpu["mig_devices"]] == value
        elif key == "mig_profiles":
            assert [m["profile"] for m in gpu["mig_devices"]] == value
        else:
            assert gpu[key] == value, key


def _proc_tuple(proc):
    return (proc["gpu_index"], proc["pid"], proc["name"], proc["used_mib"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name):
    want = EXPECTED[name]
    data = _load(name)
    if "refused" in want:
        with pytest.raises(want["refused"]) as info:
            n.facts_from_output(data)
        assert want["reason"] in str(info.value)
        return
    facts = n.facts_from_output(data)
    assert facts["form"] == want["form"]
    assert facts["state"] == want.get("state", "ok")
    for key, fact in (("driver", "driver_version"), ("cuda", "cuda_driver_version"),
                      ("schema", "schema"), ("nvml", "nvml_version"), ("attached", "attached_gpus"),
                      ("samples", "samples")):
        if key in want:
            assert facts[fact] == want[key], key
    if "gpu_count" in want:
        assert len(facts["gpus"]) == want["gpu_count"]
    else:
        assert len(facts["gpus"]) == len(want["gpus"])
    for gpu, expected in zip(facts["gpus"], want["gpus"]):
        _check_gpu(gpu, expected)
    if "last_gpu" in want:
        _check_gpu(facts["gpus"][-1], want["last_gpu"])
    procs = facts["processes"]
    if "processes" in want:
        assert [_proc_tuple(p) for p in procs] == want["processes"]
    if "process_count" in want:
        assert len(procs) == want["process_count"]
    for key, index in (("first_process", 0), ("last_process", -1)):
        if key in want:
            assert _proc_tuple(procs[index]) == want[key]
    if "some_process" in want:
        assert want["some_process"] in [_proc_tuple(p) for p in procs]
    if "unnamed_processes" in want:
        assert sum(1 for p in procs if p["name"] is None) == want["unnamed_processes"]
    if "process_types" in want:
        assert [p["type"] for p in procs] == want["process_types"]
    if "process_bus" in want:
        assert all(p["pci_bus_id"] == want["process_bus"] for p in procs)
    if "warning" in want:
        assert any(want["warning"] in w for w in facts["warnings"]), facts["warnings"]


# --- what an operator pastes: excerpts and captures cut short ------------------------------------------------
# The module refuses them (a cut capture must not read as a host with fewer GPUs); partial=True (`gpuhost smi`)
# reads what is there, sets partial and names what is missing. Values read off the files.
MEMORY = os.path.join(FIXTURES, "nvidia_smi_memory")
PARTIAL = {
    # `-q` header and the first of 8 GPU sections, cut after ECC Mode (gpud's test fixture)
    "nvidia_smi_memory/H100-80GB-HBM3_535.161.08.txt": dict(
        form="q", driver="535.161.08", cuda="12.2", attached=8,
        gpus=[dict(index=0, name=H100, mem=(0, 81559), memory_reserved_mib=551, memory_free_mib=81007,
                   pci_bus_id="00000000:19:00.0")],
        missing=("says 8 attached GPUs but has 1", "ends inside the last GPU section")),
    # "CUDA Version : Not Found" on a vGPU host driver: no value
    "nvidia_smi_memory/RTX-PRO-6000-Blackwell-Server_580.105.06.txt": dict(
        form="q", driver="580.105.06", cuda=None, attached=4,
        gpus=[dict(index=0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", mem=(5952, 97887),
                   memory_reserved_mib=2288, uuid="GPU-0a5ba9ad-a575-72c7-d51d-3e726232cfd1")],
        missing=("says 4 attached GPUs but has 1", "ends inside the last GPU section")),
    # `-q -x` lines without their document: the header and one <gpu> of 2
    "nvidia_smi_memory/L4_555.42.06.txt": dict(
        form="xml", driver="555.42.06", cuda="12.5", attached=2,
        gpus=[dict(index=0, name="NVIDIA L4", mem=(1, 23034), memory_reserved_mib=434, memory_free_mib=22601,
                   pci_bus_id="00000000:01:00.0")],
        missing=("the XML is an excerpt",)),
    # the default table cut after the GPU's second row
    "nvidia_smi_memory/A100-80GB-PCIe_550.90.12_table.txt": dict(
        form="table", driver="550.90.12", cuda="12.4",
        gpus=[dict(index=0, name="NVIDIA A100 80GB PCIe", mem=(437, 81920), utilization_gpu=100,
                   power_draw_w=69.0, power_limit_w=300.0, temperature_c=32)],
        missing=("ends inside the GPU section",)),
    # DGX Spark: Memory-Usage "Not Supported", the table stops before Processes
    "nvidia_smi_memory/GB10_580.126.09_table.txt": dict(
        form="table", driver="580.126.09", cuda="13.0",
        gpus=[dict(index=0, name="NVIDIA GB10", mem=(None, None), temperature_c=36, power_draw_w=3.0)],
        missing=("ends before the Processes section",)),
    # a script's NVML lines, then `$ nvidia-smi --query-gpu=...` and its CSV: [N/A] memory, 0 %, 11.17 W, 35
    "nvidia_smi_memory/GB10_580.173.02.txt": dict(
        form="csv_query_gpu", driver=None, partial=False,
        gpus=[dict(index=0, mem=(None, None), utilization_gpu=0, power_draw_w=11.17, temperature_c=35)],
        missing=(), warning="the CSV starts at line 8 of the paste"),
    # `nvidia-smi -q | grep -A8 "Clocks Throttle Reasons"`: which GPU is not known
    "nvidia_smi/054_q-grep_clocks-throttle-reasons_old-naming_2018.txt": dict(
        form="q", driver=None, gpus=[dict(index=None, name=None, clocks_event_reasons_active=["gpu_idle"])],
        missing=("without its 'GPU <bus id>' line",)),
}


@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_partial_readings(name):
    want = PARTIAL[name]
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        data = handle.read()
    if want.get("partial", True):
        with pytest.raises(ParseError):
            n.facts_from_output(data)
    facts = n.facts_from_output(data, partial=True)
    assert (facts["form"], facts["state"], facts["partial"]) == (want["form"], "ok", want.get("partial", True))
    for key, fact in (("driver", "driver_version"), ("cuda", "cuda_driver_version"), ("attached", "attached_gpus")):
        if key in want:
            assert facts[fact] == want[key], key
    assert len(facts["gpus"]) == len(want["gpus"])
    for gpu, expected in zip(facts["gpus"], want["gpus"]):
        _check_gpu(gpu, expected)
    notes = [w for w in facts["warnings"] if w.startswith("partial capture: ")]
    assert len(notes) == len(want["missing"]) and all(m in " ".join(notes) for m in want["missing"]), notes
    if "warning" in want:
        assert any(want["warning"] in w for w in facts["warnings"]), facts["warnings"]
    # a cut capture is no evidence of missing processes (no 'GPUs hold ... MiB but no process' warning)
    assert not any("no process is listed" in w for w in facts["warnings"])


def test_partial_is_false_for_whole_captures():
    for name in ("001_table_570.133.20_2xH100_no-processes.txt", "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml",
                 "003_q_590.48.01_H100-MIG_load.txt"):
        assert n.facts_from_output(_load(name), partial=True) == n.facts_from_output(_load(name))
