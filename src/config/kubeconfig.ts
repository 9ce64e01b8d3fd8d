/**
 * A cheap check that a file is a kubeconfig, for the `kubernetes.kubeconfig` key and the
 * `--kubeconfig` flag, without loading the Kubernetes client (over a second of CPU). The client
 * itself accepts any YAML and fails later with an unrelated message.
 */
import { readFileSync, statSync } from 'node:fs';
import YAML from 'yaml';
import { errorMessage } from '../util/errors.ts';

/** Larger than any real kubeconfig; keeps a wrong path (a log, an image) from being read whole. */
const MAX_BYTES = 16 * 1024 * 1024;

/** Why `file` cannot be used as a kubeconfig, or undefined when it looks like one. */
export function kubeconfigProblem(file: string): string | undefined {
  let text: string;
  try {
    const st = statSync(file);
    if (!st.isFile()) return 'not a kubeconfig: not a regular file';
    if (st.size > MAX_BYTES) return `not a kubeconfig: larger than ${MAX_BYTES / 1024 / 1024} MiB`;
    text = readFileSync(file, 'utf8');
  } catch (err) {
    return `cannot read: ${errorMessage(err)}`;
  }
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch {
    return 'not a kubeconfig: not valid YAML';
  }
  const lists = ['clusters', 'contexts', 'users'] as const;
  const obj = typeof doc === 'object' && doc !== null && !Array.isArray(doc) ? (doc as Record<string, unknown>) : undefined;
  if (!obj || !lists.every((k) => Array.isArray(obj[k]))) {
    return 'not a kubeconfig: expected YAML with "clusters", "contexts" and "users" lists';
  }
  if ((obj.clusters as unknown[]).length === 0) return 'not a kubeconfig: it lists no cluster';
  return undefined;
}
