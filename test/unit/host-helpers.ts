/** Shared by the host-*.test.ts files: fixture roots, a context, a fake exec over captured outputs. */
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { CheckContext, CheckReport, HostCheck } from '../../src/monitors/index.ts';
import type { ExecFn } from '../../src/sources/index.ts';

export const FIXTURES = fileURLToPath(new URL('../fixtures/host/', import.meta.url));
export const fx = (scenario: string) => path.join(FIXTURES, scenario);

export const ctx = (root: string, now = 1_700_000_000_000): CheckContext => ({ root, signal: new AbortController().signal, now });

export function check(checks: HostCheck[], name: string): HostCheck {
  const c = checks.find((x) => x.name === name);
  if (!c) throw new Error(`no check ${name} in ${checks.map((x) => x.name).join(', ')}`);
  return c;
}

/** "Reason entity" for each finding, sorted. */
export const found = (r: CheckReport) => r.findings.map((f) => `${f.reason} ${f.entity}`.trim()).sort();
/** "Reason entity" for each healthy reason, sorted. */
export const cleared = (r: CheckReport) => r.healthy.flatMap((h) => h.reasons.map((x) => `${x} ${h.entity}`.trim())).sort();

/**
 * Serves spawned tools from <scenario>/exec/<file>: `ethtool -S eth0` → ethtool-S-eth0.txt,
 * `systemctl show ...` → systemctl-show.txt. `at.root` says which scenario is current.
 */
export function fakeExec(at: { root: string }, calls: string[][] = []): ExecFn {
  return (file, args) => {
    calls.push([file, ...args]);
    const name = path.basename(file) === 'systemctl' ? 'systemctl-show.txt' : `ethtool-S-${args[1]}.txt`;
    try {
      const stdout = readFileSync(path.join(at.root, 'exec', name), 'utf8');
      return Promise.resolve({ code: 0, stdout, stderr: '', truncated: false, timedOut: false });
    } catch {
      return Promise.resolve({ code: 1, stdout: '', stderr: `no fixture ${name}`, truncated: false, timedOut: false });
    }
  };
}

export { RecordingSink } from '../helpers/recording-sink.ts';
