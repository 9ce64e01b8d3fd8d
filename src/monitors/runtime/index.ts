/** Container-runtime checks for the work queue. */
import { execBounded, type ExecFn } from '../../sources/host/exec.ts';
import type { HostCheck } from '../host-check.ts';
import { checkContainerd, checkKubelet, checkUnits } from './checks.ts';
import { runtimeConfigSchema, type RuntimeConfig } from './config.ts';
import { polledMonitor } from '../module.ts';
import { hasSystemd, probeContainerd, probeKubelet, readUnits } from './read.ts';

export { runtimeConfigSchema, type RuntimeConfig } from './config.ts';

/** The container-runtime checks: kubelet, containerd, systemd units. */
export const runtimeMonitor = polledMonitor({
  name: 'runtime',
  schema: runtimeConfigSchema,
  condition: 'ContainerRuntimeReady',
  unknownReason: 'ContainerRuntimeChecksUnavailable',
  create: (section, deps) => runtimeChecks(section, deps),
});

export function runtimeChecks(cfg: RuntimeConfig, deps: { exec?: ExecFn } = {}): HostCheck[] {
  const exec = deps.exec ?? execBounded;
  const c = cfg.checks;
  const checks: HostCheck[] = [];
  if (c.kubelet.enabled) {
    checks.push({
      name: 'runtime.kubelet',
      ...c.kubelet,
      run: async (ctx) =>
        checkKubelet(await probeKubelet(cfg.kubelet.healthzUrl, cfg.kubelet.timeout, ctx.signal), cfg.kubelet.required, ctx.now),
    });
  }
  if (c.containerd.enabled) {
    checks.push({
      name: 'runtime.containerd',
      ...c.containerd,
      run: async (ctx) =>
        checkContainerd(
          await probeContainerd(ctx.root, cfg.containerd.socket, cfg.containerd.timeout, ctx.signal),
          cfg.containerd.required,
          ctx.now,
        ),
    });
  }
  if (c.units.enabled) {
    const prev = new Map<string, number>();
    checks.push({
      name: 'runtime.units',
      ...c.units,
      run: async (ctx) => {
        if (!hasSystemd(ctx.root)) return { findings: [], healthy: [], status: 'skipped' };
        const units = await readUnits(exec, cfg.units.systemctl, ctx.root, cfg.units.names, cfg.units.timeout, ctx.signal);
        return checkUnits(units, prev, cfg, ctx.now);
      },
    });
  }
  return checks;
}
