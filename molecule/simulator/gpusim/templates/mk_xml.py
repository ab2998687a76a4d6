import re,sys
src=open('/work/shared/corpus/nvidia_smi/043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml').read().split('\n')
# locate gpu block
start=[i for i,l in enumerate(src) if l.startswith('\t<gpu id=')][0]
end=[i for i,l in enumerate(src) if l=='\t</gpu>'][0]
block=src[start:end+1]
M={
 'product_name':'name','product_brand':'brand','product_architecture':'architecture',
 'persistence_mode':'persistence_mode','addressing_mode':'addressing_mode',
 'mig_mode/current_mig':'mig_current','mig_mode/pending_mig':'mig_pending',
 'serial':'serial','uuid':'uuid','pdi':'pdi','minor_number':'minor_number','vbios_version':'vbios',
 'board_id':'board_id','board_part_number':'board_part_number','gpu_part_number':'gpu_part_number',
 'platformInfo/module_id':'module_id',
 'inforom_bbx_flush/latest_timestamp':'bbx_timestamp','inforom_bbx_flush/latest_duration':'bbx_duration',
 'gsp_firmware_version':'gsp_firmware_version',
 'pci/pci_bus':'pci_bus','pci/pci_device':'pci_device','pci/pci_domain':'pci_domain',
 'pci/pci_base_class':'pci_base_class','pci/pci_sub_class':'pci_sub_class',
 'pci/pci_device_id':'pci_device_id','pci/pci_bus_id':'pci_bus_id','pci/pci_sub_system_id':'pci_sub_system_id',
 'pci/pci_gpu_link_info/pcie_gen/max_link_gen':'pcie_gen_max','pci/pci_gpu_link_info/pcie_gen/current_link_gen':'pcie_gen_current',
 'pci/pci_gpu_link_info/pcie_gen/device_current_link_gen':'pcie_gen_current','pci/pci_gpu_link_info/pcie_gen/max_device_link_gen':'pcie_gen_max',
 'pci/pci_gpu_link_info/pcie_gen/max_host_link_gen':'pcie_gen_max',
 'pci/tx_util':'tx_util','pci/rx_util':'rx_util',
 'fan_speed':'fan_speed','performance_state':'performance_state',
 'fb_memory_usage/total':'fb_total','fb_memory_usage/reserved':'fb_reserved','fb_memory_usage/used':'fb_used','fb_memory_usage/free':'fb_free',
 'bar1_memory_usage/total':'bar1_total','bar1_memory_usage/used':'bar1_used','bar1_memory_usage/free':'bar1_free',
 'compute_mode':'compute_mode',
 'utilization/gpu_util':'util_gpu','utilization/memory_util':'util_memory',
 'ecc_mode/current_ecc':'ecc_mode','ecc_mode/pending_ecc':'ecc_mode',
 'temperature/gpu_temp':'gpu_temp','temperature/gpu_temp_tlimit':'gpu_temp_tlimit',
 'gpu_power_readings/average_power_draw':'power_draw_avg','gpu_power_readings/instant_power_draw':'power_draw',
 'gpu_power_readings/current_power_limit':'power_limit','gpu_power_readings/requested_power_limit':'power_limit',
 'gpu_power_readings/default_power_limit':'power_default_limit','gpu_power_readings/min_power_limit':'power_min_limit',
 'gpu_power_readings/max_power_limit':'power_max_limit',
 'clocks/graphics_clock':'clk_graphics','clocks/sm_clock':'clk_sm','clocks/mem_clock':'clk_mem','clocks/video_clock':'clk_video',
 'max_clocks/graphics_clock':'max_graphics','max_clocks/sm_clock':'max_sm','max_clocks/mem_clock':'max_mem','max_clocks/video_clock':'max_video',
}
for r in ['gpu_idle','applications_clocks_setting','sw_power_cap','hw_slowdown','hw_thermal_slowdown','hw_power_brake_slowdown','sync_boost','sw_thermal_slowdown','display_clocks_setting']:
    M['clocks_event_reasons/clocks_event_reason_'+r]='cer_'+r
for r in ['sw_power_cap','sync_boost','sw_therm_slowdown','hw_therm_slowdown','hw_power_brake']:
    M['clocks_event_reasons_counters/clocks_event_reasons_counters_'+r]='cerc_'+r
out=[]; stack=[]; used=set(); skip=None
for l in block[1:-1]:
    s=l.strip()
    if skip:
        if s==skip: out.append('${%s}'%('supported_clocks' if 'supported' in skip else 'processes')); skip=None
        continue
    if s=='<supported_clocks>': skip='</supported_clocks>'; continue
    if s=='<processes>': skip='</processes>'; continue
    m=re.match(r'^(\t*)<(\w+)>(.*)</\2>$',l)
    if m:
        path='/'.join(stack+[m.group(2)])
        if path in M:
            used.add(path); l='%s<%s>${%s}</%s>'%(m.group(1),m.group(2),M[path],m.group(2))
        out.append(l); continue
    m=re.match(r'^\t*<(\w+)>$',l)
    if m: stack.append(m.group(1)); out.append(l); continue
    m=re.match(r'^\t*</(\w+)>$',l)
    if m: stack.pop(); out.append(l); continue
    out.append(l)
missing=set(M)-used
print('unused', missing, file=sys.stderr)
open('/work/main/molecule/simulator/gpusim/templates/qx_v13_gpu.xml','w').write('\t<gpu id="${pci_bus_id}">\n'+'\n'.join(out)+'\n\t</gpu>\n')
