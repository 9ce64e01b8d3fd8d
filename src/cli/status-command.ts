/**
 * `vigil status` (also `kubectl vigil status`): the operator's view of a fleet from the Nodes'
 * conditions. One row per node with each Vigil condition, its reason, how old the agent's last
 * heartbeat is, how long the node has been failing, and whether a repair or quarantine is pending.
 * Reads the API server only: the agents need not be reachable.
 *
 * A stopped agent leaves its last conditions on the Node, True included, so the heartbeat age is
 * what tells a dead agent from a healthy node: the agent re-writes its conditions every
 * `kubernetes.heartbeat` (5m by default, each write stamping lastHeartbeatTime), and a node whose
 * newest Vigil heartbeat is older than twice that is marked STALE. The plugin cannot read the
 * agents' configuration, so the interval is a flag (--heartbeat-interval, default 5m; 0 = never
 * stale, for agents with heartbeats off).
 */
import type * as k8s from '@kubernetes/client-node';
import { CONDITION_TYPES } from '../catalog/index.ts';
import { makeClients, type CoreApi } from '../kube/client.ts';
import { errorMessage } from '../util/errors.ts';
import { parseDuration } from '../util/duration.ts';

/** The agent's default `kubernetes.heartbeat`. */
export const DEFAULT_HEARTBEAT_MS = 5 * 60_000;

export interface StatusOptions {
  kubeconfig?: string;
  selector?: string;
  json?: boolean;
  watch?: boolean;
  /** Condition types to show (renamed with conditions.names); default: Vigil's built-in types. */
  types?: string;
  /** Seconds between refreshes with --watch. */
  interval?: string;
  /** As kubectl's --context: the kubeconfig context to use. */
  context?: string;
  /** As kubectl's --server: the API server address, instead of the context's cluster's. */
  server?: string;
  /** The agents' kubernetes.heartbeat (a duration, default 5m); STALE past twice this; 0 = never STALE. */
  heartbeatInterval?: string;
}

export interface NodeConditionStatus {
  type: string;
  status: string;
  reason: string;
  message: string;
  lastTransitionTime: string | null;
  /** Seconds since the condition left True; null while True. */
  failingForSeconds: number | null;
}

export interface NodeStatus {
  node: string;
  conditions: NodeConditionStatus[];
  /** The newest lastHeartbeatTime of the shown conditions: the agent's last write; null when none. */
  lastHeartbeatTime: string | null;
  /** Seconds since lastHeartbeatTime; null when there is none. */
  heartbeatAgeSeconds: number | null;
  /** The last heartbeat is older than twice the heartbeat interval: the agent is not writing, its conditions are old news. */
  stale: boolean;
  /** The longest a shown condition has been failing (False or Unknown); null when none is. */
  failingForSeconds: number | null;
  /** A condition is False: repair engines (Karpenter, EKS node auto repair, NHC) act once their toleration passes. */
  repairPending: boolean;
  /** Cordoned, or tainted NoSchedule/NoExecute by something other than Kubernetes itself (a repair engine, an operator). */
  quarantined: boolean;
  quarantine: string | null;
}

/** `heartbeatMs`: the agents' heartbeat interval; a node is STALE past twice it (0: never). */
export function nodeStatus(node: k8s.V1Node, types: readonly string[], now: number, heartbeatMs = DEFAULT_HEARTBEAT_MS): NodeStatus {
  const byType = new Map((node.status?.conditions ?? []).map((c) => [c.type, c]));
  const conditions: NodeConditionStatus[] = [];
  let heartbeat = NaN;
  for (const type of types) {
    const c = byType.get(type);
    if (!c) continue;
    const beat = c.lastHeartbeatTime ? new Date(c.lastHeartbeatTime).getTime() : NaN;
    if (Number.isFinite(beat) && !(beat <= heartbeat)) heartbeat = beat;
    const since = c.lastTransitionTime ? new Date(c.lastTransitionTime).getTime() : NaN;
    conditions.push({
      type,
      status: c.status,
      reason: c.reason ?? '',
      message: c.message ?? '',
      lastTransitionTime: Number.isFinite(since) ? new Date(since).toISOString() : null,
      failingForSeconds: c.status !== 'True' && Number.isFinite(since) ? Math.max(0, Math.round((now - since) / 1000)) : null,
    });
  }
  const failing = conditions.map((c) => c.failingForSeconds).filter((s): s is number => s !== null);
  // Kubernetes' own taints (not-ready, unreachable, pressure, uninitialized) describe the node, not a decision to quarantine it.
  const taints = (node.spec?.taints ?? []).filter(
    (t) => (t.effect === 'NoSchedule' || t.effect === 'NoExecute') && !/^node\.(cloudprovider\.)?kubernetes\.io\//.test(t.key),
  );
  const quarantine = node.spec?.unschedulable ? 'cordoned' : taints.length ? `tainted ${taints.map((t) => t.key).join(',')}` : null;
  // A clock ahead of the API server's shows as age 0, never negative.
  const age = Number.isFinite(heartbeat) ? Math.max(0, Math.round((now - heartbeat) / 1000)) : null;
  return {
    node: node.metadata?.name ?? '',
    conditions,
    lastHeartbeatTime: Number.isFinite(heartbeat) ? new Date(heartbeat).toISOString() : null,
    heartbeatAgeSeconds: age,
    stale: age !== null && heartbeatMs > 0 && age * 1000 > 2 * heartbeatMs,
    failingForSeconds: failing.length ? Math.max(...failing) : null,
    repairPending: conditions.some((c) => c.status === 'False'),
    quarantined: quarantine !== null,
    quarantine,
  };
}

export function formatDuration(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${m % 60 ? `${m % 60}m` : ''}`;
  return `${Math.floor(h / 24)}d`;
}

const COLOUR = { True: '\x1b[32m', False: '\x1b[31m', Unknown: '\x1b[33m', reset: '\x1b[0m' } as const;

/** The HEARTBEAT cell: the age of the last heartbeat, with STALE when the agent has stopped writing. */
function heartbeatCell(r: NodeStatus): { text: string; status?: string } {
  if (r.heartbeatAgeSeconds === null) return { text: '-' };
  const age = formatDuration(r.heartbeatAgeSeconds);
  return r.stale ? { text: `${age} STALE`, status: 'Unknown' } : { text: age };
}

/** A fixed-width table; cells are coloured by condition status when `colour` is set. */
export function formatTable(rows: NodeStatus[], types: readonly string[], colour: boolean): string {
  const header = ['NODE', 'HEARTBEAT', ...types, 'FAILING FOR', 'REPAIR', 'QUARANTINE'];
  const cells: { text: string; status?: string }[][] = rows.map((r) => {
    const by = new Map(r.conditions.map((c) => [c.type, c]));
    return [
      { text: r.node },
      heartbeatCell(r),
      ...types.map((t) => {
        const c = by.get(t);
        if (!c) return { text: '-' };
        return { text: c.status === 'True' ? 'True' : `${c.status} ${c.reason || '-'}`, status: c.status };
      }),
      { text: r.failingForSeconds === null ? '-' : formatDuration(r.failingForSeconds) },
      { text: r.repairPending ? 'pending' : '-' },
      { text: r.quarantine ?? '-' },
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((row) => row[i].text.length)));
  const line = (row: { text: string; status?: string }[]) =>
    row
      .map((cell, i) => {
        const padded = i === row.length - 1 ? cell.text : cell.text.padEnd(widths[i]);
        const code = colour && cell.status ? COLOUR[cell.status as keyof typeof COLOUR] : undefined;
        return code ? `${code}${padded}${COLOUR.reset}` : padded;
      })
      .join('  ')
      .trimEnd();
  return [line(header.map((text) => ({ text }))), ...cells.map(line)].join('\n') + '\n';
}

export async function readFleet(
  core: CoreApi,
  types: readonly string[],
  selector?: string,
  heartbeatMs = DEFAULT_HEARTBEAT_MS,
): Promise<NodeStatus[]> {
  const list = await core.listNode(selector ? { labelSelector: selector } : {});
  const now = Date.now();
  return list.items.map((n) => nodeStatus(n, types, now, heartbeatMs)).sort((a, b) => a.node.localeCompare(b.node));
}

/** kubectl's --server forms: a URL, or host:port (https, as kubectl does with TLS settings). */
export function serverUrl(text: string): string | undefined {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `https://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    return undefined;
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || !url.hostname) return undefined;
  return withScheme;
}

export async function runStatusCommand(opts: StatusOptions): Promise<number> {
  const types = opts.types
    ? opts.types
        .split(',')
        .map((t) => t.trim())
        .filter(Boolean)
    : [...CONDITION_TYPES];
  const intervalMs = Math.max(1, Number(opts.interval ?? 5)) * 1000;
  if (!Number.isFinite(intervalMs)) {
    process.stderr.write(`vigil status: --interval must be a number of seconds, not ${opts.interval}\n`);
    return 2;
  }
  const heartbeatMs = opts.heartbeatInterval === undefined ? DEFAULT_HEARTBEAT_MS : parseDuration(opts.heartbeatInterval);
  if (heartbeatMs === undefined) {
    process.stderr.write(
      `vigil status: --heartbeat-interval must be a duration such as 5m or 90s (0: never STALE), not ${opts.heartbeatInterval}\n`,
    );
    return 2;
  }
  const server = opts.server === undefined ? undefined : serverUrl(opts.server);
  if (opts.server !== undefined && !server) {
    process.stderr.write(`vigil status: --server must be an http(s) URL or host:port, not ${opts.server}\n`);
    return 2;
  }
  if (opts.context === '') {
    process.stderr.write('vigil status: --context must not be empty\n');
    return 2;
  }
  const colour = Boolean(process.stdout.isTTY) && !process.env.NO_COLOR && !opts.json;
  let core: CoreApi;
  try {
    core = makeClients(opts.kubeconfig, { ...(opts.context ? { context: opts.context } : {}), ...(server ? { server } : {}) }).core;
  } catch (err) {
    process.stderr.write(`vigil status: cannot load the kubeconfig: ${errorMessage(err)}\n`);
    return 2;
  }
  let last = '';
  for (;;) {
    let out: string;
    try {
      const rows = await readFleet(core, types, opts.selector, heartbeatMs);
      out = opts.json ? JSON.stringify(rows) + '\n' : formatTable(rows, types, colour);
    } catch (err) {
      process.stderr.write(`vigil status: cannot list nodes: ${errorMessage(err)}\n`);
      if (!opts.watch) return 1;
      out = last;
    }
    if (!opts.watch) {
      process.stdout.write(out);
      return 0;
    }
    // Watching: a terminal is redrawn in place; a pipe gets a new table only when something changed.
    if (colour) process.stdout.write(`\x1b[H\x1b[2J${out}`);
    else if (out !== last) process.stdout.write(opts.json ? out : `${out}\n`);
    last = out;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
