/**
 * Counter baselines that survive an agent restart (kept in the state file, key `gpu`): the last
 * ECC, PCIe replay and NVLink error-counter readings per GPU (by UUID) and the last AER reading per
 * PCI device. After a restart the checks judge the increase since these readings, so an old count
 * is not raised again and a count that grew while the agent was down is not hidden.
 *
 * Readings from another boot are dropped (the driver's volatile counters and the kernel's AER
 * counters restart at boot), and so are readings older than the window (`gpu.counterWindow`): an
 * increase is only judged over a bounded time.
 */
import * as z from 'zod';
import type { AerHistory, AerReading } from './aer.ts';
import { initialCheckState, type GpuCheckState } from './checks.ts';

const reading = z.object({ value: z.number().nonnegative(), at: z.number() });
const counts = z.number().nonnegative().nullable();

const gpuBaseline = z.object({
  ecc: reading.optional(),
  eccCorrected: reading.optional(),
  replay: reading.optional(),
  nvlink: z.object({ at: z.number(), perLink: z.array(z.array(z.number()).nullable()) }).optional(),
});

export const persistedGpuBaselines = z.object({
  bootId: z.string(),
  gpus: z.record(z.string(), gpuBaseline),
  aer: z.record(z.string(), z.object({ correctable: counts, nonfatal: counts, fatal: counts, at: z.number() })).optional(),
});

export type PersistedGpuBaselines = z.infer<typeof persistedGpuBaselines>;

/** The persistable part of the checks' state. */
export function exportBaselines(bootId: string, states: ReadonlyMap<string, GpuCheckState>, aer: AerHistory): PersistedGpuBaselines {
  const gpus: PersistedGpuBaselines['gpus'] = {};
  for (const [key, s] of states) {
    const b: PersistedGpuBaselines['gpus'][string] = {};
    if (s.ecc !== null && s.eccAt != null) b.ecc = { value: s.ecc, at: s.eccAt };
    if (s.eccCorrected) b.eccCorrected = { ...s.eccCorrected };
    if (s.replay) b.replay = { ...s.replay };
    if (s.nvlinkCounters) b.nvlink = { at: s.nvlinkCounters.at, perLink: s.nvlinkCounters.perLink };
    if (Object.keys(b).length) gpus[key] = b;
  }
  const aerOut: NonNullable<PersistedGpuBaselines['aer']> = {};
  for (const [bdf, h] of aer) {
    const last = h[h.length - 1];
    if (last) aerOut[bdf] = { ...last };
  }
  return { bootId, gpus, ...(Object.keys(aerOut).length ? { aer: aerOut } : {}) };
}

export interface RestoredBaselines {
  states: Map<string, GpuCheckState>;
  aer: AerHistory;
  /** Why nothing or only part was restored, for the log. */
  note: string | null;
}

/** Baselines to start from: what was persisted on this boot within the window; the rest is dropped. */
export function importBaselines(raw: unknown, bootId: string, now: number, windowMs: number): RestoredBaselines {
  const empty = (note: string | null): RestoredBaselines => ({ states: new Map(), aer: new Map(), note });
  if (raw === undefined) return empty(null);
  const parsed = persistedGpuBaselines.safeParse(raw);
  if (!parsed.success) return empty(`persisted GPU counter baselines ignored: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  const p = parsed.data;
  if (p.bootId !== bootId) return empty('persisted GPU counter baselines are from another boot; counters restart at boot');
  const fresh = (at: number) => now - at <= windowMs && at <= now;
  let stale = 0;
  const keep = <T extends { at: number }>(r: T | undefined): T | null => {
    if (!r) return null;
    if (fresh(r.at)) return r;
    stale++;
    return null;
  };
  const states = new Map<string, GpuCheckState>();
  for (const [key, b] of Object.entries(p.gpus)) {
    const s = initialCheckState();
    const ecc = keep(b.ecc);
    if (ecc) {
      s.ecc = ecc.value;
      s.eccAt = ecc.at;
    }
    s.eccCorrected = keep(b.eccCorrected);
    s.replay = keep(b.replay);
    s.nvlinkCounters = keep(b.nvlink);
    states.set(key, s);
  }
  const aer: AerHistory = new Map();
  for (const [bdf, r] of Object.entries(p.aer ?? {})) {
    const kept = keep<AerReading>(r);
    if (kept) aer.set(bdf, [kept]);
  }
  return { states, aer, note: stale ? `${stale} persisted GPU counter baselines were older than the window and were dropped` : null };
}
