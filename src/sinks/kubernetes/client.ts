/**
 * The only module that builds Kubernetes clients. Chooses in-cluster config or a kubeconfig, and
 * turns @kubernetes/client-node errors into plain {status, message} values the sink can act on.
 */
import { existsSync } from 'node:fs';
import * as k8s from '@kubernetes/client-node';
import { IN_CLUSTER_TOKEN } from './detect.ts';

export { kubeConfigAvailable, resolveNodeName } from './detect.ts';

export interface KubeClients {
  core: k8s.CoreV1Api;
  events: k8s.EventsV1Api;
  server: string;
}

export function makeClients(kubeconfig?: string): KubeClients {
  const kc = new k8s.KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else if (process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) kc.loadFromCluster();
  else kc.loadFromDefault();
  return { core: kc.makeApiClient(k8s.CoreV1Api), events: kc.makeApiClient(k8s.EventsV1Api), server: kc.getCurrentCluster()?.server ?? '' };
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
    } catch {
      /* body was not JSON */
    }
    const ra = Number(err.headers?.['retry-after']);
    return { status: err.code, message, ...(Number.isFinite(ra) && ra > 0 ? { retryAfterMs: ra * 1000 } : {}) };
  }
  return { status: 0, message: (err as Error)?.message ?? String(err) };
}

/**
 * Options for one request: an optional Content-Type (patches) and a deadline that really aborts
 * the request. Aborting matters: a timed-out write that lands later could overwrite a newer one.
 */
export function requestOptions(timeoutMs: number, contentType?: string): k8s.ConfigurationOptions {
  const signal = AbortSignal.timeout(timeoutMs);
  const middleware: k8s.ObservableMiddleware = {
    pre: (ctx) => {
      ctx.setSignal(signal);
      if (contentType) ctx.setHeaderParam('Content-Type', contentType);
      return new k8s.Observable(Promise.resolve(ctx));
    },
    post: (res) => new k8s.Observable(Promise.resolve(res)),
  };
  return { middleware: [middleware], middlewareMergeStrategy: 'append' };
}

/**
 * Runs one request with a deadline: `send` gets the request options to pass to the client. An
 * aborted request becomes a plain "timed out" error (status 0 for toFailure).
 */
export async function withDeadline<T>(
  ms: number,
  what: string,
  send: (opts: k8s.ConfigurationOptions) => Promise<T>,
  contentType?: string,
): Promise<T> {
  try {
    return await send(requestOptions(ms, contentType));
  } catch (err) {
    if ((err as Error)?.name === 'AbortError' || (err as Error)?.name === 'TimeoutError')
      throw new Error(`${what} timed out after ${ms} ms`);
    throw err;
  }
}

export const STRATEGIC_MERGE = k8s.PatchStrategy.StrategicMergePatch;
export { k8s };
