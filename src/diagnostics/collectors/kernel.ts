/**
 * kernel: the kernel log ring, read once from /dev/kmsg without blocking, kept in the device's own
 * record format so `vigil scan --format kmsg kernel/kmsg.log` replays it through the agent's
 * pipeline; uname, modules, boot id, command line and taint flags.
 */
import { closeSync, constants, openSync, readSync } from 'node:fs';
import os from 'node:os';
import { parseKmsgRecord } from '../../sources/kmsg/parse.ts';
import { readFileSmall } from '../../sources/host/index.ts';
import { errorCode, errorMessage } from '../../util/errors.ts';
import { filesCollector, json } from './common.ts';
import type { Collector, CollectorContext, CollectorOutput } from './types.ts';

/** The kernel returns one record per read and refuses buffers under 8 KiB (same size as the agent's reader). */
const RECORD_BUFFER = 16 * 1024;

/**
 * Drains what the ring holds now, oldest first, and stops at EAGAIN (never waits for new records).
 * Over the size cap the oldest records go: the newest are the ones around a fault. Each record is
 * checked with the agent's own parser; ring overruns (EPIPE) are counted from sequence gaps.
 */
export function readKernelRing(path: string, maxBytes: number, signal?: AbortSignal): CollectorOutput {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    return { error: `cannot open ${path}: ${errorMessage(err)}` };
  }
  const buf = Buffer.alloc(RECORD_BUFFER);
  const records: string[] = [];
  let bytes = 0;
  let dropped = 0;
  let lost = 0;
  let unparsed = 0;
  let lastSeq = -1;
  let error: string | undefined;
  try {
    // A burst written while we read cannot keep us here: stop after the ring's worth and then some.
    for (let i = 0; i < 1_000_000 && !signal?.aborted; i++) {
      let n: number;
      try {
        n = readSync(fd, buf, 0, buf.length, null);
      } catch (err) {
        const code = errorCode(err);
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') break;
        if (code === 'EPIPE' || code === 'EINTR') continue;
        error = `reading ${path}: ${errorMessage(err)}`;
        break;
      }
      if (n <= 0) break;
      const text = buf.toString('utf8', 0, n);
      const rec = parseKmsgRecord(text);
      if (!rec) unparsed++;
      else {
        if (lastSeq >= 0 && rec.seq > lastSeq + 1) lost += rec.seq - lastSeq - 1;
        lastSeq = rec.seq;
      }
      const line = text.endsWith('\n') ? text : `${text}\n`;
      records.push(line);
      bytes += Buffer.byteLength(line);
      while (bytes > maxBytes && records.length) {
        bytes -= Buffer.byteLength(records.shift()!);
        dropped++;
      }
    }
  } finally {
    closeSync(fd);
  }
  const notes = [`${records.length} records`];
  if (dropped) notes.push(`${dropped} oldest records left out to stay under the size cap`);
  if (lost) notes.push(`${lost} records overwritten in the ring while reading`);
  if (unparsed) notes.push(`${unparsed} records not in /dev/kmsg format`);
  return { data: records.join(''), truncated: dropped > 0, note: notes.join('; '), ...(error ? { error } : {}) };
}

function kernelInfo(ctx: CollectorContext): string {
  const read = (p: string) => readFileSmall(ctx.host(p))?.trim();
  return json({
    uname: { sysname: os.type(), release: os.release(), version: os.version(), machine: os.machine(), hostname: os.hostname() },
    bootId: read('/proc/sys/kernel/random/boot_id') ?? null,
    procVersion: read('/proc/version') ?? null,
    cmdline: read('/proc/cmdline') ?? null,
    tainted: read('/proc/sys/kernel/tainted') ?? null,
    uptimeSeconds: Number(read('/proc/uptime')?.split(/\s+/)[0] ?? NaN) || null,
  });
}

export function kernelCollectors(): Collector[] {
  return [
    {
      name: 'kernel/kmsg',
      category: 'kernel',
      file: 'kernel/kmsg.log',
      run: (ctx) => Promise.resolve(readKernelRing(ctx.capture.kernelLogPath, ctx.maxBytes, ctx.signal)),
    },
    { name: 'kernel/info', category: 'kernel', file: 'kernel/info.json', run: (ctx) => Promise.resolve({ data: kernelInfo(ctx) }) },
    filesCollector('kernel/modules', 'kernel', 'kernel/modules.txt', ['/proc/modules']),
  ];
}
