/** Networking checks for the work queue. */
import { execBounded, type ExecFn } from '../../sources/host/exec.ts';
import { Consecutive, settle, type HostCheck } from '../host-check.ts';
import { checkDns, checkEna, checkInterfaces, checkRdma, checkSysctl, EnaBuckets } from './checks.ts';
import { networkingConfigSchema, type NetworkingConfig } from './config.ts';
import { polledMonitor } from '../module.ts';
import { apiServerHost, lookupHost, readEthtool, readLinks, readRdmaPorts, readSysctl, type LookupFn } from './read.ts';
import { UserRegex } from '../../config/regex.ts';

export { ENA_COUNTERS, networkingConfigSchema, type EnaCounter, type NetworkingConfig } from './config.ts';

export interface NetworkingDeps {
  exec: ExecFn;
  lookup: LookupFn;
  env: NodeJS.ProcessEnv;
}

/** The networking checks: interfaces, sysctls, ENA allowances, RDMA ports, DNS. */
export const networkingMonitor = polledMonitor({
  name: 'networking',
  schema: networkingConfigSchema,
  condition: 'NetworkingReady',
  unknownReason: 'NetworkingChecksUnavailable',
  create: (section, deps) => networkingChecks(section, deps),
});

export function networkingChecks(cfg: NetworkingConfig, deps: Partial<NetworkingDeps> = {}): HostCheck[] {
  const exec = deps.exec ?? execBounded;
  const lookup = deps.lookup ?? lookupHost;
  const env = deps.env ?? process.env;
  const excluded = cfg.excludedInterfaces.map((s) => UserRegex.compile(s));
  const c = cfg.checks;
  const checks: HostCheck[] = [];
  if (c.interfaces.enabled) {
    const streak = new Consecutive(cfg.consecutivePolls);
    checks.push({
      name: 'networking.interfaces',
      ...c.interfaces,
      run: (ctx) => settle(() => checkInterfaces(readLinks(ctx.root), streak, excluded, ctx.now)),
    });
  }
  if (c.sysctl.enabled) {
    checks.push({ name: 'networking.sysctl', ...c.sysctl, run: (ctx) => settle(() => checkSysctl(readSysctl(ctx.root), cfg, ctx.now)) });
  }
  if (c.ena.enabled) {
    const prev = new Map<string, { at: number; stats: Record<string, number> }>();
    const buckets = new EnaBuckets();
    checks.push({
      name: 'networking.ena',
      ...c.ena,
      run: async (ctx) => {
        const enas = readLinks(ctx.root).filter((l) => l.driver === 'ena');
        if (enas.length === 0) return { findings: [], healthy: [], status: 'skipped' };
        const report = { findings: [], healthy: [] } as ReturnType<typeof checkEna>;
        for (const l of enas) {
          const stats = await readEthtool(exec, cfg.ena.ethtool, l.name, cfg.ena.timeout, ctx.signal);
          if (!stats) continue;
          const before = prev.get(l.name);
          prev.set(l.name, { at: ctx.now, stats });
          const r = checkEna(l.name, before?.stats, stats, buckets, before ? ctx.now - before.at : 0, cfg, ctx.now);
          report.findings.push(...r.findings);
          report.healthy.push(...r.healthy);
        }
        return report;
      },
    });
  }
  if (c.rdma.enabled) {
    const streak = new Consecutive(cfg.consecutivePolls);
    const prev = new Map<string, Record<string, number>>();
    const excludedPorts = cfg.rdma.excludedPorts.map((s) => UserRegex.compile(s));
    const counters = Object.keys(cfg.rdma.errorCounters);
    checks.push({
      name: 'networking.rdma',
      ...c.rdma,
      run: async (ctx) => {
        const ports = await readRdmaPorts(ctx.root, counters, excludedPorts, ctx.signal);
        if (ports.length === 0) return { findings: [], healthy: [], status: 'skipped' };
        return checkRdma(ports, prev, streak, cfg, ctx.now);
      },
    });
  }
  if (c.dns.enabled) {
    checks.push({
      name: 'networking.dns',
      ...c.dns,
      run: async (ctx) => {
        const host = apiServerHost(ctx.root, cfg.dns.host, cfg.dns.kubeconfigPaths, env);
        if (!host) return { findings: [], healthy: [], status: 'skipped' };
        let error: string | undefined;
        for (let i = 0; i < cfg.dns.attempts; i++) {
          error = await lookup(host, cfg.dns.timeout);
          if (error === undefined || ctx.signal.aborted) break;
        }
        return checkDns(host, error, ctx.now);
      },
    });
  }
  return checks;
}
