/**
 * Diagnostics beside the agent: the NodeDiagnostic watch (with Kubernetes) and the automatic
 * capture on Fatal findings (when configured). Made before the agent starts, so a Fatal fault
 * found at start (the kernel log's lookback) is not missed; start() once the agent serves.
 * Returns undefined when neither is on.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Engine } from '../../engine/engine.ts';
import type { VigilConfig } from '../../config/load.ts';
import type { EventRecorder } from '../../sinks/kubernetes/events.ts';
// Type only: the controller (and with it the Kubernetes client, tens of MiB) loads only when on.
import type { DiagnosticsController } from './controller.ts';

export interface DiagnosticsOptions {
  config: VigilConfig;
  configPath?: string;
  log: Logger;
  registry: Registry;
  engine: Engine;
  nodeName: string;
  /** Set when the Kubernetes sink is on. */
  kube?: { kubeconfig?: string; events?: EventRecorder };
}

export async function createDiagnostics(o: DiagnosticsOptions): Promise<DiagnosticsController | undefined> {
  const d = o.config.diagnostics;
  const requests = Boolean(o.kube) && d.requests.enabled;
  if (!requests && !d.autoCapture.enabled) return undefined;
  const clients = o.kube ? (await import('../../sinks/kubernetes/client.ts')).makeClients(o.kube.kubeconfig) : undefined;
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
  o.engine.on((event) => controller.handle(event));
  return controller;
}
