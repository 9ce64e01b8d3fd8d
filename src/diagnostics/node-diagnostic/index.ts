/**
 * Starts diagnostics beside a running agent: the NodeDiagnostic watch (with Kubernetes) and the
 * automatic capture on Fatal findings (when configured). Returns undefined when neither is on.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Engine } from '../../engine/engine.ts';
import type { VigilConfig } from '../../config/load.ts';
import type { EventRecorder } from '../../sinks/kubernetes/events.ts';
import { DiagnosticsController } from './controller.ts';

export { DiagnosticsController };

export interface StartDiagnosticsOptions {
  config: VigilConfig;
  configPath?: string;
  log: Logger;
  registry: Registry;
  engine: Engine;
  nodeName: string;
  /** Where the agent serves (bundles kept on the node are fetched there through the node proxy). */
  listen: { address: string; port: number };
  /** Set when the Kubernetes sink is on. */
  kube?: { kubeconfig?: string; events?: EventRecorder };
}

export async function startDiagnostics(o: StartDiagnosticsOptions): Promise<DiagnosticsController | undefined> {
  const d = o.config.diagnostics;
  const requests = Boolean(o.kube) && d.requests.enabled;
  if (!requests && !d.autoCapture.enabled) return undefined;
  const clients = o.kube ? (await import('../../sinks/kubernetes/client.ts')).makeClients(o.kube.kubeconfig) : undefined;
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
  controller.start(o.listen);
  return controller;
}
