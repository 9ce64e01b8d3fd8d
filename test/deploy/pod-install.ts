/**
 * Installing the chart as the README says, from a registry: publish the image and chart
 * (test/deploy/publish.sh), then the README's Deploy command with only the registry changed.
 * Used by test/deploy/kubelet.test.ts and bench/pod.ts.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { HELM, ROOT } from './tools.ts';
import { tempDir } from '../helpers/temp-dir.ts';

/** What test/deploy/publish.sh prints. */
export interface Published {
  image: string;
  /** The architectures pushed, space-separated: one image, or a manifest list naming each. */
  arches: string;
  digest: string;
  chart: string;
  chartVersion: string;
  appVersion: string;
  built: boolean;
  buildSeconds: number;
  pushSeconds: number;
}

/**
 * Builds (or reuses) the image, pushes it and the packaged chart to `registry` (host:port, plain HTTP).
 * With several `arches`, the image tag is a manifest list naming each architecture's image.
 */
export function publish(registry: string, arches: readonly string[] = ['amd64']): Published {
  const r = spawnSync('bash', [path.join(ROOT, 'test/deploy/publish.sh'), registry], {
    cwd: ROOT,
    env: { ...process.env, VIGIL_IMAGE_ARCHES: arches.join(' ') },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    timeout: 60 * 60_000,
  });
  if (r.status !== 0) throw new Error(`publish.sh exited ${r.status}:\n${r.stderr.slice(-6000)}`);
  return JSON.parse(r.stdout) as Published;
}

export const PUBLISHED_PREFIX = 'ghcr.io/vigil-dev';

/** The helm command of the README's install block (between `<!-- install:start -->` and `<!-- install:end -->`), as words. */
export function readmeInstallCommand(): string[] {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const block = /<!-- install:start -->([\s\S]*?)<!-- install:end -->/.exec(readme)?.[1];
  if (!block) throw new Error('README.md has no <!-- install:start --> ... <!-- install:end --> block');
  const code = /```(?:sh|bash|console)?\n([\s\S]*?)```/.exec(block)?.[1];
  if (!code) throw new Error('the README install block has no fenced code');
  const lines = code.replace(/\\\n/g, ' ').split('\n');
  const helm = lines.map((l) => l.replace(/#.*$/, '').trim()).find((l) => l.startsWith('helm install '));
  if (!helm) throw new Error(`no \`helm install\` line in the README install block:\n${code}`);
  return (helm.match(/"[^"]*"|'[^']*'|\S+/g) ?? []).map((w) => w.replace(/^(["'])(.*)\1$/, '$2'));
}

/**
 * The README's install command for a local registry: `ghcr.io/vigil-dev` becomes `REGISTRY/vigil-dev`
 * and `--plain-http` is added (helm needs it for plain HTTP on loopback); nothing else changes.
 * Returns helm's arguments (without `helm`).
 */
export function installArgs(registry: string): string[] {
  const words = readmeInstallCommand();
  if (words[0] !== 'helm') throw new Error(`the README install command starts with ${words[0]}, not helm`);
  return [...words.slice(1).map((w) => w.replaceAll(PUBLISHED_PREFIX, `${registry}/vigil-dev`)), '--plain-http'];
}

export interface HelmResult {
  code: number | null;
  out: string;
  err: string;
}

/** Runs helm against a cluster, with its configuration and cache in a directory of its own. */
export function helmOn(kubeconfig: string, args: string[], timeoutMs = 300_000): HelmResult {
  helmHome ??= tempDir('vigil-helm-');
  const home = helmHome;
  const r = spawnSync(HELM, args, {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: timeoutMs,
    maxBuffer: 64 << 20,
    env: {
      ...process.env,
      KUBECONFIG: kubeconfig,
      HELM_CONFIG_HOME: path.join(home, 'config'),
      HELM_CACHE_HOME: path.join(home, 'cache'),
      HELM_DATA_HOME: path.join(home, 'data'),
    },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
let helmHome: string | undefined;

/** helmOn, failing with helm's own output when it exits non-zero. */
export function helmOk(kubeconfig: string, args: string[], timeoutMs?: number): string {
  const r = helmOn(kubeconfig, args, timeoutMs);
  if (r.code !== 0) throw new Error(`helm ${args.join(' ')} exited ${r.code}:\n${r.err}\n${r.out.slice(-2000)}`);
  return r.out;
}

/** The chart's default state hostPath: the README's install puts the agent's state there on the host. */
export const STATE_HOST_PATH = '/var/lib/vigil';
const STATE_MARKER = path.join(STATE_HOST_PATH, '.created-by-vigil-tests');

/**
 * Makes the host's /var/lib/vigil this process's: refuses one it did not make (an agent's real
 * state), clears a leftover of an earlier run (old faults on this boot would reappear on the new
 * Node), and leaves a marker. releaseStateDir() removes it again.
 */
export function claimStateDir(): void {
  if (existsSync(STATE_HOST_PATH)) {
    if (!existsSync(STATE_MARKER))
      throw new Error(`${STATE_HOST_PATH} exists and was not made by a test (no ${STATE_MARKER}); not touching it`);
    rmSync(STATE_HOST_PATH, { recursive: true, force: true });
  }
  mkdirSync(STATE_HOST_PATH, { recursive: true, mode: 0o755 });
  writeFileSync(STATE_MARKER, '');
}

export function releaseStateDir(): void {
  if (existsSync(STATE_MARKER)) rmSync(STATE_HOST_PATH, { recursive: true, force: true });
}

/** Files the agent keeps in the state hostPath (the marker aside). */
export function stateFiles(): string[] {
  return existsSync(STATE_HOST_PATH) ? readdirSync(STATE_HOST_PATH).filter((f) => f !== path.basename(STATE_MARKER)) : [];
}
