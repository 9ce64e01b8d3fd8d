/**
 * What the API server shows, seen as a client sees it: one watch on the Nodes and one on the core/v1
 * Events of the `default` namespace (Vigil writes events.k8s.io/v1 Events, NPD core/v1 ones; both
 * are the same objects, and the core/v1 watch sees both). Every Event added or modified, and every
 * change of a Node condition's (status, reason, message), is kept with the time the watch delivered
 * it (benchNow(), the clock the fault writers use).
 */
import * as k8s from '@kubernetes/client-node';

/**
 * Milliseconds since the epoch with a fraction (the monotonic clock from the process's start): the
 * writers stamp faults and the watches their delivery with it, so a figure is not rounded to Date.now()'s ms.
 */
export const benchNow = (): number => performance.timeOrigin + performance.now();

export interface Sign {
  at: number;
  kind: 'event' | 'condition';
  node: string;
  /** Event reason, or the condition type. */
  what: string;
  /** Condition status; the Event type for Events. */
  status: string;
  text: string;
}

export class ApiObserver {
  readonly signs: Sign[] = [];
  private readonly conds = new Map<string, string>();
  private readonly aborts: AbortController[] = [];
  private closed = false;
  private waiters: { pred: (s: Sign) => boolean; resolve: (s: Sign) => void }[] = [];

  constructor(private readonly kc: k8s.KubeConfig) {}

  async start(): Promise<void> {
    await Promise.all([
      this.watch('/api/v1/nodes', (type, obj: k8s.V1Node) => this.onNode(obj)),
      this.watch('/api/v1/namespaces/default/events', (type, obj: k8s.CoreV1Event) => {
        if (type !== 'ADDED' && type !== 'MODIFIED') return;
        if (obj.involvedObject?.kind !== 'Node') return;
        this.push({
          at: benchNow(),
          kind: 'event',
          node: obj.involvedObject.name ?? '',
          what: obj.reason ?? '',
          status: obj.type ?? '',
          text: obj.message ?? '',
        });
      }),
    ]);
  }

  private async watch(pathname: string, cb: (type: string, obj: never) => void): Promise<void> {
    const w = new k8s.Watch(this.kc);
    const again = (): void => {
      if (this.closed) return;
      // A watch ends on the server's timeout or an error: open it again.
      setTimeout(() => void this.watch(pathname, cb).catch(again), 200);
    };
    const ac = await w.watch(pathname, {}, (type, obj) => cb(type, obj as never), again);
    this.aborts.push(ac);
  }

  private onNode(node: k8s.V1Node): void {
    const name = node.metadata?.name ?? '';
    for (const c of node.status?.conditions ?? []) {
      const key = `${name}|${c.type}`;
      const val = `${c.status}|${c.reason}|${c.message}`;
      if (this.conds.get(key) === val) continue;
      this.conds.set(key, val);
      this.push({ at: benchNow(), kind: 'condition', node: name, what: c.type, status: c.status, text: c.message ?? '' });
    }
  }

  private push(s: Sign): void {
    this.signs.push(s);
    for (const w of [...this.waiters]) {
      if (w.pred(s)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(s);
      }
    }
  }

  /** The first sign (since `since`) that satisfies `pred`, or undefined after `timeoutMs`. */
  first(pred: (s: Sign) => boolean, since: number, timeoutMs: number): Promise<Sign | undefined> {
    const hit = this.signs.find((s) => s.at >= since && pred(s));
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve) => {
      const w = {
        pred,
        resolve: (s: Sign) => {
          clearTimeout(t);
          resolve(s);
        },
      };
      const t = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.push(w);
    });
  }

  /** Drops signs older than `before` (long runs). */
  forget(before: number): void {
    let i = 0;
    while (i < this.signs.length && this.signs[i].at < before) i++;
    this.signs.splice(0, i);
  }

  close(): void {
    this.closed = true;
    for (const a of this.aborts) a.abort();
    for (const w of this.waiters) w.resolve = () => undefined;
  }
}

/** A sign on `node` whose text names `token` (case-insensitive). */
export const names =
  (node: string, token: string, kinds: Sign['kind'][] = ['event', 'condition']) =>
  (s: Sign): boolean =>
    s.node === node && kinds.includes(s.kind) && s.text.toLowerCase().includes(token.toLowerCase());
