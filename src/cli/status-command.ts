/**
 * `vigil status` (also `kubectl vigil status`): the operator's view of a fleet from the Nodes'
 * conditions. One row per node with each Vigil condition, its reason, how long the node has been
 * failing, and whether a repair or quarantine is pending. Reads the API server only: the agents
 * need not be reachable.
 */
import type * as k8s from '@kubernetes/client-node';
import { CONDITION_TYPES } from '../catalog/index.ts';
import { makeClients, type CoreApi } from '../sinks/kubernetes/client.ts';
import { errorMessage } from '../util/errors.ts';

export interface StatusOptions {
  kubeconfig?: string;
  selector?: string;
  json?: boolean;
  watch?: boolean;
  /** Condition types to show (renamed with conditions.names); default: Vigil's built-in types. */
  types?: string;
  /** Seconds between refreshes with --watch. */
  interval?: string;
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
  /** The longest a shown condition has been failing (False or Unknown); null when none is. */
  failingForSeconds: number | null;
  /** A condition is False: repair engines (Karpenter, EKS node auto repair, NHC) act once their toleration passes. */
  repairPending: boolean;
  /** Cordoned, or tainted NoSchedule/NoExecute by something other than Kubernetes itself (a repair engine, an operator). */
  quarantined: boolean;
  quarantine: string | null;
}

export function nodeStatus(node: k8s.V1Node, types: readonly string[], now: number): NodeStatus {
  const byType = new Map((node.status?.conditions ?? []).map((c) => [c.type, c]));
  const conditions: NodeConditionStatus[] = [];
  for (const type of types) {
    const c = byType.get(type);
    if (!c) continue;
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
  return {
    node: node.metadata?.name ?? '',
    conditions,
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

/** A fixed-width table; cells are coloured by condition status when `colour` is set. */
export function formatTable(rows: NodeStatus[], types: readonly string[], colour: boolean): string {
  const header = ['NODE', ...types, 'FAILING FOR', 'REPAIR', 'QUARANTINE'];
  const cells: { text: string; status?: string }[][] = rows.map((r) => {
    const by = new Map(r.conditions.map((c) => [c.type, c]));
    return [
      { text: r.node },
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

export async function readFleet(core: CoreApi, types: readonly string[], selector?: string): Promise<NodeStatus[]> {
  const list = await core.listNode(selector ? { labelSelector: selector } : {});
  const now = Date.now();
  return list.items.map((n) => nodeStatus(n, types, now)).sort((a, b) => a.node.localeCompare(b.node));
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
  const colour = Boolean(process.stdout.isTTY) && !process.env.NO_COLOR && !opts.json;
  let core: CoreApi;
  try {
    core = makeClients(opts.kubeconfig).core;
  } catch (err) {
    process.stderr.write(`vigil status: cannot load the kubeconfig: ${errorMessage(err)}\n`);
    return 2;
  }
  let last = '';
  for (;;) {
    let out: string;
    try {
      const rows = await readFleet(core, types, opts.selector);
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
