/**
 * gpu: the NVML inventory and every check's result through the agent's own GPU monitor (the same
 * path as `vigil gpu --json`, so NVML that cannot be loaded is recorded as the monitor reports it),
 * `nvidia-smi -q`, and nvidia-bug-report.sh's log when the script is installed.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { createGunzip } from 'node:zlib';
import { errorMessage } from '../../util/errors.ts';
import { commandCollector } from './common.ts';
import { MissingToolError, type Collector, type CollectorContext, type CollectorOutput } from './types.ts';

async function nvml(ctx: CollectorContext): Promise<CollectorOutput> {
  // Loaded here so a capture without the gpu category never loads koffi.
  const { runGpuCommand } = await import('../../cli/gpu-command.ts');
  const gpu = ctx.capture.config.gpu;
  let text = '';
  const exitCode = await runGpuCommand({
    json: true,
    config: { ...gpu, fatalXids: ctx.capture.config.xid.fatal },
    sysRoot: ctx.host('/sys'),
    write: (t) => void (text += t),
    // The capture process ends with exitNow when an NVML call is still hung (collect-child.ts).
    exitIfHung: false,
  });
  const note =
    exitCode === 3
      ? 'no NVIDIA GPU on the PCI bus'
      : exitCode === 2
        ? `NVML unusable (library ${gpu.libraryPath}): see "checks"`
        : exitCode === 1
          ? 'a GPU check fails: see "checks"'
          : 'every GPU check passes';
  return { data: text, note };
}

/** nvidia-bug-report.sh writes a gzip file; the bundle keeps its text, redacted like everything else. */
async function bugReport(ctx: CollectorContext): Promise<CollectorOutput> {
  const dir = await mkdtemp(path.join(ctx.capture.scratchDir, 'bug-report-'));
  try {
    const base = path.join(dir, 'nvidia-bug-report.log');
    let r;
    try {
      r = await ctx.exec(['nvidia-bug-report.sh', '--output-file', base], { maxBytes: 64 * 1024 });
    } catch (err) {
      if (err instanceof MissingToolError) return { skipped: err.message };
      throw err;
    }
    const gz = `${base}.gz`;
    const made = await stat(gz).catch(() => undefined);
    if (!made) {
      const why = r.timedOut ? 'timed out; its process group was killed' : `exited ${r.code ?? 'on a signal'}`;
      return { error: `nvidia-bug-report.sh ${why} without writing ${path.basename(gz)}`, timedOut: r.timedOut };
    }
    const { text, truncated } = await gunzipCapped(gz, ctx.maxBytes, ctx.signal);
    return {
      data: text,
      truncated,
      timedOut: r.timedOut,
      ...(r.timedOut ? { error: 'nvidia-bug-report.sh timed out; its process group was killed (partial report kept)' } : {}),
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function gunzipCapped(file: string, maxBytes: number, signal: AbortSignal): Promise<{ text: string; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  const stream = createReadStream(file, { signal }).pipe(createGunzip());
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      const room = maxBytes - size;
      chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
      size += Math.min(chunk.length, room);
      if (chunk.length > room) {
        truncated = true;
        break;
      }
    }
  } catch (err) {
    // A report cut short by the timeout ends mid-stream: keep what decompressed.
    if (!chunks.length) throw new Error(`reading the bug report: ${errorMessage(err)}`, { cause: err });
    truncated = true;
  } finally {
    stream.destroy();
  }
  return { text: Buffer.concat(chunks, size).toString('utf8'), truncated };
}

export function gpuCollectors(): Collector[] {
  return [
    { name: 'gpu/nvml', category: 'gpu', file: 'gpu/nvml.json', run: nvml },
    commandCollector('gpu/nvidia-smi', 'gpu', 'gpu/nvidia-smi-q.txt', [['nvidia-smi', '-q']]),
    { name: 'gpu/nvidia-bug-report', category: 'gpu', file: 'gpu/nvidia-bug-report.log', timeoutScale: 6, run: bugReport },
  ];
}
