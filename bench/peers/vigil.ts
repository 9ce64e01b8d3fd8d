/**
 * Vigil as bench:compare runs it: the real `vigil run` (bin/vigil.js) in Kubernetes mode with its
 * own Node, and `vigil scan` for throughput.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, type AgentProcess, kubeAgentArgs } from '../../test/helpers/agent-process.ts';

/** Vigil's condition for a Fatal Xid (catalog: NvidiaXID79Error). */
export const VIGIL_XID_CONDITION = 'AcceleratedHardwareReady';

export interface VigilRunOptions {
  dir: string;
  name: string;
  kubeconfig: string;
  nodeName: string;
  /** 'live': reads /dev/kmsg from now on (lookback 0), host checks and NVML off, as the Kubernetes tests run it.
   *  'idle': every default monitor, the kernel log read from `kernelLogPath` (a FIFO nobody writes). */
  mode: { kind: 'live' } | { kind: 'idle'; kernelLogPath: string };
}

export async function startVigilAgent(o: VigilRunOptions): Promise<AgentProcess> {
  const config = path.join(o.dir, `${o.name}.yaml`);
  const text =
    o.mode.kind === 'live'
      ? kernelLogOnlyConfig(['kubernetes:', '  mode: "on"'])
      : ['kernelLog:', `  path: ${o.mode.kernelLogPath}`, 'kubernetes:', '  mode: "on"', ''].join('\n');
  writeFileSync(config, text);
  return startAgent(kubeAgentArgs(o.kubeconfig, o.nodeName, path.join(o.dir, `${o.name}-state`), config));
}

/** Sum of every sample of the named metric in a Prometheus text exposition. */
export function metricSum(text: string, name: string): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
    if (m?.[1] === name) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}
