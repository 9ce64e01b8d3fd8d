/**
 * Optional quarantine, beside the flow: while one of Vigil's condition types is False, cordon the
 * Node and taint it `vigil.dev/unhealthy:NoSchedule` (value: the condition's name); when none is
 * False, take off exactly what Vigil put on. Off by default (config `quarantine`).
 *
 * Ownership lives on the Node, so it survives restarts: the label `vigil.dev/quarantined=true`
 * and the taint are Vigil's own keys; the annotation `vigil.dev/cordoned-by-vigil` is set only when
 * Vigil itself turned `spec.unschedulable` on, so a node an operator cordoned stays cordoned.
 *
 * A cluster-wide guard runs before each new quarantine: nodes carrying the label are counted with
 * a label-selector list (metadata only, stopping once the limit is reached) and all nodes with a
 * one-item metadata list (`remainingItemCount`); when this node would take the quarantined share
 * past `maxQuarantinedShare` (rounded up, like Karpenter's 20%), it holds back with a Warning
 * Event and a metric, and counts again every `recheck`.
 */
import os from 'node:os';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EngineEvent, NodeHealth, Sink } from '../api/types.ts';
import { CONDITION_TYPES } from '../api/types.ts';
import * as k8s from '@kubernetes/client-node';
import { MERGE_PATCH, REPORTING_CONTROLLER, toFailure, withDeadline, type ApiFailure, type KubeClients } from '../kube/client.ts';
import { Backoff } from '../util/backoff.ts';
import { explainFailure } from '../kube/failures.ts';

export const QUARANTINE_TAINT_KEY = 'vigil.dev/unhealthy';
export const QUARANTINED_LABEL = 'vigil.dev/quarantined';
export const CORDONED_BY_VIGIL_ANNOTATION = 'vigil.dev/cordoned-by-vigil';

export interface QuarantineOptions {
  clients: KubeClients;
  nodeName: string;
  log: Logger;
  registry: Registry;
  /** Log, count and record an Event for what would be done; change nothing. */
  dryRun: boolean;
  /** 0..1: hold back when this node would put more than this share of all nodes in quarantine. */
  maxQuarantinedShare: number;
  /** Random wait up to this long before a new quarantine is decided. */
  jitterMs: number;
  /** While held back (or after a failure that is not retried sooner), decide again after this long. */
  recheckMs: number;
  eventNamespace: string;
  /** reportingInstance of Events (default vigil-<hostname>). */
  instance?: string;
  requestTimeoutMs?: number;
  retry?: { baseMs: number; maxMs: number };
  random?: () => number;
}

/** What Vigil has put on the Node, read from the Node itself. */
interface Marks {
  labeled: boolean;
  taint: k8s.V1Taint | undefined;
  cordonedByVigil: boolean;
  unschedulable: boolean;
}

/** The Kubernetes names of Vigil's own condition types that are False. */
function fatalConditions(health: NodeHealth): string[] {
  const builtin = new Set<string>(CONDITION_TYPES);
  return health.conditions.filter((c) => builtin.has(c.type) && c.status === 'False').map((c) => c.name);
}

function marksOf(node: k8s.V1Node): Marks {
  return {
    labeled: node.metadata?.labels?.[QUARANTINED_LABEL] === 'true',
    taint: node.spec?.taints?.find((t) => t.key === QUARANTINE_TAINT_KEY),
    cordonedByVigil: node.metadata?.annotations?.[CORDONED_BY_VIGIL_ANNOTATION] !== undefined,
    unschedulable: node.spec?.unschedulable === true,
  };
}

/** The number of nodes allowed in quarantine: share × total rounded up, without float noise (0.2 × 100 = 20.000000000000004). */
export function allowedQuarantined(share: number, total: number): number {
  return Math.ceil(Math.round(share * total * 1e6) / 1e6);
}

/** Asks for metadata only (PartialObjectMetadataList): a list of nodes without their status, ~0.5 KB a node. */
const METADATA_ONLY = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';

const PAGE = 500;

export class Quarantine implements Sink {
  readonly name = 'quarantine';
  private fatal: string[] = [];
  private started = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private dueAt = 0;
  private inFlight: Promise<void> | undefined;
  /** The hold-back episode in progress (one Event and one log line per episode). */
  private heldBack = false;
  /** Dry run: the last plan reported, so each is said once. */
  private dryRunSaid = '';
  private readonly reported = new Set<string>();
  private readonly backoff: Backoff;
  private readonly timeoutMs: number;
  private readonly random: () => number;
  private seq = 0;
  private conflicts = 0;
  private readonly m: {
    actions: Counter<'action' | 'result'>;
    heldBackTotal: Counter;
    heldBack: Gauge;
    active: Gauge;
    events: Counter<'result'>;
  };

  constructor(private readonly o: QuarantineOptions) {
    this.timeoutMs = o.requestTimeoutMs ?? 10_000;
    this.backoff = new Backoff(o.retry?.baseMs ?? 500, o.retry?.maxMs ?? 30_000);
    this.random = o.random ?? Math.random;
    const registers = [o.registry];
    this.m = {
      actions: new Counter({
        name: 'vigil_quarantine_actions_total',
        help: 'Quarantine changes to the Node, by action (quarantine, update, release) and result (ok, dry_run, or HTTP status, 0 = unreachable).',
        labelNames: ['action', 'result'],
        registers,
      }),
      heldBackTotal: new Counter({
        name: 'vigil_quarantine_held_back_total',
        help: 'Times a quarantine was held back because too many nodes are already quarantined.',
        registers,
      }),
      heldBack: new Gauge({
        name: 'vigil_quarantine_held_back',
        help: '1 while this node should be quarantined but the cluster-wide guard holds it back.',
        registers,
      }),
      active: new Gauge({
        name: 'vigil_quarantine_active',
        help: "1 while the Node carries Vigil's quarantine (its label and taint).",
        registers,
      }),
      events: new Counter({
        name: 'vigil_quarantine_event_writes_total',
        help: 'Events about quarantine decisions, by result (ok or HTTP status); failed ones are logged and not retried.',
        labelNames: ['result'],
        registers,
      }),
    };
  }

  /** Starts deciding from the engine's current view (the Node's own marks say what Vigil put on before a restart). */
  start(health: NodeHealth): void {
    if (this.started || this.stopped) return;
    this.started = true;
    this.fatal = fatalConditions(health);
    this.schedule(this.fatal.length ? this.jitter() : 0);
  }

  handle(event: EngineEvent, health: NodeHealth): void {
    if (event.kind !== 'condition') return;
    const before = this.fatal.join(',');
    this.fatal = fatalConditions(health);
    if (!this.started || this.fatal.join(',') === before) return;
    // Lifting is never delayed; a new quarantine waits a random jitter so a fleet-wide fault spreads its decisions.
    this.schedule(this.fatal.length && !before ? this.jitter() : 0);
  }

  /** Nothing pending or being sent (tests). */
  get idle(): boolean {
    return !this.timer && !this.inFlight;
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.inFlight) await Promise.race([this.inFlight, sleep(this.timeoutMs)]);
  }

  private jitter(): number {
    return Math.round(this.random() * this.o.jitterMs);
  }

  /** Runs a decision in `ms`, unless one is already due sooner. */
  private schedule(ms: number): void {
    if (this.stopped) return;
    const due = Date.now() + ms;
    if (this.timer && this.dueAt <= due) return;
    clearTimeout(this.timer);
    this.dueAt = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.run();
    }, ms);
    this.timer.unref();
  }

  private async run(): Promise<void> {
    if (this.stopped) return;
    if (this.inFlight) {
      await this.inFlight;
      this.schedule(0);
      return;
    }
    let done!: () => void;
    this.inFlight = new Promise((r) => (done = r));
    let next: number | undefined;
    try {
      next = await this.reconcile();
      this.backoff.reset();
      this.conflicts = 0;
    } catch (err) {
      const f = toFailure(err);
      // 409: the Node changed between our read and write (the patch carries its resourceVersion): decide again on fresh state.
      // A few at once (Vigil's own status write races the first one), then with backoff.
      if (f.status === 409) next = ++this.conflicts <= 3 ? 0 : this.backoff.next();
      else {
        this.report(f);
        next = f.retryAfterMs ?? this.backoff.next();
      }
    } finally {
      this.inFlight = undefined;
      done();
    }
    if (next !== undefined) this.schedule(next);
  }

  /** One decision: read the Node, compare with the engine's view, write the difference. Returns when to decide again. */
  private async reconcile(): Promise<number | undefined> {
    const node = await withDeadline(this.timeoutMs, 'GET node', (opts) => this.o.clients.core.readNode({ name: this.o.nodeName }, opts));
    const marks = marksOf(node);
    const fatal = this.fatal;
    const resourceVersion = node.metadata?.resourceVersion;
    const otherTaints = (node.spec?.taints ?? []).filter((t) => t.key !== QUARANTINE_TAINT_KEY);

    if (fatal.length === 0) {
      this.setHeldBack(false, '');
      if (!marks.labeled && !marks.taint && !marks.cordonedByVigil) {
        this.m.active.set(0);
        this.dryRunSaid = '';
        return undefined;
      }
      const uncordon = marks.cordonedByVigil && marks.unschedulable;
      const what = `lift the quarantine of node ${this.o.nodeName}: remove taint ${QUARANTINE_TAINT_KEY} and label ${QUARANTINED_LABEL}${
        uncordon ? ', uncordon (Vigil cordoned it)' : marks.unschedulable ? '; it stays cordoned (not cordoned by Vigil)' : ''
      }`;
      const body = {
        metadata: {
          resourceVersion,
          labels: { [QUARANTINED_LABEL]: null },
          ...(marks.cordonedByVigil ? { annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: null } } : {}),
        },
        spec: { taints: otherTaints.length ? otherTaints : null, ...(uncordon ? { unschedulable: null } : {}) },
      };
      if (await this.write('release', what, body, 'VigilQuarantineLifted', 'Normal')) this.m.active.set(0);
      return undefined;
    }

    const condition = fatal[0];
    const taint: k8s.V1Taint = { key: QUARANTINE_TAINT_KEY, value: condition, effect: 'NoSchedule' };
    if (marks.labeled || marks.taint) {
      // Already quarantined (before a restart, too): keep the taint naming a condition that is False. No guard: nothing new.
      if (marks.labeled && marks.taint?.value === condition && marks.taint.effect === 'NoSchedule') {
        this.m.active.set(1);
        return undefined;
      }
      const body = {
        metadata: { resourceVersion, labels: { [QUARANTINED_LABEL]: 'true' } },
        spec: { taints: [...otherTaints, taint] },
      };
      const what = `keep node ${this.o.nodeName} quarantined: taint ${QUARANTINE_TAINT_KEY}=${condition}:NoSchedule (${fatal.join(', ')} False)`;
      if (await this.write('update', what, body)) this.m.active.set(1);
      return undefined;
    }

    const guard = await this.guard();
    if (guard.hold) {
      this.setHeldBack(true, guard.why);
      return this.o.recheckMs;
    }
    this.setHeldBack(false, '');
    const cordon = !marks.unschedulable;
    const body = {
      metadata: {
        resourceVersion,
        labels: { [QUARANTINED_LABEL]: 'true' },
        ...(cordon ? { annotations: { [CORDONED_BY_VIGIL_ANNOTATION]: 'true' } } : {}),
      },
      spec: { taints: [...otherTaints, taint], ...(cordon ? { unschedulable: true } : {}) },
    };
    const what = `quarantine node ${this.o.nodeName}: ${
      cordon ? 'cordon it, ' : 'already cordoned by someone else (left as it is), '
    }taint ${QUARANTINE_TAINT_KEY}=${condition}:NoSchedule, label ${QUARANTINED_LABEL}=true (${fatal.join(', ')} False; ${guard.why})`;
    if (await this.write('quarantine', what, body, 'VigilQuarantined', 'Warning')) this.m.active.set(1);
    return undefined;
  }

  /**
   * Writes one merge patch (it carries the read resourceVersion, so a concurrent change is a 409
   * and the decision is made again on fresh state). Dry run: says it once and writes nothing.
   */
  private async write(
    action: 'quarantine' | 'update' | 'release',
    what: string,
    body: object,
    eventReason?: string,
    eventType?: 'Warning' | 'Normal',
  ): Promise<boolean> {
    if (this.o.dryRun) {
      if (this.dryRunSaid !== what) {
        this.dryRunSaid = what;
        this.m.actions.inc({ action, result: 'dry_run' });
        this.o.log.info({ event: 'quarantine', action, dryRun: true, node: this.o.nodeName }, `dry run: would ${what}`);
        void this.event('Normal', 'VigilQuarantineDryRun', `dry run, nothing changed: would ${what}`);
      }
      return false;
    }
    try {
      await withDeadline(
        this.timeoutMs,
        'PATCH node',
        (opts) => this.o.clients.core.patchNode({ name: this.o.nodeName, body }, opts),
        MERGE_PATCH,
      );
    } catch (err) {
      this.m.actions.inc({ action, result: String(toFailure(err).status) });
      throw err;
    }
    this.m.actions.inc({ action, result: 'ok' });
    this.reported.clear();
    this.o.log.warn({ event: 'quarantine', action, node: this.o.nodeName }, `${action === 'release' ? 'lifted' : 'quarantined'}: ${what}`);
    if (eventReason && eventType) void this.event(eventType, eventReason, what);
    return true;
  }

  /** The cluster-wide guard: counts all nodes and, up to the limit, the nodes carrying Vigil's label. */
  private async guard(): Promise<{ hold: boolean; why: string }> {
    const share = this.o.maxQuarantinedShare;
    const total = await this.countNodes();
    const allowed = allowedQuarantined(share, total);
    const others = await this.countQuarantined(allowed);
    const pct = `${Math.round(share * 1000) / 10}%`;
    if (others + 1 > allowed) {
      const already = others >= allowed && allowed > 0 ? `at least ${others}` : String(others);
      return {
        hold: true,
        why: `${already} of ${total} nodes are already quarantined by Vigil; this node would make more than ${pct} (at most ${allowed} allowed)`,
      };
    }
    return { hold: false, why: `${others + 1} of ${total} nodes quarantined with this one, within ${pct}` };
  }

  /** All nodes: one metadata-only item and the server's remainingItemCount; pages through (500 a page) if it gives none. */
  private async countNodes(): Promise<number> {
    let count = 0;
    let cont: string | undefined;
    let limit = 1;
    for (;;) {
      const page = await withDeadline(this.timeoutMs, 'LIST nodes', (opts) =>
        this.o.clients.core.listNode({ limit, ...(cont ? { _continue: cont } : {}) }, { ...opts, accept: METADATA_ONLY }),
      );
      count += ((page.items as k8s.V1Node[] | null) ?? []).length;
      const remaining = page.metadata?.remainingItemCount;
      if (remaining !== undefined) return count + remaining;
      cont = page.metadata?._continue;
      if (!cont) return count;
      limit = PAGE;
    }
  }

  /** Nodes carrying Vigil's label, counted up to `stopAt` (the answer only matters below it). */
  private async countQuarantined(stopAt: number): Promise<number> {
    let count = 0;
    let cont: string | undefined;
    while (count < stopAt) {
      const limit = Math.min(PAGE, stopAt - count);
      const page = await withDeadline(this.timeoutMs, 'LIST nodes', (opts) =>
        this.o.clients.core.listNode(
          { labelSelector: `${QUARANTINED_LABEL}=true`, limit, ...(cont ? { _continue: cont } : {}) },
          { ...opts, accept: METADATA_ONLY },
        ),
      );
      // PartialObjectMetadataList sends `items: null` when nothing matches.
      count += ((page.items as k8s.V1Node[] | null) ?? []).filter((n) => n.metadata?.name !== this.o.nodeName).length;
      cont = page.metadata?._continue;
      if (!cont) break;
    }
    return count;
  }

  private setHeldBack(held: boolean, why: string): void {
    this.m.heldBack.set(held ? 1 : 0);
    if (held === this.heldBack) return;
    this.heldBack = held;
    if (!held) return;
    this.m.heldBackTotal.inc();
    const what = `not quarantining node ${this.o.nodeName} (${this.fatal.join(', ')} False): ${why}${this.o.dryRun ? ' (dry run)' : ''}`;
    this.o.log.warn({ event: 'quarantine', action: 'held_back', node: this.o.nodeName }, what);
    void this.event('Warning', 'VigilQuarantineHeldBack', what);
  }

  /** One Event on the Node; best effort (a failure is logged and counted, not retried). */
  private async event(type: 'Warning' | 'Normal', reason: string, note: string): Promise<void> {
    const now = Date.now();
    const name = `${this.o.nodeName}.q${(BigInt(now) * 1_000_000n + BigInt(this.seq++ % 1_000_000)).toString(16)}`;
    const body: k8s.EventsV1Event = {
      metadata: { name, namespace: this.o.eventNamespace },
      eventTime: new k8s.V1MicroTime(now),
      type,
      reason,
      note: note.length > 1024 ? `${note.slice(0, 1021)}...` : note,
      action: 'Quarantine',
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: (this.o.instance ?? `vigil-${os.hostname()}`).slice(0, 128),
      regarding: { kind: 'Node', apiVersion: 'v1', name: this.o.nodeName },
    };
    try {
      await withDeadline(this.timeoutMs, 'POST event', (opts) =>
        this.o.clients.events.createNamespacedEvent({ namespace: this.o.eventNamespace, body }, opts),
      );
      this.m.events.inc({ result: 'ok' });
    } catch (err) {
      const f = toFailure(err);
      this.m.events.inc({ result: String(f.status) });
      this.o.log.warn(
        { event: 'quarantine', status: f.status },
        `quarantine Event not written: ${explainFailure('create events', this.o.nodeName, f)}`,
      );
    }
  }

  /** Logs a failure once per kind until a write succeeds again. */
  private report(f: ApiFailure): void {
    const key = String(f.status);
    if (this.reported.has(key)) return;
    this.reported.add(key);
    const rbac =
      f.status === 403 && !/admission|ValidatingAdmissionPolicy/i.test(f.message) ? ' (quarantine needs deploy/rbac-quarantine.yaml)' : '';
    this.o.log.error(
      { event: 'quarantine', status: f.status, node: this.o.nodeName },
      `${explainFailure('get, list and patch nodes', this.o.nodeName, f)}${rbac}`,
    );
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
