/**
 * Warnings (and condition transitions) become events.k8s.io/v1 Events on the Node. Repeats of one
 * (reason, entity) are aggregated into one Event series, creations are rate-limited per reason,
 * and every drop is counted. Event names are chosen here, so a retried create that already landed
 * comes back 409 and is not applied twice.
 *
 * This is the one place repeats fold into Events (the engine only decides what one problem is: its
 * reason and entity, e.g. AppCrash per program). A series is created once, then only its
 * series.count and lastObservedTime are patched; it lasts while repeats come less than
 * seriesFinishMs (6 min) apart, and the next occurrence after that starts a new Event.
 *
 * A Fatal finding is a newly failing part and is never dropped for the budget: one its reason's
 * bucket refuses joins a summary Event of that reason ("on 3 more entities: a, b, c"), one Event
 * for all that arrive while it waits to be sent, as many entities as fit in a note. Summary
 * Events have a bucket of their own (the same size) and gather for SUMMARY_GATHER_MS before they
 * are queued; when that bucket is spent too, the entities wait for its next token and go out
 * together then. So every distinct failing entity is named in an Event,
 * and at 1,000 of them the API server gets the budget's Events plus one per ~50 entities.
 */
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { EngineEvent } from '../../api/types.ts';
import * as k8s from '@kubernetes/client-node';
import { ApiPacer, REPORTING_CONTROLLER, STRATEGIC_MERGE, toFailure, type KubeClients, type NodeEventRecorder } from '../../kube/client.ts';
import { explainFailure } from '../../kube/failures.ts';

export interface EventRecorderOptions {
  clients: Pick<KubeClients, 'events'>;
  nodeName: string;
  nodeUid?: () => string | undefined;
  namespace: string;
  log: Logger;
  registry: Registry;
  perReasonPerMinute: number;
  /**
   * Fatal findings draw from a bucket of their own per reason (default 30 a minute): each is a
   * newly failing part (a repeat only counts in its series), rare, and what an operator must see
   * at once; a burst of Warnings cannot use it up, nor it theirs.
   */
  fatalPerReasonPerMinute?: number;
  /**
   * How often changed series counts are looked at, and the gap before a series' first count update
   * (a burst of repeats shows its size soon); later updates wait seriesRefreshMs, or until the
   * series finishes, so a Warning that persists costs about one write an hour, not one per repeat
   * window (client-go patches the Event on every repeat).
   */
  seriesFlushMs?: number;
  /** Longest gap between count updates of a continuing series (default 50 min: Events live 1 h). */
  seriesRefreshMs?: number;
  /** A series not seen for this long is finished and forgotten. */
  seriesFinishMs?: number;
  maxQueue?: number;
  instance: string;
  requestTimeoutMs?: number;
  retry?: { baseMs: number; maxMs: number };
  now?: () => number;
}

interface Series {
  key: string;
  /** Named in a summary Event, not an Event of its own: its repeats are counted, never written. */
  summarized?: boolean;
  name: string;
  /** Occurrences seen. */
  count: number;
  /** Occurrences the API server shows. */
  written: number;
  lastObserved: number;
  /** When the API server last got this series (create or count update), and the gap before the next update. */
  writtenAt: number;
  gapMs: number;
  created: boolean;
  /** The create was refused; nothing more is written for it. */
  failed: boolean;
}

type Op =
  | { kind: 'create'; series: Series; reason: string; note: string; type: 'Warning' | 'Normal'; at: number; summary?: Summary }
  | { kind: 'series'; series: Series };

/** A summary Event of Fatal findings over their reason's budget; open (takes more) until first sent. */
interface Summary {
  entities: string[];
  message: string;
  cap: number;
  /** Gathering: the timer that queues it; cleared once queued. */
  gather?: NodeJS.Timeout;
}

/**
 * How long a summary Event takes in more entities before it is queued: a burst's entities then
 * share a few Events (each draws a token) instead of one each while the API server is quick.
 */
const SUMMARY_GATHER_MS = 200;

/** Event creates queued at which a new failing entity joins a summary instead of queueing its own. */
const CREATE_BACKLOG = 8;

/** What a Fatal finding's create needs when its bucket is spent: it joins a summary instead. */
interface Overflow {
  entity: string;
  message: string;
}

/** Longest Event note (the API server allows 1 KiB). */
const MAX_NOTE = 1024;

export class EventRecorder implements NodeEventRecorder {
  private readonly series = new Map<string, Series>();
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  /** Per reason: the summary Event queued and not yet sent, which takes further entities. */
  private readonly openSummaries = new Map<string, Op & { kind: 'create' }>();
  /** Per reason: entities over both budgets, waiting for the summary bucket's next token. */
  private readonly waiting = new Map<string, { entities: string[]; message: string; cap: number; timer?: NodeJS.Timeout }>();
  private readonly queue: Op[] = [];
  private running = false;
  private current: Promise<void> | undefined;
  private stopped = false;
  private seq = 0;
  private readonly pacer: ApiPacer;
  private readonly reported = new Set<string>();
  private readonly flushTimer: NodeJS.Timeout;
  private readonly now: () => number;
  private readonly finishMs: number;
  private readonly flushMs: number;
  private readonly refreshMs: number;
  private readonly m: { sent: Counter<'op' | 'result'>; dropped: Counter<'why'>; summarized: Counter };

  constructor(private readonly o: EventRecorderOptions) {
    this.now = o.now ?? Date.now;
    this.finishMs = o.seriesFinishMs ?? 6 * 60_000;
    this.flushMs = o.seriesFlushMs ?? 30_000;
    this.refreshMs = Math.max(this.flushMs, o.seriesRefreshMs ?? 50 * 60_000);
    this.pacer = new ApiPacer(o.requestTimeoutMs ?? 10_000, { baseMs: o.retry?.baseMs ?? 500, maxMs: o.retry?.maxMs ?? 30_000 });
    this.m = {
      sent: new Counter({
        name: 'vigil_k8s_event_writes_total',
        help: 'Event writes by op (create, series, preflight: the dry-run create at start) and result.',
        labelNames: ['op', 'result'],
        registers: [o.registry],
      }),
      dropped: new Counter({
        name: 'vigil_k8s_events_dropped_total',
        help: 'Events not written, by why (rate_limited, queue_full, rejected).',
        labelNames: ['why'],
        registers: [o.registry],
      }),
      summarized: new Counter({
        name: 'vigil_k8s_event_entities_summarized_total',
        help: "Fatal findings over their reason's Event budget, named in a summary Event with others instead of one of their own.",
        registers: [o.registry],
      }),
    };
    // At 0 from the start: a dashboard then shows "none dropped", not "no data".
    for (const why of ['rate_limited', 'queue_full', 'rejected']) this.m.dropped.inc({ why }, 0);
    this.flushTimer = setInterval(() => this.flushSeries(), this.flushMs);
    this.flushTimer.unref();
  }

  handle(event: EngineEvent): void {
    if (this.stopped) return;
    // A Fatal finding is told at once too: its condition may already be False for another entity.
    if (event.kind === 'finding' && event.finding.severity !== 'Info') {
      const f = event.finding;
      const bucket = f.severity === 'Fatal' ? this.fatalBucket(f.reason, f.entity, f.message) : undefined;
      this.observe(`${f.reason}|${f.entity}`, f.reason, `${f.entity ? `${f.entity}: ` : ''}${f.message}`, 'Warning', f.at, bucket);
    } else if (event.kind === 'repeat' && event.problem.severity !== 'Info') {
      // The engine does not re-emit repeats inside its window (engine.repeatWindow); they still
      // count in the series. The series is this sink's alone: a repeat that finds none live (its
      // series finished while the engine's window, which may be configured longer, still ran)
      // starts one like a finding does, so every occurrence is counted or told. A series whose
      // create was refused is retried by the engine's next finding only, as before.
      const p = event.problem;
      if (this.series.get(`${p.reason}|${p.entity}`)?.failed) return;
      const bucket = p.severity === 'Fatal' ? this.fatalBucket(p.reason, p.entity, p.message) : undefined;
      this.observe(`${p.reason}|${p.entity}`, p.reason, `${p.entity ? `${p.entity}: ` : ''}${p.message}`, 'Warning', p.lastSeen, bucket);
    } else if (event.kind === 'condition') {
      const c = event.condition;
      // One Event per transition, so `kubectl describe node` tells the story.
      this.observe(
        `${c.name}|transition|${c.status}|${c.lastTransitionTime}`,
        c.reason,
        `${c.name} is ${c.status}: ${c.message}`,
        c.status === 'False' ? 'Warning' : 'Normal',
        this.now(),
      );
    }
  }

  /**
   * An Event from beside the engine (diagnostic captures): named, rate-limited per reason and
   * retried like the others, never aggregated into a series.
   */
  record(reason: string, note: string, type: 'Warning' | 'Normal' = 'Normal'): void {
    if (this.stopped) return;
    const at = this.now();
    this.observe(`${reason}|record|${at}|${this.seq}`, reason, note, type, at);
  }

  private fatalBucket(reason: string, entity: string, message: string): { key: string; perMinute: number; overflow: Overflow } {
    return { key: `fatal|${reason}`, perMinute: this.o.fatalPerReasonPerMinute ?? 30, overflow: { entity: entity || 'node', message } };
  }

  private observe(
    key: string,
    reason: string,
    note: string,
    type: 'Warning' | 'Normal',
    at: number,
    bucket: { key: string; perMinute: number; overflow?: Overflow } = { key: reason, perMinute: this.o.perReasonPerMinute },
  ): void {
    const existing = this.series.get(key);
    if (existing && !existing.failed && at - existing.lastObserved < this.finishMs) {
      existing.count++;
      existing.lastObserved = Math.max(existing.lastObserved, at);
      return;
    }
    // A finished series the flush timer has not reached yet gets its final count before the next
    // series of the same key takes its place.
    if (existing && !existing.failed && !existing.summarized && existing.count > existing.written)
      this.enqueue({ kind: 'series', series: existing });
    // A Fatal finding behind a backlog of Event creates would be told late by one of its own: it is
    // named in a summary with the others instead (one write for many), as over the budget.
    const backlog = bucket.overflow !== undefined && this.queue.filter((op) => op.kind === 'create').length >= CREATE_BACKLOG;
    if (backlog || !this.take(bucket.key, bucket.perMinute, at)) {
      if (bucket.overflow) {
        // Its repeats fold into a series of its own that is counted, never written.
        this.series.set(key, { ...this.newSeries(key, at), name: '', summarized: true });
        this.m.summarized.inc();
        this.overflow(reason, bucket.perMinute, bucket.overflow);
        return;
      }
      this.m.dropped.inc({ why: 'rate_limited' });
      return;
    }
    const s = this.newSeries(key, at);
    this.series.set(key, s);
    this.enqueue({
      kind: 'create',
      series: s,
      reason,
      note: note.length > MAX_NOTE ? `${note.slice(0, MAX_NOTE - 3)}...` : note,
      type,
      at,
    });
  }

  private newSeries(key: string, at: number): Series {
    // client-go's naming: <node>.<hex nanoseconds>; the sequence keeps names unique within a millisecond.
    const name = `${this.o.nodeName}.${(BigInt(at) * 1_000_000n + BigInt(this.seq++ % 1_000_000)).toString(16)}`;
    return {
      key,
      name,
      count: 1,
      written: 1,
      lastObserved: at,
      writtenAt: this.now(),
      gapMs: this.flushMs,
      created: false,
      failed: false,
    };
  }

  /**
   * A Fatal finding its reason's bucket refused: named in the reason's open summary Event if one
   * is queued and has room, else in a new one (from the summary bucket), else it waits for that
   * bucket's next token with the others that come meanwhile.
   */
  private overflow(reason: string, cap: number, o: Overflow): void {
    const open = this.openSummaries.get(reason);
    if (open?.summary && summaryNote(reason, { ...open.summary, entities: [...open.summary.entities, o.entity] }).length <= MAX_NOTE) {
      open.summary.entities.push(o.entity);
      open.note = summaryNote(reason, open.summary);
      return;
    }
    // A full one still gathering goes now.
    if (open?.summary?.gather) this.queueSummary(open);
    let w = this.waiting.get(reason);
    if (!w) this.waiting.set(reason, (w = { entities: [], message: o.message, cap }));
    w.entities.push(o.entity);
    if (!w.timer) this.releaseWaiting(reason);
  }

  /**
   * Turns waiting entities into summary Events while the summary bucket has tokens; else waits for
   * the next. `force` (shutdown): without tokens, so none is left untold.
   */
  private releaseWaiting(reason: string, force = false): void {
    const w = this.waiting.get(reason);
    if (!w || this.stopped) return;
    clearTimeout(w.timer);
    w.timer = undefined;
    while (w.entities.length) {
      const key = `fatal-summary|${reason}`;
      if (!this.take(key, w.cap, this.now()) && !force) {
        const tokens = this.buckets.get(key)?.tokens ?? 0;
        w.timer = setTimeout(() => this.releaseWaiting(reason), Math.max(1, ((1 - tokens) / w.cap) * 60_000));
        w.timer.unref();
        return;
      }
      const summary: Summary = { entities: [], message: w.message, cap: w.cap };
      // As many as fit in one note (at least one); the rest take the next summary.
      while (
        w.entities.length &&
        (summary.entities.length === 0 ||
          summaryNote(reason, { ...summary, entities: [...summary.entities, w.entities[0]] }).length <= MAX_NOTE)
      )
        summary.entities.push(w.entities.shift()!);
      const at = this.now();
      const op: Op & { kind: 'create' } = {
        kind: 'create',
        series: { ...this.newSeries(`${reason}|summary|${at}`, at), summarized: true },
        reason,
        note: summaryNote(reason, summary),
        type: 'Warning',
        at,
        summary,
      };
      this.openSummaries.set(reason, op);
      // Full: queued at once; else it gathers what comes in the next moments.
      if (w.entities.length) this.queueSummary(op);
      else {
        summary.gather = setTimeout(() => this.queueSummary(op), SUMMARY_GATHER_MS);
        summary.gather.unref();
      }
    }
    this.waiting.delete(reason);
  }

  /** Queues a summary Event; it takes in more entities until it is sent. */
  private queueSummary(op: Op & { kind: 'create' }): void {
    if (!op.summary) return;
    clearTimeout(op.summary.gather);
    op.summary.gather = undefined;
    if (!this.enqueue(op) && this.openSummaries.get(op.reason) === op) this.openSummaries.delete(op.reason);
  }

  /** Token bucket: `cap` creations a minute, with that as the burst. */
  private take(key: string, cap: number, at: number): boolean {
    const now = Math.max(at, this.now());
    const b = this.buckets.get(key) ?? { tokens: cap, at: now };
    b.tokens = Math.min(cap, b.tokens + (Math.max(0, now - b.at) / 60_000) * cap);
    b.at = now;
    this.buckets.set(key, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  private flushSeries(final = false): void {
    const now = this.now();
    for (const [key, s] of this.series) {
      const quiet = now - s.lastObserved > this.finishMs;
      // The short first gap shows a burst right after the create; a Warning that repeats slowly (a
      // check failing at every poll) waits out the long one, so it costs about one write an hour.
      if (s.created && s.count === s.written && s.gapMs < this.refreshMs && now - s.writtenAt >= s.gapMs) s.gapMs = this.refreshMs;
      // A finished series (or shutdown) gets its final count; a continuing one waits out its gap.
      const due = final || quiet || now - s.writtenAt >= s.gapMs;
      if (s.created && !s.failed && s.count > s.written && due) this.enqueue({ kind: 'series', series: s });
      // A finished series gets its final count written first (above), then is forgotten.
      if (quiet && (s.failed || s.summarized || (s.created && s.count === s.written))) this.series.delete(key);
    }
  }

  /** Writes pending series counts now (tests and shutdown). */
  flush(): void {
    this.flushSeries(true);
  }

  private enqueue(op: Op): boolean {
    if (op.kind === 'series' && this.queue.some((q) => q.kind === 'series' && q.series === op.series)) return false;
    if (this.queue.length >= (this.o.maxQueue ?? 1000)) {
      this.m.dropped.inc({ why: 'queue_full' });
      if (op.kind === 'create') op.series.failed = true;
      return false;
    }
    this.queue.push(op);
    void this.drain();
    return true;
  }

  /** Nothing queued, being sent, or gathering into a summary Event. */
  get idle(): boolean {
    return this.queue.length === 0 && !this.running && ![...this.openSummaries.values()].some((op) => op.summary?.gather);
  }

  /** Settles (never rejects) when the write now being sent is through; undefined when none is. */
  get sending(): Promise<void> | undefined {
    return this.current;
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    while (this.queue.length && !this.stopped) {
      const op = this.queue[0];
      // A summary is closed once sent: a retried create must carry what the first attempt did.
      if (op.kind === 'create' && op.summary && this.openSummaries.get(op.reason) === op) this.openSummaries.delete(op.reason);
      try {
        const sent = this.send(op);
        this.current = sent.then(
          () => {},
          () => {},
        );
        await sent;
        this.queue.shift();
        this.pacer.succeeded();
        this.reported.clear();
      } catch (err) {
        const f = toFailure(err);
        this.m.sent.inc({ op: op.kind, result: String(f.status) });
        if (f.status === 409 && op.kind === 'create') {
          op.series.created = true; // an earlier attempt landed
          this.queue.shift();
          continue;
        }
        if (f.status === 404 && op.kind === 'series') {
          // The Event expired (the API server keeps Events for an hour): the next occurrence starts a new one.
          if (this.series.get(op.series.key) === op.series) this.series.delete(op.series.key);
          this.queue.shift();
          continue;
        }
        if (f.status === 422 || f.status === 400) {
          this.m.dropped.inc({ why: 'rejected' });
          op.series.failed = true;
          this.o.log.warn({ event: 'kubernetes', status: f.status }, `event write refused and dropped: ${f.message}`);
          this.queue.shift();
          continue;
        }
        const what = op.kind === 'create' ? 'create events' : 'patch events';
        if (!this.reported.has(`${what}:${f.status}`)) {
          this.reported.add(`${what}:${f.status}`);
          this.o.log.error(
            { event: 'kubernetes', op: what, status: f.status, node: this.o.nodeName },
            explainFailure(what, this.o.nodeName, f),
          );
        }
        await new Promise((r) => setTimeout(r, this.pacer.retryDelay(f)).unref());
      }
    }
    this.running = false;
    this.current = undefined;
  }

  /**
   * A server-side dry run of an Event create (the API server stores nothing), once it answers: an
   * RBAC rule or admission policy that refuses Vigil's Events is logged at start, not at the first
   * fault; and the create's path through the HTTP client (a request with a body on a kept-alive
   * connection) is compiled before a fault's Event takes it (about 0.3 ms of a fresh agent's first).
   */
  async preflight(): Promise<void> {
    const body = this.body(`${this.o.nodeName}.vigil-preflight`, this.now(), 'Normal', 'VigilPreflight', 'dry run: never stored');
    try {
      await this.pacer.request('POST event (dry run)', (opts) =>
        this.o.clients.events.createNamespacedEvent({ namespace: this.o.namespace, body, dryRun: 'All' }, opts),
      );
      this.m.sent.inc({ op: 'preflight', result: 'ok' });
    } catch (err) {
      const f = toFailure(err);
      this.m.sent.inc({ op: 'preflight', result: String(f.status) });
      this.o.log[f.status === 401 || f.status === 403 ? 'error' : 'debug'](
        { event: 'kubernetes', op: 'create events', status: f.status, node: this.o.nodeName, dryRun: true },
        explainFailure('create events', this.o.nodeName, f),
      );
    }
  }

  private body(name: string, at: number, type: 'Warning' | 'Normal', reason: string, note: string): k8s.EventsV1Event {
    const uid = this.o.nodeUid?.();
    return {
      metadata: { name, namespace: this.o.namespace },
      eventTime: new k8s.V1MicroTime(at),
      type,
      reason: reason.slice(0, 128),
      note,
      action: 'Detected',
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: this.o.instance.slice(0, 128),
      regarding: { kind: 'Node', apiVersion: 'v1', name: this.o.nodeName, ...(uid ? { uid } : {}) },
    };
  }

  private async send(op: Op): Promise<void> {
    const ns = this.o.namespace;
    if (op.kind === 'create') {
      const body = this.body(op.series.name, op.at, op.type, op.reason, op.note);
      await this.pacer.request('POST event', (opts) => this.o.clients.events.createNamespacedEvent({ namespace: ns, body }, opts));
      op.series.created = true;
      this.m.sent.inc({ op: 'create', result: 'ok' });
      return;
    }
    const s = op.series;
    const count = s.count;
    if (count < 2 || count <= s.written) return;
    await this.pacer.request(
      'PATCH event series',
      (opts) =>
        this.o.clients.events.patchNamespacedEvent(
          { name: s.name, namespace: ns, body: { series: { count, lastObservedTime: microTime(s.lastObserved) } } },
          opts,
        ),
      STRATEGIC_MERGE,
    );
    s.written = Math.max(s.written, count);
    s.writtenAt = this.now();
    s.gapMs = this.refreshMs;
    this.m.sent.inc({ op: 'series', result: 'ok' });
  }

  /**
   * Stops recording. With a deadline, first writes the pending series counts and lets the queue
   * drain (best effort: an unreachable API server only delays shutdown by the deadline).
   */
  async stop(finalWriteMs = 0): Promise<void> {
    clearInterval(this.flushTimer);
    for (const [reason, w] of this.waiting) {
      if (finalWriteMs > 0 && !this.stopped) this.releaseWaiting(reason, true);
      else clearTimeout(w.timer);
    }
    for (const op of [...this.openSummaries.values()]) {
      if (!op.summary?.gather) continue;
      if (finalWriteMs > 0 && !this.stopped) this.queueSummary(op);
      else clearTimeout(op.summary.gather);
    }
    if (finalWriteMs > 0 && !this.stopped) {
      this.flushSeries(true);
      const deadline = Date.now() + finalWriteMs;
      while (!this.idle && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    }
    this.stopped = true;
  }
}

/**
 * "GPU has fallen off the bus on 3 more entities (over NvidiaXID79Error's Event budget of 30 a
 * minute): gpu:a, gpu:b, gpu:c".
 */
function summaryNote(reason: string, s: Summary): string {
  const message = s.message.length > 200 ? `${s.message.slice(0, 197)}...` : s.message;
  const n = s.entities.length;
  const note = `${message} on ${n} more ${n === 1 ? 'entity' : 'entities'} (over ${reason}'s Event budget of ${s.cap} a minute): ${s.entities.join(', ')}`;
  return note.length > MAX_NOTE && n === 1 ? `${note.slice(0, MAX_NOTE - 3)}...` : note;
}

/** MicroTime as Kubernetes writes it: RFC 3339 with six fractional digits. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
