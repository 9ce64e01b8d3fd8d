/**
 * `vigil gpu`: one poll of the NVML path, printed for people or (with --json) for scripts. It runs
 * the same monitor the agent runs (events off), so what it prints is what the agent would judge.
 *
 * Exit codes: 0 every check passes or is skipped, 1 a check fails, 2 NVML is unusable (library or
 * driver missing, or a call hung), 3 no NVIDIA GPU on the PCI bus.
 */
import type { Finding, FindingSink } from '../api/types.ts';
import type { CheckResult } from '../monitors/gpu/checks.ts';
import type { GpuConfigInput } from '../monitors/gpu/config.ts';
import type { GpuSnapshot } from '../monitors/gpu/monitor.ts';
import { createGpuProbe } from '../app/gpu-probe.ts';
import { exitNow, nvmlThreadsLeft } from '../sources/nvml/client.ts';

export interface GpuCommandOptions {
  json: boolean;
  /** NVML library path (default from config: libnvidia-ml.so.1). */
  library?: string;
  sysRoot?: string;
  /** The agent's `gpu` config section, when the caller has loaded one. */
  config?: GpuConfigInput;
  /** Output (default: stdout). */
  write?: (text: string) => void;
  /**
   * When an NVML call is still hung at the end, end the process right away with exitNow(exitCode)
   * (default true): Node would otherwise wait for the hung thread before exiting.
   */
  exitIfHung?: boolean;
}

export interface GpuCommandReport extends GpuSnapshot {
  exitCode: number;
  summary: { ok: number; fail: number; skip: number };
  findings: Finding[];
}

function exitCodeOf(snap: GpuSnapshot): number {
  if (snap.state === 'off') return 3;
  if (snap.nvmlUsable === false) return 2;
  if (snap.checks.some((c) => c.status === 'fail' && c.reason === 'NvidiaNVMLTimeout')) return 2;
  if (snap.checks.some((c) => c.status === 'fail')) return 1;
  return 0;
}

export async function runGpuCommand(opts: GpuCommandOptions): Promise<number> {
  const write = opts.write ?? ((t: string) => void process.stdout.write(t));
  const findings: Finding[] = [];
  const sink: FindingSink = { finding: (f) => void findings.push(f), healthy: () => {}, source: () => {} };
  const monitor = createGpuProbe({
    ...(opts.config ? { config: opts.config } : {}),
    ...(opts.library ? { library: opts.library } : {}),
    ...(opts.sysRoot ? { sysRoot: opts.sysRoot } : {}),
  });
  let snap: GpuSnapshot;
  try {
    await monitor.start(sink);
    snap = monitor.snapshot();
  } finally {
    await monitor.stop();
  }
  const exitCode = exitCodeOf(snap);
  const summary = { ok: 0, fail: 0, skip: 0 };
  for (const c of snap.checks) summary[c.status]++;
  if (opts.json) {
    const report: GpuCommandReport = { ...snap, exitCode, summary, findings };
    write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    write(human(snap, summary, opts.sysRoot ?? '/sys'));
  }
  if (nvmlThreadsLeft() > 0 && opts.exitIfHung !== false) {
    // A thread is stuck in NVML; Node would wait for it at exit, possibly forever.
    process.stderr.write(`vigil gpu: ${nvmlThreadsLeft()} NVML call(s) still hung; exiting without waiting for them\n`);
    exitNow(exitCode);
  }
  return exitCode;
}

const TAG = { ok: 'OK  ', fail: 'FAIL', skip: 'SKIP' } as const;

function human(snap: GpuSnapshot, summary: GpuCommandReport['summary'], sysRoot: string): string {
  const lines: string[] = [];
  lines.push(`NVIDIA GPUs on the PCI bus: ${snap.pciFunctions.length} (${sysRoot}/bus/pci/devices)`);
  if (snap.state === 'off') {
    lines.push('No NVIDIA display or 3D controller found; the GPU monitor stays off on this node.');
    return `${lines.join('\n')}\n`;
  }
  lines.push(`NVML library: ${snap.library}`);
  lines.push(`Driver version: ${snap.driverVersion ?? 'unknown'}`);
  if (snap.push) lines.push(`Push channel: ${snap.push.source.toUpperCase()} (${snap.push.why})`);
  if (snap.missingSymbols.length) lines.push(`Missing NVML symbols (older driver): ${snap.missingSymbols.join(', ')}`);
  lines.push(`GPUs: NVML count ${snap.nvmlCount ?? 'unknown'}, expected ${snap.expectedCount ?? 'unknown'}`);
  for (const g of snap.gpus) {
    lines.push(`  ${String(g.index).padStart(2)}  ${g.uuid ?? '?'}  ${g.pci ?? '?'}  ${g.name ?? '?'}  serial ${g.serial ?? 'n/a'}`);
  }
  const row = (c: CheckResult, strip: boolean) => {
    const msg = strip ? c.message.slice(c.message.indexOf(': ') + 2) : c.message;
    return `  ${TAG[c.status]}  ${c.check.padEnd(18)} ${msg}`;
  };
  lines.push('Checks:');
  for (const c of snap.checks.filter((c) => c.gpu === null)) lines.push(row(c, false));
  const byGpu = new Map<number, CheckResult[]>();
  for (const c of snap.checks) if (c.gpu !== null) byGpu.set(c.gpu, [...(byGpu.get(c.gpu) ?? []), c]);
  for (const [index, checks] of [...byGpu].sort((a, b) => a[0] - b[0])) {
    const g = snap.gpus.find((x) => x.index === index);
    lines.push(`GPU ${index}${g?.uuid ? ` ${g.uuid}` : ''}${g?.pci ? ` (${g.pci})` : ''}:`);
    for (const c of checks) lines.push(row(c, c.message.startsWith(`GPU ${index}`)));
  }
  lines.push(`Summary: ${summary.ok} ok, ${summary.fail} failing, ${summary.skip} skipped`);
  return `${lines.join('\n')}\n`;
}
