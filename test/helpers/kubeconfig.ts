/**
 * Kubeconfig files for the API client's tests against a loopback server, and an exec-plugin user
 * whose token is read from a file on every apply (its credential is already expired, so
 * client-node runs the plugin each time).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';

type Cleanup = { after(fn: () => unknown): void };

/** Writes a kubeconfig for `server` with `user`; removed after the test. */
export function writeKubeconfig(t: Cleanup, server: string, user: object): { file: string; dir: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-kc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'kubeconfig');
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    }),
  );
  return { file, dir };
}

/** A kubeconfig user whose token is the content of `tokenFile` at each apply. */
export function tokenFileExecUser(tokenFile: string): object {
  const credential = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}`;
  return {
    exec: {
      apiVersion: 'client.authentication.k8s.io/v1',
      command: '/bin/sh',
      args: ['-c', `printf '${credential}' "$(cat ${tokenFile})"`],
      interactiveMode: 'Never',
    },
  };
}
