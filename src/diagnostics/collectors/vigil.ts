/**
 * vigil: the agent's state file, its active conditions and recent findings (from the state file
 * and, when the agent answers on its listen address, live from /conditions, /healthz and
 * /metrics), and its configuration and kubeconfig with secrets redacted.
 */
import http from 'node:http';
import path from 'node:path';
import type { EngineSnapshot } from '../../engine/engine.ts';
import type { PersistedState } from '../../state/index.ts';
import { parseListen } from '../../config/index.ts';
import { readFileSmall } from '../../sources/host/index.ts';
import { errorCode, errorMessage } from '../../util/errors.ts';
import { VERSION } from '../../util/version.ts';
import { json } from './common.ts';
import type { Collector, CollectorContext, CollectorOutput } from './types.ts';

function stateFile(ctx: CollectorContext): string {
  return path.join(ctx.capture.stateDir, 'state.json');
}

/** Conditions and problems from the saved engine state, the most recent finding first. */
function activeFromState(ctx: CollectorContext): CollectorOutput {
  const file = stateFile(ctx);
  const text = readFileSmall(file);
  if (text === undefined) return { skipped: `no state file at ${file}` };
  let state: PersistedState;
  try {
    state = JSON.parse(text) as PersistedState;
  } catch (err) {
    return { error: `${file} is not valid JSON: ${errorMessage(err)}` };
  }
  const engine: EngineSnapshot | undefined = state.engine;
  const problems = [...(engine?.problems ?? [])].sort((a, b) => b.lastSeen - a.lastSeen);
  return {
    data: json({
      source: file,
      bootId: engine?.bootId ?? null,
      conditions: engine?.conditions ?? {},
      recentFindings: problems.map((p) => ({
        ...p,
        firstSeen: new Date(p.firstSeen).toISOString(),
        lastSeen: new Date(p.lastSeen).toISOString(),
      })),
      kmsgCursor: state.kmsgCursor ?? null,
    }),
    note: `${problems.length} active problems`,
  };
}

/** GET from the running agent's HTTP port; a closed port means no agent runs there (skipped, not an error). */
function fromAgent(ctx: CollectorContext, route: string): Promise<CollectorOutput> {
  const listen = parseListen(ctx.capture.config.listen);
  if (!listen) return Promise.resolve({ skipped: `listen address ${ctx.capture.config.listen} is not valid` });
  // An agent bound to every address answers on loopback.
  const host = listen.host === '0.0.0.0' || listen.host === '' ? '127.0.0.1' : listen.host === '::' ? '::1' : listen.host;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${listen.port}${route}`;
  return new Promise((resolve) => {
    const req = http.get(url, { signal: ctx.signal, timeout: Math.max(1, ctx.remainingMs()) }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let truncated = false;
      res.on('data', (c: Buffer) => {
        if (size >= ctx.maxBytes) {
          truncated = true;
          return void res.destroy();
        }
        chunks.push(c);
        size += c.length;
      });
      const done = () => resolve({ data: Buffer.concat(chunks).toString('utf8'), truncated, note: `${url}: HTTP ${res.statusCode}` });
      res.on('end', done);
      res.on('close', done);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url}`)));
    req.on('error', (err) => {
      const code = errorCode(err);
      if (code === 'ECONNREFUSED' || code === 'EADDRNOTAVAIL') resolve({ skipped: `no agent listening on ${url}` });
      else resolve({ error: `${url}: ${errorMessage(err)}` });
    });
  });
}

function readOrSkip(file: string | undefined, what: string): CollectorOutput {
  if (!file) return { skipped: `no ${what} given` };
  const text = readFileSmall(file);
  return text === undefined ? { error: `cannot read ${what} ${file}` } : { data: text };
}

export function vigilCollectors(): Collector[] {
  const c = (name: string, file: string, run: Collector['run']): Collector => ({ name: `vigil/${name}`, category: 'vigil', file, run });
  return [
    c('version', 'vigil/version.json', (ctx) =>
      Promise.resolve({
        data: json({
          version: VERSION,
          node: process.version,
          stateDir: ctx.capture.stateDir,
          configPath: ctx.capture.configPath ?? null,
          configError: ctx.capture.configError ?? null,
        }),
      }),
    ),
    c('config', 'vigil/config.yaml', (ctx) => Promise.resolve(readOrSkip(ctx.capture.configPath, 'configuration file'))),
    c('effective-config', 'vigil/effective-config.json', (ctx) => Promise.resolve({ data: json(ctx.capture.config) })),
    c('kubeconfig', 'vigil/kubeconfig', (ctx) =>
      Promise.resolve(readOrSkip(ctx.capture.config.kubernetes.kubeconfig ?? process.env.KUBECONFIG?.split(':')[0], 'kubeconfig')),
    ),
    c('state', 'vigil/state.json', (ctx) => {
      const text = readFileSmall(stateFile(ctx));
      return Promise.resolve(text === undefined ? { skipped: `no state file at ${stateFile(ctx)}` } : { data: text });
    }),
    c('active', 'vigil/active.json', (ctx) => Promise.resolve(activeFromState(ctx))),
    c('agent-conditions', 'vigil/agent-conditions.json', (ctx) => fromAgent(ctx, '/conditions')),
    c('agent-healthz', 'vigil/agent-healthz.json', (ctx) => fromAgent(ctx, '/healthz')),
    c('agent-metrics', 'vigil/agent-metrics.txt', (ctx) => fromAgent(ctx, '/metrics')),
  ];
}
