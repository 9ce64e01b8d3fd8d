/** Building blocks shared by the category collectors: host files and commands. */
import { readFileSmall } from '../../sources/host/index.ts';
import type { DiagnosticCategory } from '../bundle.ts';
import { MissingToolError, type Collector, type CollectorContext, type CollectorOutput } from './types.ts';

/** Several files in one bundle entry, each under a `==> path <==` header (as `tail` prints them). */
export function readFiles(ctx: CollectorContext, paths: readonly string[]): { text: string; found: number } {
  const parts: string[] = [];
  let found = 0;
  for (const p of paths) {
    const text = readFileSmall(ctx.host(p));
    if (text === undefined) continue;
    found++;
    parts.push(paths.length > 1 ? `==> ${p} <==\n${text}${text.endsWith('\n') ? '' : '\n'}` : text);
  }
  return { text: parts.join('\n'), found };
}

/** Host files (under the host root); skipped when none of them exists. */
export function filesCollector(name: string, category: DiagnosticCategory, file: string, paths: readonly string[]): Collector {
  return {
    name,
    category,
    file,
    run: (ctx) => {
      const { text, found } = readFiles(ctx, paths);
      return Promise.resolve(found ? { data: text } : { skipped: `not present: ${paths.join(', ')}` });
    },
  };
}

/**
 * Runs each command in turn and keeps their output under `$ command` headers. When the first
 * program is not installed, `fallback` (reading /proc and /sys) answers instead, and the manifest
 * says so; without a fallback the collector is skipped with the missing tool named.
 */
export function commandCollector(
  name: string,
  category: DiagnosticCategory,
  file: string,
  commands: readonly (readonly string[])[],
  fallback?: (ctx: CollectorContext) => string | undefined,
  timeoutScale?: number,
): Collector {
  return {
    name,
    category,
    file,
    ...(timeoutScale ? { timeoutScale } : {}),
    run: async (ctx) => {
      try {
        return await runCommands(ctx, commands);
      } catch (err) {
        if (!(err instanceof MissingToolError)) throw err;
        const text = fallback?.(ctx);
        if (text === undefined) return { skipped: err.message };
        return { data: text, note: `${err.message}; read from /proc and /sys instead` };
      }
    },
  };
}

/** Runs the commands one after another; a missing first program throws, later missing ones are noted. */
export async function runCommands(ctx: CollectorContext, commands: readonly (readonly string[])[]): Promise<CollectorOutput> {
  const parts: string[] = [];
  const errors: string[] = [];
  let truncated = false;
  let timedOut = false;
  let left = ctx.maxBytes;
  for (const [i, argv] of commands.entries()) {
    if (left <= 0 || ctx.signal.aborted) break;
    let r;
    try {
      r = await ctx.exec(argv, { maxBytes: left });
    } catch (err) {
      if (err instanceof MissingToolError && i > 0) {
        errors.push(err.message);
        continue;
      }
      throw err;
    }
    const header = commands.length > 1 ? `$ ${argv.join(' ')}\n` : '';
    parts.push(`${header}${r.stdout}${r.stdout.endsWith('\n') || !r.stdout ? '' : '\n'}`);
    left -= Buffer.byteLength(r.stdout);
    truncated ||= r.truncated;
    if (r.timedOut) {
      timedOut = true;
      errors.push(`${argv[0]} timed out; its process group was killed`);
      break;
    }
    if (r.code !== 0 && !r.truncated) errors.push(`${argv.join(' ')} exited ${r.code ?? 'on a signal'}${stderrTail(r.stderr)}`);
  }
  const data = parts.join('\n');
  const out: CollectorOutput = { data, truncated, timedOut };
  // A command that failed but printed something still counts as collected; the failure is a note.
  if (errors.length && (timedOut || data.trim() === '')) out.error = errors.join('; ');
  else if (errors.length) out.note = errors.join('; ');
  return out;
}

function stderrTail(stderr: string): string {
  const s = stderr.trim().split('\n').slice(-3).join(' | ');
  return s ? `: ${s.slice(0, 300)}` : '';
}

/** JSON for a bundle entry. */
export function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
