/**
 * Warnings (and condition transitions) become events.k8s.io/v1 Events on the Node. Repeats of one
 * (reason, entity) are aggregated into one Event series, creations are rate-limited per reason,
 * and every drop is counted. Event names are chosen here, so a retried create that already landed
 * comes back 409 and is not applied twice.
 */
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { EngineEvent } from '../../api/types.ts';
import { k8s, strategicMerge, toFailure, withTimeout, type KubeClients } from './client.ts';
import { Backoff } from './backoff.ts';
import { explainFailure } from './failures.ts';

export interface EventRecorderOptions {
  clients: KubeClients;
  nodeName: string;
  nodeUid?: () => string | undefined;
  namespace: string;
  log: Logger;
  registry: Registry;
  perReasonPerMinute: number;
  /** How often changed series counts are written. */
  seriesFlushMs?: number;
  /** A series not seen for this long is finished and forgotten. */
  seriesFinishMs?: number;
  maxQueue?: number;
  instance: string;
  now?: () => number;
}

interface Series {
  name: string;
  count: number;
  written: number;
  lastObserved: number;
  created: boolean;
}

type Op =
  | { kind: 'create'; series: Series; reason: string; note: string; type: 'Warning' | 'Normal'; at: number }
  | { kind: 'series'; series: Series };

const CONTROLLER = 'vigil.dev/node-health-agent';

export class EventRecorder {
  private readonly series = new Map<string, Series>();
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly queue: Op[] = [];
  private running = false;
  private stopped = false;
  private readonly backoff = new Backoff(500, 30_000);
  private readonly reported = new Set<number>();
  private readonly flushTimer: NodeJS.Timeout;
  private readonly now: () => number;
  private readonly m: { sent: Counter<'op' | 'result'>; dropped: Counter<'why'> };

  constructor(private readonly o: EventRecorderOptions) {
    this.now = o.now ?? Date.now;
    this.m = {
      sent: new Counter({ name: 'vigil_k8s_event_writes_total', help: 'Event writes by op (create, series) and result.', labelNames: ['op', 'result'], registers: [o.registry] }),
      dropped: new Counter({ name: 'vigil_k8s_events_dropped_total', help: 'Events not written, by why (rate_limited, queue_full, rejected).', labelNames: ['why'], registers: [o.registry] }),
    };
    this.flushTimer = setInterval(() => this.flushSeries(), o.seriesFlushMs ?? 30_000);
    this.flushTimer.unref();
  }

  handle(event: EngineEvent): void {
    if (this.stopped) return;
    if (event.kind === 'finding' && event.finding.severity === 'Warning') {
      const f = event.finding;
      this.observe(`${f.reason}|${f.entity}`, f.reason, `${f.entity ? `${f.entity}: ` : ''}${f.message}`, 'Warning', f.at);
    } else if (event.kind === 'repeat' && event.problem.severity === 'Warning') {
      const s = this.series.get(`${event.problem.reason}|${event.problem.entity}`);
      if (s) {
        s.count++;
        s.lastObserved = event.problem.lastSeen;
      }
    } else if (event.kind === 'condition') {
      const c = event.condition;
      // One Event per transition, so `kubectl describe node` tells the story.
      this.observe(`${c.name}|transition|${c.status}|${c.lastTransitionTime}`, c.reason, `${c.name} is ${c.status}: ${c.message}`, c.status === 'False' ? 'Warning' : 'Normal', this.now());
    }
  }

  private observe(key: string, reason: string, note: string, type: 'Warning' | 'Normal', at: number): void {
    const existing = this.series.get(key);
    if (existing && at - existing.lastObserved < (this.o.seriesFinishMs ?? 6 * 60_000)) {
      existing.count++;
      existing.lastObserved = at;
      return;
    }
    if (!this.take(reason)) {
      this.m.dropped.inc({ why: 'rate_limited' });
      return;
    }
    const s: Series = { name: `${this.o.nodeName}.${(BigInt(at) * 1_000_000n + BigInt(this.series.size)).toString(16)}`, count: 1, written: 1, lastObserved: at, created: false };
    this.series.set(key, s);
    this.enqueue({ kind: 'create', series: s, reason, note: note.length > 1024 ? `${note.slice(0, 1021)}...` : note, type, at });
  }

  /** Token bucket per reason: `perReasonPerMinute` creations a minute, with that as the burst. */
  private take(reason: string): boolean {
    const now = this.now();
    const cap = this.o.perReasonPerMinute;
    const b = this.buckets.get(reason) ?? { tokens: cap, at: now };
    b.tokens = Math.min(cap, b.tokens + ((now - b.at) / 60_000) * cap);
    b.at = now;
    this.buckets.set(reason, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  private flushSeries(): void {
    const now = this.now();
    for (const [key, s] of this.series) {
      if (s.created && s.count > s.written) this.enqueue({ kind: 'series', series: s });
      if (now - s.lastObserved > (this.o.seriesFinishMs ?? 6 * 60_000) && s.count === s.written) this.series.delete(key);
    }
  }

  /** Writes pending series counts now (tests and shutdown). */
  flush(): void {
    this.flushSeries();
  }

  private enqueue(op: Op): void {
    if (this.queue.length >= (this.o.maxQueue ?? 1000)) {
      this.m.dropped.inc({ why: 'queue_full' });
      return;
    }
    if (op.kind === 'series' && this.queue.some((q) => q.kind === 'series' && q.series === op.series)) return;
    this.queue.push(op);
    void this.drain();
  }

  get idle(): boolean {
    return this.queue.length === 0 && !this.running;
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    while (this.queue.length && !this.stopped) {
      const op = this.queue[0]!;
      try {
        await this.send(op);
        this.queue.shift();
        this.backoff.reset();
        this.reported.clear();
      } catch (err) {
        const f = toFailure(err);
        this.m.sent.inc({ op: op.kind, result: String(f.status) });
        if (f.status === 409 && op.kind === 'create') {
          op.series.created = true; // an earlier attempt landed
          this.queue.shift();
          continue;
        }
        if (f.status === 422 || f.status === 400 || (f.status === 404 && op.kind === 'series')) {
          this.m.dropped.inc({ why: 'rejected' });
          this.o.log.warn({ event: 'kubernetes', status: f.status }, `event write refused and dropped: ${f.message}`);
          this.queue.shift();
          continue;
        }
        if (!this.reported.has(f.status)) {
          this.reported.add(f.status);
          this.o.log.error({ event: 'kubernetes', status: f.status }, explainFailure('create events', this.o.nodeName, f));
        }
        await new Promise((r) => setTimeout(r, f.retryAfterMs ?? this.backoff.next()).unref());
      }
    }
    this.running = false;
  }

  private async send(op: Op): Promise<void> {
    const ns = this.o.namespace;
    if (op.kind === 'create') {
      const uid = this.o.nodeUid?.();
      const body: k8s.EventsV1Event = {
        metadata: { name: op.series.name, namespace: ns },
        eventTime: new k8s.V1MicroTime(op.at),
        type: op.type,
        reason: op.reason.slice(0, 128),
        note: op.note,
        action: 'Detected',
        reportingController: CONTROLLER,
        reportingInstance: this.o.instance.slice(0, 128),
        regarding: { kind: 'Node', apiVersion: 'v1', name: this.o.nodeName, ...(uid ? { uid } : {}) },
      };
      await withTimeout(this.o.clients.events.createNamespacedEvent({ namespace: ns, body }), 10_000, 'POST event');
      op.series.created = true;
      this.m.sent.inc({ op: 'create', result: 'ok' });
      return;
    }
    const s = op.series;
    const count = s.count;
    if (count < 2) return;
    await withTimeout(
      this.o.clients.events.patchNamespacedEvent(
        { name: s.name, namespace: ns, body: { series: { count, lastObservedTime: new Date(s.lastObserved).toISOString().replace('Z', '000Z') } } },
        strategicMerge(),
      ),
      10_000,
      'PATCH event series',
    );
    s.written = count;
    this.m.sent.inc({ op: 'series', result: 'ok' });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.flushTimer);
  }
}
