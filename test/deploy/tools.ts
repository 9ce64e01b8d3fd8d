/**
 * The operator's tools for the deploy tests: helm v4 and kubectl, built from the Go module proxy by
 * test/cluster/build.sh and cached under .cache/ (built here on first use when missing).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CHART = path.join(ROOT, 'deploy/helm/vigil');

export function versionsVar(name: string): string {
  return execFileSync('bash', ['-c', `source test/cluster/versions.sh && printf %s "$${name}"`], { cwd: ROOT, encoding: 'utf8' });
}

export const HELM = versionsVar('HELM_BIN');
export const KUBECTL = versionsVar('KUBECTL_BIN');

/** Builds helm and kubectl if they are not cached yet (minutes on a cold Go cache). */
export function ensureTools(): void {
  if (existsSync(HELM) && existsSync(KUBECTL)) return;
  const r = spawnSync('bash', [path.join(ROOT, 'test/cluster/build.sh')], { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`test/cluster/build.sh failed:\n${r.stderr.slice(-4000)}`);
}

export interface Run {
  code: number | null;
  out: string;
  err: string;
}

export function run(cmd: string, args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv } = {}): Run {
  const r = spawnSync(cmd, args, {
    cwd: ROOT,
    encoding: 'utf8',
    input: opts.input,
    env: { ...process.env, ...opts.env },
    timeout: 120_000,
    maxBuffer: 64 << 20,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Fails with the tool's own output when it exits non-zero. */
export function ok(r: Run, what: string): string {
  if (r.code !== 0) throw new Error(`${what} exited ${r.code}:\n${r.err}\n${r.out.slice(-2000)}`);
  return r.out;
}

/** A rendered Kubernetes object; narrow it with `as<T>()` to the client's type for its kind. */
export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** One rendered object of a kind, typed as @kubernetes/client-node's model of that kind. */
export function only<T>(docs: Manifest[], kind: string): T {
  const found = docs.filter((d) => d.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, rendered ${found.length}`);
  return found[0] as unknown as T;
}

/** `helm template` of the chart with a values document; returns every rendered object. */
export function helmTemplate(values: Record<string, unknown> = {}, opts: { namespace?: string; release?: string } = {}): Manifest[] {
  const out = ok(
    run(HELM, ['template', opts.release ?? 'vigil', CHART, '--namespace', opts.namespace ?? 'vigil', '-f', '-'], {
      input: JSON.stringify(values),
    }),
    'helm template',
  );
  return YAML.parseAllDocuments(out)
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => Boolean(d?.kind));
}

/** The chart's values.yaml as an object. */
export function chartValues(): Record<string, unknown> {
  return YAML.parse(readFileSync(path.join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;
}
