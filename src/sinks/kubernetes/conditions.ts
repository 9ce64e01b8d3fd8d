/**
 * Writes Vigil's condition types to its own Node through `nodes/<name>/status` with a strategic
 * merge patch keyed by type, so kubelet's Ready and other writers' conditions are never touched.
 * The desired state is always the engine's latest view: after an outage one write converges.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ActiveProblem, ConditionState, NodeHealth } from '../../api/types.ts';
import { ApiPacer, STRATEGIC_MERGE, toFailure, type ApiFailure, type KubeClients } from '../../kube/client.ts';
import { explainFailure } from '../../kube/failures.ts';

export interface ConditionWriterOptions {
  clients: Pick<KubeClients, 'core'>;
  nodeName: string;
  log: Logger;
  registry: Registry;
  /**
   * Writes go out at most once per this window (capped at 1 s): the first change after a quiet
   * window is written at once (leading edge); changes that follow within it go out together.
   */
  coalesceMs: number;
  /** Re-write period when nothing changed; 0 disables. */
  heartbeatMs: number;
  /** A request's deadline while the API server keeps up (ApiPacer lengthens it while it does not). */
  requestTimeoutMs?: number;
  /** Retry backoff after a failed write (full jitter between half and the whole step). */
  retry?: { baseMs: number; maxMs: number };
  /**
   * Condition types (Kubernetes names) that earlier runs wrote, as last reported through
   * onWrittenTypes. Those no longer managed are removed from the Node after start.
   */
  writtenTypes?: string[];
  /** Called whenever the set of types Vigil has written changes; persist it for the next start. */
  onWrittenTypes?: (types: string[]) => void;
  /**
   * How long after start a previously written type may still become managed (a GPU proved
   * present late) before it counts as removed from the configuration and is deleted.
   */
  staleGraceMs?: number;
  now?: () => number;
}

/** What the Node is known to show for one of Vigil's types. */
interface Shown {
  status: string;
  reason: string;
  message: string;
  lastTransitionTime: string;
  /** ms since the epoch; 0 when unknown. */
  heartbeat: number;
}

/** A condition as found on the Node when Vigil started. */
export interface ExistingCondition {
  type: string;
  status: string;
  lastTransitionTime?: string;
}

export class ConditionWriter {
  private desired: ConditionState[] = [];
  private readonly shown = new Map<string, Shown>();
  /** Every condition on the Node at start, for types the engine only starts managing later. */
  private readonly seenAtStart = new Map<string, ExistingCondition>();
  private readonly owned: Set<string>;
  private readonly pendingDeletes = new Set<string>();
  private staleCandidates: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private staleTimer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  /** Write every desired condition next time (heartbeat, or the Node's state is uncertain). */
  private fullWriteDue = false;
  /** The pending timer is a retry after a failure: nothing may bring it forward. */
  private backingOff = false;
  private readonly pacer: ApiPacer;
  private readonly reported = new Set<string>();
  private stopped = false;
  private readonly m: { writes: Counter<'result'>; pendingGauge: Gauge };
  private readonly now: () => number;

  private readonly coalesceMs: number;
  /** When the last write was sent (the injected clock); the next may go out coalesceMs later. */
  private lastWriteAt = -Infinity;
  /** Condition types whose Fatal problems changed since their message was last rendered. */
  private readonly touched = new Set<string>();
  /** The Kubernetes message last rendered per condition name, with what it was rendered from. */
  private readonly rendered = new Map<string, { from: string; message: string }>();

  constructor(private readonly o: ConditionWriterOptions) {
    this.now = o.now ?? Date.now;
    // Coalescing trades latency for fewer writes; past a second it would only delay a repair.
    this.coalesceMs = Math.min(Math.max(0, o.coalesceMs), 1000);
    this.pacer = new ApiPacer(o.requestTimeoutMs ?? 10_000, { baseMs: o.retry?.baseMs ?? 500, maxMs: o.retry?.maxMs ?? 30_000 });
    this.owned = new Set(o.writtenTypes ?? []);
    this.m = {
      writes: new Counter({
        name: 'vigil_k8s_condition_writes_total',
        help: 'Condition patches sent to the API server, by result (ok or HTTP status, 0 = unreachable).',
        labelNames: ['result'],
        registers: [o.registry],
      }),
      pendingGauge: new Gauge({
        name: 'vigil_k8s_conditions_pending',
        help: "1 while the Node does not yet show the engine's latest conditions.",
        registers: [o.registry],
      }),
    };
  }

  /**
   * Reads the Node so a restart keeps the repair clock: returns the existing conditions of the
   * given types for the engine to adopt, and the Node's UID (for Events). Retries until the API
   * server answers or stop().
   */
  async readExisting(types: string[]): Promise<{ existing: ExistingCondition[]; uid?: string }> {
    for (;;) {
      try {
        const node = await this.pacer.request('GET node', (opts) => this.o.clients.core.readNode({ name: this.o.nodeName }, opts));
        const conds = node.status?.conditions ?? [];
        const existing: ExistingCondition[] = [];
        for (const c of conds) {
          const e: ExistingCondition = {
            type: c.type,
            status: c.status,
            ...(c.lastTransitionTime ? { lastTransitionTime: iso(c.lastTransitionTime) } : {}),
          };
          this.seenAtStart.set(c.type, e);
          if (types.includes(c.type)) existing.push(e);
          if (types.includes(c.type) || this.owned.has(c.type)) {
            this.shown.set(c.type, {
              status: c.status,
              reason: c.reason ?? '',
              message: c.message ?? '',
              lastTransitionTime: e.lastTransitionTime ?? '',
              heartbeat: c.lastHeartbeatTime ? new Date(c.lastHeartbeatTime).getTime() : 0,
            });
          }
        }
        // Types an earlier run wrote that are gone from the Node need no cleanup; forget them.
        const before = this.owned.size;
        for (const t of [...this.owned]) if (!conds.some((c) => c.type === t)) this.owned.delete(t);
        if (this.owned.size !== before) this.notifyOwned();
        this.staleCandidates = [...this.owned].filter((t) => !types.includes(t));
        this.pacer.succeeded();
        const uid = node.metadata?.uid;
        return { existing, ...(uid ? { uid } : {}) };
      } catch (err) {
        const f = toFailure(err);
        this.report('read', f);
        if (this.stopped) return { existing: [] };
        await sleep(this.pacer.retryDelay(f));
        if (this.stopped) return { existing: [] };
      }
    }
  }

  /** The condition of this type the Node showed at start (for types managed late). */
  existingAtStart(type: string): ExistingCondition | undefined {
    return this.seenAtStart.get(type);
  }

  /** Starts heartbeats and writes the initial state (only what differs from the Node). */
  start(health: NodeHealth): void {
    if (this.stopped) return;
    if (this.o.heartbeatMs > 0) {
      // A Node whose heartbeat for our types is older than one period gets a fresh one now.
      const stale = health.conditions.some((c) => this.now() - (this.shown.get(c.name)?.heartbeat ?? 0) >= this.o.heartbeatMs);
      if (stale) this.fullWriteDue = true;
      // The first beat at a random point of the period: a fleet started together (a rollout, a
      // control-plane restart) must not send every node's heartbeat in the same second.
      const beat = () => {
        this.fullWriteDue = true;
        this.schedule(0);
      };
      this.heartbeatTimer = setTimeout(() => {
        beat();
        this.heartbeatTimer = setInterval(beat, this.o.heartbeatMs);
        this.heartbeatTimer.unref();
      }, Math.random() * this.o.heartbeatMs);
      this.heartbeatTimer.unref();
    }
    const grace = this.o.staleGraceMs ?? 60_000;
    if (grace > 0 && this.staleCandidates.length) {
      this.staleTimer = setTimeout(() => this.queueStaleDeletes(), grace);
      this.staleTimer.unref();
    }
    this.desired = health.conditions;
    if (grace <= 0) this.queueStaleDeletes();
    this.update(health);
    if (this.fullWriteDue) this.schedule(0);
  }

  /**
   * Takes the engine's latest view; schedules a write only if something Kubernetes shows changed.
   * `problemsOf`: a condition type whose set of Fatal problems changed (a new failing entity), so
   * its message is rendered again even where the engine's own message was cut at its bound.
   */
  update(health: NodeHealth, problemsOf?: string): void {
    this.desired = health.conditions;
    if (problemsOf !== undefined) this.touched.add(problemsOf);
    if (this.dirty().length || this.pendingDeletes.size) this.schedule(this.nextWriteDelay());
  }

  /**
   * Leading edge: at once after a quiet window, else when the window since the last write ends;
   * a change of some condition's status at once in any case.
   */
  private nextWriteDelay(): number {
    // A status change is what repair engines act on: it never waits out the window (the engine's
    // flap damping and the few condition types bound how often that happens).
    if (this.changesStatus(this.desired)) return 0;
    return Math.max(0, this.lastWriteAt + this.coalesceMs - this.now());
  }

  /**
   * The message Kubernetes shows: the engine's, unless the engine cut it at its bound; then a
   * summary naming the failing entities per reason, bounded, always naming the newest entity, so
   * every new failing entity changes what the Node shows.
   */
  private messageOf(c: ConditionState): string {
    if (!engineCutMessage(c.message)) {
      this.touched.delete(c.type);
      return c.message;
    }
    const cached = this.rendered.get(c.name);
    if (cached && cached.from === c.message && !this.touched.has(c.type)) return cached.message;
    const message = summarize(c.active);
    this.rendered.set(c.name, { from: c.message, message });
    this.touched.delete(c.type);
    return message;
  }

  /** Whether writing these conditions would change a status the Node shows (not only a message). */
  private changesStatus(conditions: readonly ConditionState[]): boolean {
    return conditions.some((c) => c.status !== (this.shown.get(c.name)?.status ?? c.status));
  }

  /** Whether the Node shows the latest state (tests and /healthz). */
  get synced(): boolean {
    return this.dirty().length === 0 && this.pendingDeletes.size === 0 && !this.inFlight && !this.fullWriteDue;
  }

  /** Types Vigil has written and not removed (what onWrittenTypes last reported). */
  get writtenTypes(): string[] {
    return [...this.owned].sort();
  }

  /**
   * Stops writing. With a deadline, first makes one last attempt to put the latest state on the
   * Node (a change seen just before SIGTERM should not be lost if the API server is there).
   */
  async stop(finalWriteMs = 0): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.staleTimer);
    if (finalWriteMs > 0 && !this.stopped) {
      const deadline = Date.now() + finalWriteMs;
      if (this.inFlight) await Promise.race([this.inFlight, sleep(finalWriteMs)]);
      const left = deadline - Date.now();
      if (!this.inFlight && left > 0 && (this.dirty().length || this.pendingDeletes.size)) await this.flush(left);
    }
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private queueStaleDeletes(): void {
    const managed = new Set(this.desired.map((c) => c.name));
    for (const t of this.staleCandidates) if (!managed.has(t) && this.owned.has(t)) this.pendingDeletes.add(t);
    this.staleCandidates = [];
    if (this.pendingDeletes.size) this.schedule(this.nextWriteDelay());
  }

  private dirty(): ConditionState[] {
    return this.desired.filter((c) => {
      const w = this.shown.get(c.name);
      if (!w || w.status !== c.status || w.reason !== c.reason || !sameTime(w.lastTransitionTime, c.lastTransitionTime)) return true;
      // A cut message with new problems is rendered when written, not on every finding of a storm.
      if (engineCutMessage(c.message) && this.touched.has(c.type)) return true;
      return w.message !== this.messageOf(c);
    });
  }

  private schedule(ms: number, retry = false): void {
    if (this.stopped) return;
    this.m.pendingGauge.set(1);
    if (this.timer) {
      // A write, or a retry after backoff, is already due; only a retry replaces a sooner write.
      if (!retry && (ms > 0 || this.backingOff)) return;
      clearTimeout(this.timer);
    }
    this.backingOff = retry;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.backingOff = false;
      void this.flush();
    }, ms);
  }

  /** Sends what changed; `capMs` bounds the request's deadline (a shutdown's last write). */
  private async flush(capMs = Infinity): Promise<void> {
    if (this.stopped) return;
    if (this.inFlight) {
      // One write at a time; what changed meanwhile goes out right after.
      await this.inFlight;
      if (!this.timer) this.schedule(this.nextWriteDelay());
      return;
    }
    const full = this.fullWriteDue;
    // Rendered once: what is sent is exactly what the Node is then known to show.
    const changed = (full ? this.desired : this.dirty()).map((c) => ({ c, message: this.messageOf(c) }));
    const deletes = [...this.pendingDeletes];
    if (changed.length === 0 && deletes.length === 0) {
      this.m.pendingGauge.set(0);
      return;
    }
    const now = this.now();
    this.lastWriteAt = now;
    const heartbeatTime = new Date(Math.floor(now / 1000) * 1000).toISOString().replace('.000Z', 'Z');
    const body = {
      status: {
        conditions: [
          ...changed.map(({ c, message }) => ({
            type: c.name,
            status: c.status,
            reason: c.reason,
            message,
            lastTransitionTime: c.lastTransitionTime,
            lastHeartbeatTime: heartbeatTime,
          })),
          ...deletes.map((type) => ({ type, $patch: 'delete' })),
        ],
      },
    };
    this.fullWriteDue = false;
    let done!: () => void;
    this.inFlight = new Promise((r) => (done = r));
    try {
      await this.pacer.request(
        'PATCH nodes/status',
        (opts) => this.o.clients.core.patchNodeStatus({ name: this.o.nodeName, body }, opts),
        STRATEGIC_MERGE,
        capMs,
      );
    } catch (err) {
      const f = toFailure(err);
      this.m.writes.inc({ result: String(f.status) });
      if (f.status === 403 && deletes.length) {
        // An admission policy that pins Vigil's condition types (deploy/admission-policy.yaml) refuses
        // removing a type it no longer lists (after a rename): leave it, or no write would ever pass.
        for (const t of deletes) {
          this.pendingDeletes.delete(t);
          this.owned.delete(t);
          this.shown.delete(t);
        }
        this.notifyOwned();
        if (full) this.fullWriteDue = true;
        this.o.log.warn(
          { event: 'kubernetes', node: this.o.nodeName, status: 403, left: deletes },
          `condition types no longer managed left on the Node: ${deletes.join(', ')} (removing them was refused, e.g. by the admission policy that pins Vigil's condition types; remove them with kubectl if wanted). API server said: ${f.message}`,
        );
        this.inFlight = undefined;
        done();
        if (!this.stopped) this.schedule(0, true);
        return;
      }
      this.report('patch', f);
      // A heartbeat that failed is still owed; after a timeout the Node's state is unknown, and
      // after a 404 the Node may come back recreated without any of Vigil's conditions.
      if (full || f.status === 0 || f.status === 404) this.fullWriteDue = true;
      this.inFlight = undefined;
      done();
      // Keep the desired state; the next attempt writes whatever is latest then.
      if (!this.stopped) this.schedule(this.pacer.retryDelay(f), true);
      return;
    }
    for (const { c, message } of changed) {
      this.shown.set(c.name, {
        status: c.status,
        reason: c.reason,
        message,
        lastTransitionTime: c.lastTransitionTime,
        heartbeat: now,
      });
    }
    const ownedBefore = this.writtenTypes.join(',');
    for (const { c } of changed) this.owned.add(c.name);
    for (const t of deletes) {
      this.pendingDeletes.delete(t);
      this.shown.delete(t);
      this.owned.delete(t);
    }
    if (this.writtenTypes.join(',') !== ownedBefore) this.notifyOwned();
    if (deletes.length)
      this.o.log.info(
        { event: 'kubernetes', node: this.o.nodeName, removed: deletes },
        `removed condition types no longer managed: ${deletes.join(', ')}`,
      );
    this.m.writes.inc({ result: 'ok' });
    if (this.reported.size) this.o.log.info({ event: 'kubernetes', node: this.o.nodeName }, 'node conditions written again after failures');
    this.reported.clear();
    this.pacer.succeeded();
    this.inFlight = undefined;
    done();
    if (this.dirty().length || this.pendingDeletes.size || this.fullWriteDue) this.schedule(this.nextWriteDelay());
    else if (!this.timer) this.m.pendingGauge.set(0);
  }

  private notifyOwned(): void {
    try {
      this.o.onWrittenTypes?.(this.writtenTypes);
    } catch (err) {
      this.o.log.warn({ err, event: 'kubernetes' }, 'could not record the condition types Vigil wrote');
    }
  }

  /** Logs a failure once per kind until a write succeeds again, so an outage is one line, not thousands. */
  private report(op: 'read' | 'patch', f: ApiFailure): void {
    const key = `${op}:${f.status}`;
    if (this.reported.has(key)) return;
    this.reported.add(key);
    this.o.log.error(
      { event: 'kubernetes', op, status: f.status, node: this.o.nodeName },
      explainFailure(op === 'read' ? 'get nodes' : 'patch nodes/status', this.o.nodeName, f),
    );
  }
}

/** Kubernetes' limit is 32 KiB; a repair engine or `kubectl describe` needs far less. */
const MAX_MESSAGE = 1024;
/** How the engine ends a message it cut at its bound. */
function engineCutMessage(message: string): boolean {
  return message.length >= MAX_MESSAGE && message.endsWith('...');
}

/**
 * "NvidiaXID79Error on gpu:0000:01:00.0: GPU has fallen off the bus; NvidiaXID79Error on 100
 * entities: gpu:0000:01:00.0, ... (+90 more, newest gpu:0000:64:00.0)": the oldest problem in
 * full, then each reason with its count and as many entities as fit, oldest first, and the newest.
 */
export function summarize(active: readonly ActiveProblem[], max = MAX_MESSAGE): string {
  if (active.length === 0) return '';
  const first = active[0];
  const head = `${first.reason}${first.entity ? ` on ${first.entity}` : ''}: ${first.message}`;
  const groups = new Map<string, string[]>();
  for (const p of active) {
    let g = groups.get(p.reason);
    if (!g) groups.set(p.reason, (g = []));
    g.push(p.entity || 'node');
  }
  // Budget per reason, so one noisy reason cannot hide another.
  let out = head.length > max / 4 ? `${head.slice(0, max / 4 - 3)}...` : head;
  const budget = Math.floor((max - out.length) / groups.size);
  for (const [reason, entities] of groups) {
    const prefix = `; ${reason} on ${entities.length} ${entities.length === 1 ? 'entity' : 'entities'}: `;
    const newest = entities[entities.length - 1];
    let part = prefix;
    let named = 0;
    for (const e of entities) {
      const rest = entities.length - named - 1;
      const tail = rest > 0 ? ` (+${rest} more, newest ${newest})` : '';
      if (part.length + (named ? 2 : 0) + e.length + tail.length > budget) break;
      part += `${named ? ', ' : ''}${e}`;
      named++;
    }
    if (named < entities.length) part += `${named ? ' ' : ''}(+${entities.length - named} more, newest ${newest})`;
    out += part.length > budget ? `${part.slice(0, Math.max(0, budget - 3))}...` : part;
  }
  return out.length > max ? `${out.slice(0, max - 3)}...` : out;
}

function iso(t: Date | string): string {
  return new Date(t).toISOString();
}

/** Kubernetes round-trips times with second precision and its own formatting; compare instants. */
function sameTime(a: string, b: string): boolean {
  return a === b || (a !== '' && b !== '' && new Date(a).getTime() === new Date(b).getTime());
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
