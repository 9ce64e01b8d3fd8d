/**
 * Finds out whether Kubernetes configuration is present and what this node is called, without
 * loading the Kubernetes client (which costs over a second of CPU at start-up).
 */
import { existsSync } from 'node:fs';
import os from 'node:os';

export const IN_CLUSTER_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** Whether Kubernetes configuration can be found without being told (used for `run` auto mode). */
export function kubeConfigAvailable(kubeconfig?: string): boolean {
  if (kubeconfig) return true;
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) return true;
  return Boolean(process.env.KUBECONFIG && existsSync(process.env.KUBECONFIG));
}

/** The node name: flag, then $NODE_NAME (Downward API), then the host name. */
export function resolveNodeName(flag?: string): string {
  return flag || process.env.NODE_NAME || os.hostname();
}
