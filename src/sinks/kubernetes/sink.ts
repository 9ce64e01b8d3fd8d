/**
 * The Kubernetes sink: conditions on the Node (nodes/status) and Events about it. It only receives:
 * the composition root (src/app/kubernetes.ts) reads the Node through it, lets the engine adopt the
 * existing transition times of Vigil's types, then tells it to begin writing.
 */
import os from 'node:os';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import type { EngineEvent, NodeHealth, Published, Sink } from '../../api/types.ts';
import type * as k8s from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.ts';
import { ConditionWriter, type ExistingCondition } from './conditions.ts';
import { EventRecorder } from './events.ts';

export interface KubernetesSinkOptions {
  clients: Pick<KubeClients, 'core' | 'events'>;
  nodeName: string;
  log: Logger;
  registry: Registry;
  heartbeatMs: number;
  coalesceMs: number;
  eventNamespace: string;
  eventsPerReasonPerMinute: number;
  /** Fatal findings' Events, per reason per minute (default 30). */
  fatalEventsPerReasonPerMinute?: number;
  seriesFlushMs?: number;
  seriesRefreshMs?: number;
  /** Retry backoff for failed writes (default 500 ms doubling to 30 s, with jitter). */
  retry?: { baseMs: number; maxMs: number };
  /**
   * Condition types (Kubernetes names) earlier runs wrote, as last reported to onWrittenTypes.
   * Store them with the agent's state: a type no longer managed is then removed from the Node.
   */
  writtenTypes?: string[];
  onWrittenTypes?: (types: string[]) => void;
  /** Grace after start before a previously written, now unmanaged type is removed (default 60 s). */
  staleGraceMs?: number;
  /** Best-effort time close() spends writing the latest state (default 2 s; 0 = none). */
  finalWriteMs?: number;
  /** reportingInstance of Events (default vigil-<hostname>, i.e. the pod name in a cluster). */
  instance?: string;
  /** The clock Event series are timed by (default Date.now; tests inject the engine's). */
  eventsNow?: () => number;
}

/**
 * Longest a condition write for a new failing entity waits for the Event posted with it. The environment
 * variable VIGIL_EVENT_FIRST_MAX_MS overrides it (0 = no wait) for bench:compare's runs with and
 * without the wait (docs/benchmarks.md); it is no configuration setting.
 */
const EVENT_FIRST_MAX_MS = eventFirstMaxMs(process.env.VIGIL_EVENT_FIRST_MAX_MS, 100);

function eventFirstMaxMs(env: string | undefined, dflt: number): number {
  const v = env === undefined || env === '' ? dflt : Number(env);
  return Number.isFinite(v) && v >= 0 ? v : dflt;
}

export class KubernetesSink implements Sink {
  readonly name = 'kubernetes';
  readonly conditions: ConditionWriter;
  readonly events: EventRecorder;
  private started = false;
  /** The engine's view as last received, for a write that waits for an Event first. */
  private latest: NodeHealth | undefined;
  /** While condition writes wait for an Event: the condition types whose Fatal problems changed meanwhile. */
  private held: Set<string> | undefined;
  private nodeUid: string | undefined;

  constructor(private readonly o: KubernetesSinkOptions) {
    this.conditions = new ConditionWriter({
      clients: o.clients,
      nodeName: o.nodeName,
      log: o.log,
      registry: o.registry,
      coalesceMs: o.coalesceMs,
      heartbeatMs: o.heartbeatMs,
      ...(o.retry ? { retry: o.retry } : {}),
      ...(o.writtenTypes ? { writtenTypes: o.writtenTypes } : {}),
      ...(o.onWrittenTypes ? { onWrittenTypes: o.onWrittenTypes } : {}),
      ...(o.staleGraceMs !== undefined ? { staleGraceMs: o.staleGraceMs } : {}),
    });
    this.events = new EventRecorder({
      clients: o.clients,
      nodeName: o.nodeName,
      namespace: o.eventNamespace,
      log: o.log,
      registry: o.registry,
      perReasonPerMinute: o.eventsPerReasonPerMinute,
      ...(o.fatalEventsPerReasonPerMinute ? { fatalPerReasonPerMinute: o.fatalEventsPerReasonPerMinute } : {}),
      instance: o.instance ?? `vigil-${os.hostname()}`,
      nodeUid: () => this.nodeUid,
      ...(o.retry ? { retry: o.retry } : {}),
      ...(o.seriesFlushMs ? { seriesFlushMs: o.seriesFlushMs } : {}),
      ...(o.seriesRefreshMs ? { seriesRefreshMs: o.seriesRefreshMs } : {}),
      ...(o.eventsNow ? { now: o.eventsNow } : {}),
    });
  }

  /**
   * Reads the Node's conditions (retrying until the API server answers; callers run it in the
   * background, as an unreachable API server must not hold up detection) and keeps its UID for Events.
   */
  async readNode(names: string[]): Promise<ExistingCondition[]> {
    const { existing, uid } = await this.conditions.readExisting(names);
    if (uid && !this.nodeUid) this.nodeUid = uid;
    return existing;
  }

  /** Starts writing from this view (the engine's, once it adopted what readNode found). */
  begin(health: NodeHealth, adopted: number): void {
    this.started = true;
    this.latest = health;
    this.conditions.start(health);
    void this.events.preflight();
    this.o.log.info({ event: 'kubernetes', node: this.o.nodeName, adopted }, 'writing node conditions');
  }

  /** The Node's condition of this name as read at start, for a type the engine manages only later. */
  existingAtStart(name: string): ExistingCondition | undefined {
    return this.started ? this.conditions.existingAtStart(name) : undefined;
  }

  /**
   * Whether the Node shows the engine's latest conditions: nothing held for an Event, nothing left
   * to write. (The writer alone says synced while a write waits here for an Event.)
   */
  get synced(): boolean {
    return this.held === undefined && this.conditions.synced;
  }

  setNodeUid(uid: string | undefined): void {
    this.nodeUid = uid;
  }

  handle(event: EngineEvent, health: NodeHealth): void {
    this.latest = health;
    this.events.handle(event);
    if (!this.started || event.kind === 'repeat') return;
    const problemsOf = fatalProblemsChanged(event);
    if (this.held) {
      // Written from the latest view on release; only a type whose problems changed needs naming.
      if (problemsOf !== undefined) this.held.add(problemsOf);
      return;
    }
    const sending = this.events.sending;
    if (EVENT_FIRST_MAX_MS > 0 && event.kind === 'finding' && problemsOf !== undefined && sending) {
      // A new failing entity: the Node is patched once the Event just posted (this fault's first
      // sign) is through, so the two writes do not queue behind each other at the API server and
      // etcd (a concurrent PATCH of the whole Node delayed the Event 0.8 ms at p50 on etcd, more at
      // p95). Every condition write meanwhile waits with it, the status change that follows the
      // finding (the engine's next event) included: one Event round trip, about 4 ms, at most the
      // bound. Repair engines wait minutes on a condition; the first sign is what a person sees.
      this.held = new Set([problemsOf]);
      let bound: NodeJS.Timeout | undefined;
      void Promise.race([sending, new Promise((r) => (bound = setTimeout(r, EVENT_FIRST_MAX_MS)))]).then(() => {
        clearTimeout(bound);
        this.release();
      });
      return;
    }
    this.conditions.update(health, problemsOf);
  }

  /** Hands the condition writes held for an Event to the writer. */
  private release(): void {
    const held = this.held;
    this.held = undefined;
    if (held && this.latest) for (const p of held) this.conditions.update(this.latest, p);
  }

  /**
   * The events through a throwaway sink (its own condition writer and Event recorder, a client
   * that sends nothing, its own metrics, a silent log): a fresh agent's first Fatal finding took
   * about 1.5 ms more from the sink to the Event's request than later ones (bench:compare's trace),
   * compiling this path.
   */
  warm(published: readonly Published[]): void {
    if (!published.length) return;
    const sink = new KubernetesSink({
      clients: SENDS_NOTHING,
      nodeName: this.o.nodeName,
      log: this.o.log.child({}, { level: 'silent' }),
      registry: new Registry(),
      heartbeatMs: 0,
      coalesceMs: this.o.coalesceMs,
      eventNamespace: this.o.eventNamespace,
      eventsPerReasonPerMinute: this.o.eventsPerReasonPerMinute,
      instance: 'warm-up',
      finalWriteMs: 0,
      staleGraceMs: 0,
    });
    sink.begin(published[0].health, 0);
    for (const { event, health } of published) sink.handle(event, health);
    void sink.close();
  }

  async close(): Promise<void> {
    const final = this.o.finalWriteMs ?? 2000;
    this.release(); // a change seen just before shutdown is still written
    await Promise.all([this.conditions.stop(this.started ? final : 0), this.events.stop(final)]);
  }
}

/** The condition type whose set of Fatal problems this event changed (a new or cleared entity). */
function fatalProblemsChanged(event: EngineEvent): string | undefined {
  if (event.kind === 'finding' && event.finding.severity === 'Fatal' && event.finding.count === 1) return event.finding.condition;
  if (event.kind === 'recovered' && event.problem.severity === 'Fatal') return event.problem.condition;
  return undefined;
}

/** The warm-up's client: answers every write at once and sends nothing (the body is still serialized, as a request's is). */
const SENDS_NOTHING: Pick<KubeClients, 'core' | 'events'> = {
  core: { readNode: refuse, patchNode: refuse, patchNodeStatus: (p) => echo<k8s.V1Node>(p.body), listNode: refuse },
  events: { createNamespacedEvent: (p) => echo<k8s.EventsV1Event>(p.body), patchNamespacedEvent: refuse },
};

function refuse(): Promise<never> {
  return Promise.reject(new Error('the warm-up sends nothing'));
}

function echo<T>(body: object): Promise<T> {
  return Promise.resolve(JSON.parse(JSON.stringify(body)) as T);
}
