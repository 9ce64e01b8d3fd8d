/**
 * node-problem-detector (NPD), the peer of `npm run bench:compare`: builds it (build-npd.sh), writes
 * its system-log-monitor configs and runs it as a child process.
 *
 * Rules NPD gets: its own stock config/kernel-monitor.json and config/readonly-monitor.json, read
 * from the module the build downloaded (what the stock DaemonSet loads, less docker-monitor.json,
 * which needs the journald watcher), plus one file of NVIDIA Xid rules, since no GPU rules ship
 * with NPD: a temporary rule (an Event) for every Xid line, and a permanent rule that sets the
 * condition NvidiaXidFatal for the Xids Vigil treats as Fatal (the same list, DEFAULT_FATAL_XIDS).
 * Live runs read the kernel log through NPD's kmsg plugin; the throughput run gets the same rules
 * with the filelog plugin on a file.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_FATAL_XIDS } from '../../src/config/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const NPD_VERSION = process.env.VIGIL_NPD_VERSION ?? 'v1.34.0';
/** The condition NPD's Xid rule sets (permanent: it latches until NPD restarts). */
export const NPD_XID_CONDITION = 'NvidiaXidFatal';

/** Builds NPD once (cached under .cache/npd-bin) and returns the binary's path. */
export function buildNpd(): string {
  const out = execFileSync('bash', [path.join(ROOT, 'bench/peers/build-npd.sh')], {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

/** NPD's module folder in the Go module cache (build-npd.sh downloaded it there). */
function npdModuleDir(): string {
  const cache = process.env.VIGIL_CACHE_DIR ?? path.join(ROOT, '.cache');
  return path.join(cache, 'go/mod', `k8s.io/node-problem-detector@${NPD_VERSION}`);
}

interface NpdMonitorConfig {
  plugin: string;
  pluginConfig?: Record<string, string>;
  logPath: string;
  lookback: string;
  bufferSize: number;
  source: string;
  metricsReporting?: boolean;
  conditions: { type: string; reason: string; message: string }[];
  rules: { type: 'temporary' | 'permanent'; condition?: string; reason: string; pattern: string }[];
}

function stock(name: string): NpdMonitorConfig {
  return JSON.parse(readFileSync(path.join(npdModuleDir(), 'config', name), 'utf8')) as NpdMonitorConfig;
}

/**
 * NPD rules for NVIDIA Xid lines (`NVRM: Xid (PCI:0000:3b:00): 79, ...`). `onlyName` narrows them to
 * lines whose `name=` field is that string: the kernel ring is shared with other tests, whose Xid
 * lines would otherwise spend NPD's per-source Event budget (client-go's spam filter) and latch its
 * condition, so the live runs count only this bench's faults.
 */
export function xidMonitor(onlyName?: string): NpdMonitorConfig {
  const xid = String.raw`NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): `;
  const tail = onlyName ? String.raw`, pid=\d+, name=${onlyName},.*` : ',.*';
  return {
    plugin: 'kmsg',
    logPath: '/dev/kmsg',
    lookback: '5m',
    bufferSize: 10,
    source: 'nvidia-xid-monitor',
    metricsReporting: true,
    conditions: [{ type: NPD_XID_CONDITION, reason: 'NoFatalXid', message: 'no fatal NVIDIA Xid' }],
    rules: [
      { type: 'temporary', reason: 'NvidiaXid', pattern: `${xid}\\d+${tail}` },
      {
        type: 'permanent',
        condition: NPD_XID_CONDITION,
        reason: 'NvidiaXidFatal',
        pattern: `${xid}(?:${DEFAULT_FATAL_XIDS.join('|')})${tail}`,
      },
    ],
  };
}

/**
 * Writes NPD's three monitor configs into `dir` for a kmsg source (lookback 0: skip what is
 * already in the shared ring, other tests' faults) or a file source; returns their paths.
 * `extraRules` go into the Xid monitor (the throughput run's end marker).
 */
export function writeNpdConfigs(
  dir: string,
  source: { kind: 'kmsg'; onlyName?: string } | { kind: 'file'; path: string },
  extraRules: NpdMonitorConfig['rules'] = [],
): string[] {
  const monitors: [string, NpdMonitorConfig][] = [
    ['kernel-monitor.json', stock('kernel-monitor.json')],
    ['readonly-monitor.json', stock('readonly-monitor.json')],
    ['nvidia-xid-monitor.json', xidMonitor(source.kind === 'kmsg' ? source.onlyName : undefined)],
  ];
  monitors[2][1].rules.push(...extraRules);
  return monitors.map(([name, cfg]) => {
    const out: NpdMonitorConfig =
      source.kind === 'kmsg'
        ? { ...cfg, plugin: 'kmsg', logPath: '/dev/kmsg', lookback: '0s' }
        : {
            ...cfg,
            plugin: 'filelog',
            logPath: source.path,
            // The stock kernel-monitor-filelog.json's syslog format; a lookback longer than the uptime
            // keeps every line of the file (the corpus is stamped with the time it is written).
            pluginConfig: { timestamp: '^.{15}', message: String.raw`kernel: \[.*\] (.*)`, timestampFormat: 'Jan _2 15:04:05' },
            lookback: '87600h',
          };
    const file = path.join(dir, `${source.kind}-${name}`);
    writeFileSync(file, JSON.stringify(out, null, 2));
    return file;
  });
}

/**
 * One system-log-monitor config for a file (the per-pass throughput run, bench/throughput.ts): the
 * rules and conditions of the stock kernel-monitor.json and readonly-monitor.json (NPD's kernel-log
 * rules) and the Xid monitor's, plus `extraRules`, in ONE config, so NPD runs one file-log watcher
 * that parses each line once, as `vigil scan` does. Returns its path.
 */
export function writeNpdSingleFileConfig(dir: string, file: string, extraRules: NpdMonitorConfig['rules'] = []): string {
  const parts = [stock('kernel-monitor.json'), stock('readonly-monitor.json'), xidMonitor()];
  const cfg: NpdMonitorConfig = {
    ...parts[0],
    plugin: 'filelog',
    logPath: file,
    // As writeNpdConfigs' file source: the stock kernel-monitor-filelog.json's syslog format.
    pluginConfig: { timestamp: '^.{15}', message: String.raw`kernel: \[.*\] (.*)`, timestampFormat: 'Jan _2 15:04:05' },
    lookback: '87600h',
    conditions: parts.flatMap((p) => p.conditions),
    rules: [...parts.flatMap((p) => p.rules), ...extraRules],
  };
  const out = path.join(dir, 'file-single-monitor.json');
  writeFileSync(out, JSON.stringify(cfg, null, 2));
  return out;
}

export interface NpdProcess {
  child: ChildProcess;
  pid: number;
  /** stderr (klog) so far, line by line. */
  lines: string[];
  waitFor(pred: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  stop(): Promise<void>;
}

export interface NpdOptions {
  bin: string;
  configs: string[];
  /** Kubeconfig for the k8s exporter; none turns it off (throughput runs). */
  kubeconfig?: string;
  server?: string;
  nodeName: string;
  prometheusPort: number;
  /** Prefix for the command, e.g. ['taskset', '-c', '0']. */
  wrap?: string[];
}

export function startNpd(o: NpdOptions): NpdProcess {
  const args = [
    `--config.system-log-monitor=${o.configs.join(',')}`,
    '--port=0',
    `--prometheus-port=${o.prometheusPort}`,
    `--hostname-override=${o.nodeName}`,
  ];
  if (o.kubeconfig && o.server) {
    // NPD's URI form for an out-of-cluster apiserver: the kubeconfig rides in `auth`.
    args.push(`--apiserver-override=${o.server}?inClusterConfig=false&auth=${o.kubeconfig}`, '--event-namespace=default');
  } else {
    args.push('--enable-k8s-exporter=false');
  }
  const argv = [...(o.wrap ?? []), o.bin, ...args];
  const child = spawn(argv[0], argv.slice(1), { env: { ...process.env, NODE_NAME: o.nodeName }, stdio: ['ignore', 'ignore', 'pipe'] });
  const lines: string[] = [];
  const waiters: { pred: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  let buf = '';
  child.stderr.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      // Keep the tail only: a throughput run logs one line per matched record.
      lines.push(line);
      if (lines.length > 2000) lines.splice(0, 1000);
      for (const w of [...waiters]) {
        if (w.pred(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    pid: child.pid!,
    lines,
    waitFor(pred, timeoutMs = 30_000) {
      const hit = lines.find(pred);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const t = setTimeout(
          () => reject(new Error(`NPD: timed out waiting for a log line; last: ${lines.slice(-5).join(' | ')}`)),
          timeoutMs,
        );
        waiters.push({
          pred,
          resolve: (l) => {
            clearTimeout(t);
            resolve(l);
          },
        });
        void exited.then(() => {
          clearTimeout(t);
          reject(new Error(`NPD exited: ${lines.slice(-5).join(' | ')}`));
        });
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}
