import re,sys
src=open('/work/shared/corpus/nvidia_smi/003_q_590.48.01_H100-MIG_load.txt').read().split('\n')
start=[i for i,l in enumerate(src) if l.startswith('GPU 0000')][0]
end=[i for i,l in enumerate(src) if l.strip()=='Processes'][0]
block=src[start+1:end]
M={
 'Product Name':'name','Product Brand':'brand','Product Architecture':'architecture',
 'Display Attached':'display_attached',
 'Persistence Mode':'persistence_mode','Addressing Mode':'addressing_mode',
 'MIG Mode/Current':'mig_current','MIG Mode/Pending':'mig_pending',
 'Serial Number':'serial','GPU UUID':'uuid','GPU PDI':'pdi','Minor Number':'minor_number','VBIOS Version':'vbios',
 'Board ID':'board_id','Board Part Number':'board_part_number','GPU Part Number':'gpu_part_number',
 'Platform Info/Module Id':'module_id',
 'GPU Virtualization Mode/Virtualization Mode':'virtualization_mode',
 'GSP Firmware Version':'gsp_firmware_version',
 'PCI/Bus':'q_pci_bus','PCI/Device':'q_pci_device','PCI/Domain':'q_pci_domain',
 'PCI/Base Classcode':'q_pci_base_class','PCI/Sub Classcode':'q_pci_sub_class',
 'PCI/Device Id':'q_pci_device_id','PCI/Bus Id':'pci_bus_id','PCI/Sub System Id':'q_pci_sub_system_id',
 'PCI/GPU Link Info/PCIe Generation/Max':'pcie_gen_max','PCI/GPU Link Info/PCIe Generation/Current':'pcie_gen_current',
 'PCI/GPU Link Info/PCIe Generation/Device Current':'pcie_gen_current','PCI/GPU Link Info/PCIe Generation/Device Max':'pcie_gen_max',
 'PCI/Replays Since Reset':'replays',
 'PCI/Tx Throughput':'tx_util','PCI/Rx Throughput':'rx_util',
 'Fan Speed':'fan_speed','Performance State':'performance_state',
 'FB Memory Usage/Total':'fb_total','FB Memory Usage/Reserved':'fb_reserved','FB Memory Usage/Used':'fb_used','FB Memory Usage/Free':'fb_free',
 'BAR1 Memory Usage/Total':'bar1_total','BAR1 Memory Usage/Used':'bar1_used','BAR1 Memory Usage/Free':'bar1_free',
 'Compute Mode':'compute_mode',
 'Utilization/GPU':'util_gpu','Utilization/Memory':'util_memory','Utilization/Encoder':'util_other','Utilization/Decoder':'util_other',
 'Utilization/JPEG':'util_other','Utilization/OFA':'util_other',
 'ECC Mode/Current':'ecc_mode','ECC Mode/Pending':'ecc_mode',
 'Temperature/GPU Current Temp':'gpu_temp','Temperature/GPU T.Limit Temp':'gpu_temp_tlimit','Temperature/Memory Current Temp':'mem_temp',
 'GPU Power Readings/Average Power Draw':'power_draw_avg','GPU Power Readings/Instantaneous Power Draw':'power_draw',
 'GPU Power Readings/Current Power Limit':'power_limit','GPU Power Readings/Requested Power Limit':'power_limit',
 'GPU Power Readings/Default Power Limit':'power_default_limit','GPU Power Readings/Min Power Limit':'power_min_limit',
 'GPU Power Readings/Max Power Limit':'power_max_limit',
 'GPU Memory Power Readings/Average Power Draw':'mem_power_draw',
 'Clocks/Graphics':'clk_graphics','Clocks/SM':'clk_sm','Clocks/Memory':'clk_mem','Clocks/Video':'clk_video',
 'Max Clocks/Graphics':'max_graphics','Max Clocks/SM':'max_sm','Max Clocks/Memory':'max_mem','Max Clocks/Video':'max_video',
 'Max Customer Boost Clocks/Graphics':'max_graphics',
 'Fabric/State':'fabric_state','Fabric/Status':'fabric_status','Fabric/CliqueId':'fabric_clique','Fabric/ClusterUUID':'fabric_cluster',
 'Clocks Event Reasons/Idle':'cer_gpu_idle','Clocks Event Reasons/Applications Clocks Setting':'cer_applications_clocks_setting',
 'Clocks Event Reasons/SW Power Cap':'cer_sw_power_cap','Clocks Event Reasons/HW Slowdown':'cer_hw_slowdown',
 'Clocks Event Reasons/HW Thermal Slowdown':'cer_hw_thermal_slowdown',
 'Clocks Event Reasons/HW Power Brake Slowdown':'cer_hw_power_brake_slowdown',
 'Clocks Event Reasons/Sync Boost':'cer_sync_boost','Clocks Event Reasons/SW Thermal Slowdown':'cer_sw_thermal_slowdown',
 'Clocks Event Reasons/Display Clock Setting':'cer_display_clocks_setting',
}
out=[]; stack=[]; used=set(); skipdepth=None
for l in block:
    ind=(len(l)-len(l.lstrip(' ')))//4
    body=l.strip()
    key=body.split(' : ')[0].rstrip() if ' : ' in body or body.endswith(':') else body
    if ' : ' in l:
        key=l[:l.index(' : ')].strip()
    else:
        key=l.strip()
    if skipdepth is not None:
        if ind>skipdepth: continue
        skipdepth=None
    if key=='MIG Device' and ind==1:
        skipdepth=1; continue
    del stack[ind-1:]
    path='/'.join(stack+[key])
    if ' : ' in l:
        if path in M:
            used.add(path); l=l[:l.index(' : ')+3]+'${%s}'%M[path]
    else:
        stack.append(key)
    out.append(l)
print('unused', set(M)-used, file=sys.stderr)
open('/work/main/molecule/simulator/gpusim/templates/q_gpu.txt','w').write('GPU ${pci_bus_id}\n'+'\n'.join(out)+'\n')
