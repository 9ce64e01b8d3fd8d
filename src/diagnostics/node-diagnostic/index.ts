/**
 * Diagnostics beside the agent: the NodeDiagnostic watch (with Kubernetes) and the automatic
 * capture on Fatal findings (when configured). Made before the agent starts, so a Fatal fault
 * found at start (the kernel log's lookback) is not missed; the root feeds it the engine's events
 * (through the agent's per-sink guard) and calls start() once the agent serves.
 * Returns undefined when neither is on.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { VigilConfig } from '../../settings/index.ts';
import type { KubeClients, NodeEventRecorder } from '../../kube/client.ts';
// Type only: the controller (and with it the Kubernetes client, tens of MiB) loads only when on.
import type { DiagnosticsController } from './controller.ts';

export interface DiagnosticsOptions {
  config: VigilConfig;
  configPath?: string;
  log: Logger;
  registry: Registry;
  nodeName: string;
  /** Set when the Kubernetes sink is on. */
  kube?: { clients: KubeClients; events?: NodeEventRecorder };
}

export async function createDiagnostics(o: DiagnosticsOptions): Promise<DiagnosticsController | undefined> {
  const d = o.config.diagnostics;
  const requests = Boolean(o.kube) && d.requests.enabled;
  if (!requests && !d.autoCapture.enabled) return undefined;
  const clients = o.kube?.clients;
  const { DiagnosticsController } = await import('./controller.ts');
  const controller = new DiagnosticsController({
    nodeName: o.nodeName,
    log: o.log,
    registry: o.registry,
    stateDir: o.config.stateDir,
    config: d,
    ...(o.configPath ? { configPath: o.configPath } : {}),
    ...(o.config.kernelLog.enabled ? { kernelLogPath: o.config.kernelLog.path } : {}),
    ...(clients ? { clients } : {}),
    ...(o.kube?.events ? { events: o.kube.events } : {}),
  });
  return controller;
}
