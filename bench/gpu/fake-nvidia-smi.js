#!/usr/bin/env node
/**
 * STAND-IN for nvidia-smi, used only by `bench/gpu/gpu-check.sh --fake` on machines without a GPU.
 * It renders the scenario in $FAKE_NVML_CONFIG (the same file that drives the fake NVML library)
 * in nvidia-smi's formats, for the two invocations the check uses: `-q -x` (XML, the R535+ element
 * names) and `nvlink -s`. Only explicitly scripted fields are printed (see fake-scenario.ts); it
 * knows none of the fake library's defaults. On a GPU node the real nvidia-smi is used instead.
 */
import { readFileSync } from 'node:fs';

const cfg = JSON.parse(readFileSync(process.env.FAKE_NVML_CONFIG ?? '', 'utf8'));
const args = process.argv.slice(2);
const gpus = cfg.gpus.slice(0, cfg.count ?? cfg.gpus.length);
const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;');
const na = (v, f = (x) => x) => (v === null || v === undefined ? 'N/A' : f(v));
const onOff = (b) => (b ? 'Active' : 'Not Active');
const FABRIC = ['N/A', 'Not Started', 'In Progress', 'Completed'];

if (args[0] === '-q' && args[1] === '-x') {
  const out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', '<nvidia_smi_log>'];
  out.push(`\t<driver_version>${esc(cfg.driverVersion)}</driver_version>`, `\t<attached_gpus>${gpus.length}</attached_gpus>`);
  for (const g of gpus) {
    const [dom, bus, dev] = g.pci.split(/[:.]/);
    const r = g.clocksEventReasons ?? 0;
    const ecc = g.eccMode === null ? null : (g.eccMode?.current ?? 1);
    const rr = g.remappedRows;
    out.push(
      `\t<gpu id="${esc(g.pci)}">`,
      `\t\t<product_name>${esc(g.name)}</product_name>`,
      `\t\t<serial>${esc(na(g.serial))}</serial>`,
      `\t\t<uuid>${esc(g.uuid)}</uuid>`,
      '\t\t<pci>',
      `\t\t\t<pci_bus>${bus}</pci_bus>`,
      `\t\t\t<pci_device>${dev}</pci_device>`,
      `\t\t\t<pci_domain>${dom.slice(-4)}</pci_domain>`,
      `\t\t\t<pci_bus_id>${esc(g.pci)}</pci_bus_id>`,
      '\t\t\t<pci_gpu_link_info>',
      `\t\t\t\t<pcie_gen><max_link_gen>${g.pcie.maxGen}</max_link_gen><current_link_gen>${g.pcie.gen}</current_link_gen></pcie_gen>`,
      `\t\t\t\t<link_widths><max_link_width>${g.pcie.maxWidth}x</max_link_width><current_link_width>${g.pcie.width}x</current_link_width></link_widths>`,
      '\t\t\t</pci_gpu_link_info>',
      `\t\t\t<replay_counter>${g.pcie.replay}</replay_counter>`,
      '\t\t</pci>',
      '\t\t<clocks_event_reasons>',
      `\t\t\t<clocks_event_reason_gpu_idle>${onOff(r & 0x1)}</clocks_event_reason_gpu_idle>`,
      `\t\t\t<clocks_event_reason_applications_clocks_setting>${onOff(r & 0x2)}</clocks_event_reason_applications_clocks_setting>`,
      `\t\t\t<clocks_event_reason_sw_power_cap>${onOff(r & 0x4)}</clocks_event_reason_sw_power_cap>`,
      `\t\t\t<clocks_event_reason_hw_slowdown>${onOff(r & 0x8)}</clocks_event_reason_hw_slowdown>`,
      `\t\t\t<clocks_event_reason_sync_boost>${onOff(r & 0x10)}</clocks_event_reason_sync_boost>`,
      `\t\t\t<clocks_event_reason_sw_thermal_slowdown>${onOff(r & 0x20)}</clocks_event_reason_sw_thermal_slowdown>`,
      `\t\t\t<clocks_event_reason_hw_thermal_slowdown>${onOff(r & 0x40)}</clocks_event_reason_hw_thermal_slowdown>`,
      `\t\t\t<clocks_event_reason_hw_power_brake_slowdown>${onOff(r & 0x80)}</clocks_event_reason_hw_power_brake_slowdown>`,
      '\t\t</clocks_event_reasons>',
      `\t\t<ecc_mode><current_ecc>${na(ecc, (e) => (e ? 'Enabled' : 'Disabled'))}</current_ecc><pending_ecc>${na(ecc, (e) => (e ? 'Enabled' : 'Disabled'))}</pending_ecc></ecc_mode>`,
      '\t\t<ecc_errors><volatile>',
      `\t\t\t<sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity><sram_uncorrectable_secded>0</sram_uncorrectable_secded>`.replace(
        />0</g,
        ecc === null ? '>N/A<' : '>0<',
      ),
      `\t\t\t<dram_correctable>${na(ecc === null ? null : (g.eccCorrectedVolatile ?? 0))}</dram_correctable><dram_uncorrectable>${na(ecc === null ? null : g.eccUncorrectedVolatile)}</dram_uncorrectable>`,
      '\t\t</volatile></ecc_errors>',
      '\t\t<remapped_rows>',
      `\t\t\t<remapped_row_corr>${na(rr?.corr)}</remapped_row_corr>`,
      `\t\t\t<remapped_row_unc>${na(rr?.unc)}</remapped_row_unc>`,
      `\t\t\t<remapped_row_pending>${na(rr, (x) => (x.pending ? 'Yes' : 'No'))}</remapped_row_pending>`,
      `\t\t\t<remapped_row_failure>${na(rr, (x) => (x.failure ? 'Yes' : 'No'))}</remapped_row_failure>`,
      '\t\t</remapped_rows>',
      `\t\t<temperature><gpu_temp>${g.temperature} C</gpu_temp><gpu_temp_max_threshold>${g.shutdownTemp} C</gpu_temp_max_threshold><gpu_temp_slow_threshold>${g.slowdownTemp} C</gpu_temp_slow_threshold></temperature>`,
      `\t\t<fabric><state>${FABRIC[g.fabric?.state ?? 0] ?? 'N/A'}</state><status>${g.fabric ? (g.fabric.status === 0 ? 'Success' : 'Failure') : 'N/A'}</status></fabric>`,
      '\t</gpu>',
    );
  }
  out.push('</nvidia_smi_log>');
  console.log(out.join('\n'));
} else if (args[0] === 'nvlink' && (args[1] === '-s' || args[1] === '--status')) {
  gpus.forEach((g, i) => {
    console.log(`GPU ${i}: ${g.name} (UUID: ${g.uuid})`);
    if (!g.nvlink) return; // PCIe GPU: nvidia-smi lists no links
    const inactive = new Set(g.nvlink.inactive ?? []);
    for (let l = 0; l < (g.nvlink.links ?? 18); l++) console.log(`\t Link ${l}: ${inactive.has(l) ? '<inactive>' : '26.562 GB/s'}`);
  });
} else {
  console.error(`fake nvidia-smi (stand-in): unsupported arguments: ${args.join(' ')}`);
  process.exit(2);
}
