/**
 * Runs the NVML event loop (the agent's GpuMonitor, events on) for a short window and prints what
 * happened as JSON: registration per GPU, findings from events, failures. With --inject (only with
 * the fake library, a stand-in) it appends an Xid 48 and a single-bit ECC event to the fake's
 * scenario mid-window and reports how long each took to arrive.
 *
 *   node --import tsx bench/gpu/event-window.ts --seconds 20 [--library P] [--sys-root D] [--inject]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Registry } from 'prom-client';
import type { Finding } from '../../src/api/types.ts';
import { GpuMonitor } from '../../src/monitors/gpu/monitor.ts';
import { exitNow, nvmlThreadsLeft } from '../../src/sources/nvml/client.ts';
import { writeFakeConfig, type FakeNvmlConfig } from '../../native/fake-nvml/build.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    library: { type: 'string' },
    'sys-root': { type: 'string' },
    inject: { type: 'boolean', default: false },
  },
});
const windowMs = Number(values.seconds) * 1000;
const findings: (Finding & { receivedAt: number })[] = [];
const sources: { up: boolean; message?: string }[] = [];
const monitor = new GpuMonitor({
  config: { events: true, ...(values.library ? { libraryPath: values.library } : {}) },
  registry: new Registry(),
  ownTimer: false,
  ...(values['sys-root'] ? { sysRoot: values['sys-root'] } : {}),
});
const t0 = Date.now();
await monitor.start({
  finding: (f) => void findings.push({ ...f, receivedAt: Date.now() }),
  healthy: () => {},
  source: (r) => void sources.push({ up: r.up, ...(r.message ? { message: r.message } : {}) }),
});
const startFindings = findings.length;
const injected: { kind: string; gpu: number; sentAt: number; reason: string }[] = [];
if (values.inject) {
  const path = process.env.FAKE_NVML_CONFIG;
  if (!path) throw new Error('--inject needs FAKE_NVML_CONFIG (the fake library stand-in)');
  const cfg = JSON.parse(readFileSync(path, 'utf8')) as FakeNvmlConfig;
  const add = (gpu: number, type: number, data: number, kind: string, reason: string) => {
    const id = Math.max(0, ...(cfg.events ?? []).map((e) => e.id)) + 1;
    cfg.events = [...(cfg.events ?? []), { id, gpu, type, data }];
    writeFakeConfig(path, cfg);
    injected.push({ kind, gpu, sentAt: Date.now(), reason });
  };
  await new Promise((r) => setTimeout(r, Math.min(2_000, windowMs / 4)));
  add(0, 0x8, 48, 'Xid 48', 'NvidiaXID48Error');
  await new Promise((r) => setTimeout(r, 500));
  add(0, 0x1, 0, 'single-bit ECC', 'NvidiaSingleBitEccError');
}
const left = windowMs - (Date.now() - t0);
if (left > 0) await new Promise((r) => setTimeout(r, left));
const snap = monitor.snapshot();
await monitor.stop();
const fromEvents = findings.slice(startFindings);
const out = {
  windowMs,
  ranMs: Date.now() - t0,
  state: snap.state,
  nvmlUsable: snap.nvmlUsable,
  events: snap.events,
  sources,
  findings: fromEvents.map((f) => ({ reason: f.reason, entity: f.entity, source: f.source, message: f.message })),
  injected: injected.map((i) => {
    const hit = fromEvents.find((f) => f.reason === i.reason && f.receivedAt >= i.sentAt);
    return { ...i, arrivedMs: hit ? hit.receivedAt - i.sentAt : null };
  }),
};
process.stdout.write(`${JSON.stringify(out)}\n`);
if (nvmlThreadsLeft() > 0) exitNow(0);
