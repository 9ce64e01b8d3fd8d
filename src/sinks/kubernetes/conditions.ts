/**
 * Writes Vigil's condition types to its own Node through `nodes/<name>/status` with a strategic
 * merge patch keyed by type, so kubelet's Ready and other writers' conditions are never touched.
 * The desired state is always the engine's latest view: after an outage one write converges.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ConditionState, NodeHealth } from '../../api/types.ts';
import { strategicMerge, toFailure, withTimeout, type ApiFailure, type KubeClients } from './client.ts';
import { Backoff } from './backoff.ts';
import { explainFailure } from './failures.ts';

export interface ConditionWriterOptions {
  clients: KubeClients;
  nodeName: string;
  log: Logger;
  registry: Registry;
  /** Changes within this window go out together. */
  coalesceMs: number;
  /** Re-write period when nothing changed; 0 disables. */
  heartbeatMs: number;
  requestTimeoutMs?: number;
  /** Condition types a previous run wrote that are no longer managed: removed on start. */
  staleTypes?: () => string[];
  now?: () => number;
}

interface Written {
  status: string;
  reason: string;
  message: string;
  lastTransitionTime: string;
}

export class ConditionWriter {
  private desired: ConditionState[] = [];
  private written = new Map<string, Written>();
  private timer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private inFlight = false;
  private pendingDeletes: string[] = [];
  private readonly backoff = new Backoff(500, 30_000);
  private readonly reported = new Set<string>();
  private stopped = false;
  private readonly m: { writes: Counter<'result'>; pendingGauge: Gauge };
  private readonly now: () => number;

  constructor(private readonly o: ConditionWriterOptions) {
    this.now = o.now ?? Date.now;
    this.m = {
      writes: new Counter({ name: 'vigil_k8s_condition_writes_total', help: 'Condition patches sent to the API server, by result (ok or HTTP status, 0 = unreachable).', labelNames: ['result'], registers: [o.registry] }),
      pendingGauge: new Gauge({ name: 'vigil_k8s_conditions_pending', help: '1 while the Node does not yet show the engine\'s latest conditions.', registers: [o.registry] }),
    };
  }

  /**
   * Reads the Node so a restart keeps the repair clock: returns the existing conditions of the
   * given types for the engine to adopt. Retries until the API server answers or stop().
   */
  async readExisting(types: string[]): Promise<{ type: string; status: string; lastTransitionTime?: string }[]> {
    for (;;) {
      try {
        const node = await withTimeout(this.o.clients.core.readNode({ name: this.o.nodeName }), this.o.requestTimeoutMs ?? 10_000, 'GET node');
        const conds = node.status?.conditions ?? [];
        const out = conds.filter((c) => types.includes(c.type)).map((c) => ({
          type: c.type, status: c.status,
          ...(c.lastTransitionTime ? { lastTransitionTime: new Date(c.lastTransitionTime).toISOString() } : {}),
        }));
        for (const c of out) this.written.set(c.type, { status: c.status, reason: '', message: '', lastTransitionTime: c.lastTransitionTime ?? '' });
        this.pendingDeletes = (this.o.staleTypes?.() ?? []).filter((t) => conds.some((c) => c.type === t));
        this.backoff.reset();
        return out;
      } catch (err) {
        const f = toFailure(err);
        this.report('read', f);
        if (this.stopped) return [];
        await sleep(f.retryAfterMs ?? this.backoff.next());
      }
    }
  }

  /** Starts heartbeats and writes the initial state. */
  start(health: NodeHealth): void {
    this.update(health);
    if (this.o.heartbeatMs > 0) {
      this.heartbeatTimer = setInterval(() => this.flush(true), this.o.heartbeatMs);
      this.heartbeatTimer.unref();
    }
  }

  /** Takes the engine's latest view; schedules a write only if something Kubernetes shows changed. */
  update(health: NodeHealth): void {
    this.desired = health.conditions;
    if (this.dirty().length || this.pendingDeletes.length) this.schedule(this.o.coalesceMs);
  }

  /** Whether the Node shows the latest state (for tests and /healthz). */
  get synced(): boolean {
    return this.dirty().length === 0 && this.pendingDeletes.length === 0 && !this.inFlight;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.heartbeatTimer);
  }

  private dirty(): ConditionState[] {
    return this.desired.filter((c) => {
      const w = this.written.get(c.name);
      return !w || w.status !== c.status || w.reason !== c.reason || w.message !== c.message || w.lastTransitionTime !== c.lastTransitionTime;
    });
  }

  private schedule(ms: number): void {
    if (this.timer || this.stopped) return;
    this.m.pendingGauge.set(1);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush(false);
    }, ms);
  }

  private async flush(heartbeat: boolean): Promise<void> {
    if (this.inFlight || this.stopped) return;
    const changed = heartbeat ? this.desired : this.dirty();
    if (changed.length === 0 && this.pendingDeletes.length === 0) {
      this.m.pendingGauge.set(0);
      return;
    }
    const heartbeatTime = new Date(Math.floor(this.now() / 1000) * 1000).toISOString();
    const deletes = [...this.pendingDeletes];
    const body = {
      status: {
        conditions: [
          ...changed.map((c) => ({
            type: c.name, status: c.status, reason: c.reason, message: c.message,
            lastTransitionTime: c.lastTransitionTime, lastHeartbeatTime: heartbeatTime,
          })),
          ...deletes.map((type) => ({ type, $patch: 'delete' })),
        ],
      },
    };
    this.inFlight = true;
    try {
      await withTimeout(
        this.o.clients.core.patchNodeStatus({ name: this.o.nodeName, body }, strategicMerge()),
        this.o.requestTimeoutMs ?? 10_000,
        'PATCH nodes/status',
      );
      for (const c of changed) this.written.set(c.name, { status: c.status, reason: c.reason, message: c.message, lastTransitionTime: c.lastTransitionTime });
      this.pendingDeletes = this.pendingDeletes.filter((t) => !deletes.includes(t));
      this.m.writes.inc({ result: 'ok' });
      if (this.reported.size) this.o.log.info({ event: 'kubernetes', node: this.o.nodeName }, 'node conditions written again after failures');
      this.reported.clear();
      this.backoff.reset();
    } catch (err) {
      const f = toFailure(err);
      this.m.writes.inc({ result: String(f.status) });
      this.report('patch', f);
      this.inFlight = false;
      // Keep the desired state; the next attempt writes whatever is latest then.
      this.schedule(f.retryAfterMs ?? this.backoff.next());
      return;
    }
    this.inFlight = false;
    if (this.dirty().length || this.pendingDeletes.length) this.schedule(this.o.coalesceMs);
    else this.m.pendingGauge.set(0);
  }

  /** Logs a failure once per kind until a write succeeds again, so an outage is one line, not thousands. */
  private report(op: 'read' | 'patch', f: ApiFailure): void {
    const key = `${op}:${f.status}`;
    if (this.reported.has(key)) return;
    this.reported.add(key);
    this.o.log.error({ event: 'kubernetes', op, status: f.status, node: this.o.nodeName }, explainFailure(op === 'read' ? 'get nodes' : 'patch nodes/status', this.o.nodeName, f));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
