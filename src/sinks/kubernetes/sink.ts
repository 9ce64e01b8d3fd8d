/**
 * The Kubernetes sink: conditions on the Node (nodes/status) and Events about it. On start it
 * adopts the Node's existing transition times for Vigil's types before writing anything.
 */
import os from 'node:os';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { EngineEvent, NodeHealth, Sink } from '../../api/types.ts';
import type { Engine } from '../../engine/engine.ts';
import type { KubeClients } from './client.ts';
import { ConditionWriter } from './conditions.ts';
import { EventRecorder } from './events.ts';

export interface KubernetesSinkOptions {
  clients: KubeClients;
  nodeName: string;
  log: Logger;
  registry: Registry;
  heartbeatMs: number;
  coalesceMs: number;
  eventNamespace: string;
  eventsPerReasonPerMinute: number;
  seriesFlushMs?: number;
  /** Types written by an earlier run that are no longer managed; removed from the Node on start. */
  staleTypes?: () => string[];
}

export class KubernetesSink implements Sink {
  readonly name = 'kubernetes';
  readonly conditions: ConditionWriter;
  readonly events: EventRecorder;
  private started = false;
  private nodeUid: string | undefined;

  constructor(private readonly o: KubernetesSinkOptions) {
    this.conditions = new ConditionWriter({
      clients: o.clients, nodeName: o.nodeName, log: o.log, registry: o.registry,
      coalesceMs: o.coalesceMs, heartbeatMs: o.heartbeatMs,
      ...(o.staleTypes ? { staleTypes: o.staleTypes } : {}),
    });
    this.events = new EventRecorder({
      clients: o.clients, nodeName: o.nodeName, namespace: o.eventNamespace, log: o.log, registry: o.registry,
      perReasonPerMinute: o.eventsPerReasonPerMinute, instance: `vigil-${os.hostname()}`,
      nodeUid: () => this.nodeUid,
      ...(o.seriesFlushMs ? { seriesFlushMs: o.seriesFlushMs } : {}),
    });
  }

  /**
   * Reads the Node, lets the engine adopt existing transition times, then starts writing. Runs in
   * the background: an unreachable API server must not hold up detection.
   */
  async start(engine: Engine): Promise<void> {
    const names = engine.health().conditions.map((c) => c.name);
    const existing = await this.conditions.readExisting(names);
    const byName = new Map(engine.health().conditions.map((c) => [c.name, c.type]));
    engine.adoptConditions(existing.map((c) => ({ ...c, type: byName.get(c.type) ?? c.type })));
    this.started = true;
    this.conditions.start(engine.health());
    this.o.log.info({ event: 'kubernetes', node: this.o.nodeName, adopted: existing.length }, 'writing node conditions');
  }

  setNodeUid(uid: string | undefined): void {
    this.nodeUid = uid;
  }

  handle(event: EngineEvent, health: NodeHealth): void {
    this.events.handle(event);
    if (this.started && event.kind !== 'repeat') this.conditions.update(health);
  }

  async close(): Promise<void> {
    await this.conditions.stop();
    await this.events.stop();
  }
}
