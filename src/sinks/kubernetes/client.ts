/**
 * The only module that builds Kubernetes clients. Chooses in-cluster config or a kubeconfig, and
 * turns @kubernetes/client-node errors into plain {status, message} values the sink can act on.
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import * as k8s from '@kubernetes/client-node';

export interface KubeClients {
  core: k8s.CoreV1Api;
  events: k8s.EventsV1Api;
  server: string;
}

const IN_CLUSTER_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** Whether Kubernetes configuration can be found without being told (used for `run` auto mode). */
export function kubeConfigAvailable(kubeconfig?: string): boolean {
  if (kubeconfig) return true;
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) return true;
  return Boolean(process.env.KUBECONFIG && existsSync(process.env.KUBECONFIG));
}

export function makeClients(kubeconfig?: string): KubeClients {
  const kc = new k8s.KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else if (process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) kc.loadFromCluster();
  else kc.loadFromDefault();
  return { core: kc.makeApiClient(k8s.CoreV1Api), events: kc.makeApiClient(k8s.EventsV1Api), server: kc.getCurrentCluster()?.server ?? '' };
}

/** The node name: flag, then $NODE_NAME (Downward API), then the host name. */
export function resolveNodeName(flag?: string): string {
  return flag || process.env.NODE_NAME || os.hostname();
}

export interface ApiFailure {
  /** HTTP status, or 0 when the server could not be reached or timed out. */
  status: number;
  message: string;
  retryAfterMs?: number;
}

export function toFailure(err: unknown): ApiFailure {
  if (err instanceof k8s.ApiException) {
    let message = String(err.message);
    try {
      const body = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
      if (body?.message) message = body.message;
    } catch { /* body was not JSON */ }
    const ra = Number(err.headers?.['retry-after']);
    return { status: err.code, message, ...(Number.isFinite(ra) && ra > 0 ? { retryAfterMs: ra * 1000 } : {}) };
  }
  return { status: 0, message: (err as Error)?.message ?? String(err) };
}

/** Races a request against a timeout; the writes it guards are idempotent, so a late reply is harmless. */
export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export const strategicMerge = () => k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch);
export { k8s };
