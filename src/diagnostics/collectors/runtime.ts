/**
 * runtime: the kubelet's and containerd's journals over a bounded span, their unit state, and
 * their configuration files (kubelet config, kubeconfigs, containerd config and registry hosts,
 * systemd drop-ins), all redacted like everything in the bundle. `includeFiles` adds a site's own.
 */
import path from 'node:path';
import { listDir, readFileSmall } from '../../sources/host/index.ts';
import { commandCollector, runCommands } from './common.ts';
import { MissingToolError, type Collector, type CollectorContext } from './types.ts';

/** Where kubelet and containerd keep configuration on kubeadm, EKS (AL2, AL2023, Bottlerocket-like) and GKE-style nodes. */
const CONFIG_FILES = [
  '/var/lib/kubelet/config.yaml',
  '/etc/kubernetes/kubelet/config.json',
  '/etc/kubernetes/kubelet/kubelet-config.json',
  '/etc/kubernetes/kubelet/config.json.d',
  '/etc/kubernetes/kubelet.conf',
  '/etc/kubernetes/bootstrap-kubelet.conf',
  '/var/lib/kubelet/kubeconfig',
  '/etc/eks/kubelet/environment',
  '/etc/default/kubelet',
  '/etc/sysconfig/kubelet',
  '/etc/systemd/system/kubelet.service',
  '/etc/systemd/system/kubelet.service.d',
  '/usr/lib/systemd/system/kubelet.service.d',
  '/etc/containerd/config.toml',
  '/etc/containerd/conf.d',
  '/etc/containerd/certs.d',
  '/etc/systemd/system/containerd.service.d',
  '/etc/nvidia-container-runtime/config.toml',
  '/etc/crictl.yaml',
];

/** Files under a directory, two levels deep (certs.d/<registry>/hosts.toml); certificates and keys are left out. */
function expand(ctx: CollectorContext, p: string, depth = 0): string[] {
  const entries = listDir(ctx.capture.hostRoot, p);
  if (!entries.length) return readFileSmall(ctx.host(p)) === undefined ? [] : [p];
  if (depth >= 2) return [];
  return entries
    .sort()
    .filter((e) => !/\.(?:pem|crt|cert|key)$/.test(e))
    .flatMap((e) => expand(ctx, path.posix.join(p, e), depth + 1));
}

function configFiles(ctx: CollectorContext): { text: string; found: string[] } {
  const found: string[] = [];
  const parts: string[] = [];
  for (const p of [...CONFIG_FILES.flatMap((f) => expand(ctx, f)), ...ctx.capture.includeFiles.flatMap((f) => expand(ctx, f))]) {
    const text = readFileSmall(ctx.host(p));
    if (text === undefined) continue;
    found.push(p);
    parts.push(`==> ${p} <==\n${text}${text.endsWith('\n') ? '' : '\n'}`);
  }
  return { text: parts.join('\n'), found };
}

function journal(unit: string): Collector {
  return {
    name: `runtime/${unit}-journal`,
    category: 'runtime',
    file: `runtime/${unit}.journal.log`,
    run: async (ctx) => {
      const since = Math.floor((Date.now() - ctx.capture.sinceMs) / 1000);
      const root = ctx.capture.hostRoot === '/' ? [] : ['--root', ctx.capture.hostRoot];
      const argv = ['journalctl', ...root, '--no-pager', '-q', '-o', 'short-iso-precise', '-u', unit, '--since', `@${since}`];
      try {
        return await runCommands(ctx, [argv]);
      } catch (err) {
        if (err instanceof MissingToolError) return { skipped: err.message };
        throw err;
      }
    },
  };
}

export function runtimeCollectors(): Collector[] {
  return [
    journal('kubelet'),
    journal('containerd'),
    commandCollector('runtime/units', 'runtime', 'runtime/units.txt', [
      ['systemctl', 'status', '--no-pager', '--lines=0', 'kubelet', 'containerd'],
    ]),
    commandCollector('runtime/containers', 'runtime', 'runtime/containers.txt', [['crictl', 'ps', '-a']]),
    {
      name: 'runtime/config-files',
      category: 'runtime',
      file: 'runtime/config-files.txt',
      run: (ctx) => {
        const { text, found } = configFiles(ctx);
        return Promise.resolve(
          found.length ? { data: text, note: found.join(', ') } : { skipped: 'no kubelet or containerd configuration found' },
        );
      },
    },
  ];
}
