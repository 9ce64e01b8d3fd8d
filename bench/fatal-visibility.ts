/**
 * Every distinct Fatal visible, at any pace (issue #26 point 4), for bench:compare: a long-lived
 * pair of agents (Vigil and NPD, each on its own Node, both reading the real /dev/kmsg) meets Xid 79
 * faults on distinct GPUs, each a new PCI address:
 *
 * - stream: BENCH_STREAM_FAULTS (200) faults at gaps drawn uniformly from 500-2000 ms (deterministic
 *   PRNG): about 4 minutes, past the Fatal Event budget's first minute (30) and its refill.
 * - burst: BENCH_BURST_FAULTS (100) faults within one second (evenly spaced).
 *
 * A fault is visible when the API server shows, within 1 s of its write, an Event on the agent's Node
 * or a change of one of its Node's conditions whose text names the fault's GPU (bench/peers/
 * observer.ts, the same sign as compare's other figures). The ratio is visible / faults. Both run
 * with the agents' shipped budgets (Vigil: 30 Fatal Events per reason per minute, then summary
 * Events; NPD: client-go's Event spam filter). The kernel ring is held (flock, as the storm does)
 * so no other writer's storm overwrites the faults while they are read.
 */
import { uniquePci, writeKmsg } from '../test/helpers/agent-process.ts';
import { percentile } from '../test/helpers/kmsg-burst.ts';
import { benchNow, names, type ApiObserver } from './peers/observer.ts';

type Agent = 'vigil' | 'npd';

export const STREAM_FAULTS = Number(process.env.BENCH_STREAM_FAULTS ?? 200);
export const BURST_FAULTS = Number(process.env.BENCH_BURST_FAULTS ?? 100);
/** How long after its write a fault may take to be named. */
const VISIBLE_MS = 1000;

export interface VisibilityPair {
  vNode: string;
  nNode: string;
  stop(): Promise<void>;
}

export interface VisibilityResult {
  ratio: Record<Agent, number>;
  notes: Record<string, unknown>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Writes `faults` Xid 79 lines (one per new GPU) with the gaps `gap(i)` gives, then reads which
 * were named within 1 s. `line` builds the fault's kmsg text from its PCI address and index.
 */
async function visibility(
  obs: ApiObserver,
  pair: VisibilityPair,
  faults: number,
  gap: (i: number) => number,
  line: (pci: string, i: number) => string,
): Promise<VisibilityResult> {
  const written: { pci: string; at: number }[] = [];
  const t0 = Date.now();
  // Each write at its planned time (the gaps add up), however long the writes themselves take.
  let planned = t0;
  for (let i = 0; i < faults; i++) {
    const pci = uniquePci();
    const at = benchNow();
    writeKmsg(line(pci, i), 4);
    written.push({ pci, at });
    if (i === faults - 1) break;
    planned += gap(i);
    await sleep(Math.max(0, planned - Date.now()));
  }
  const span = Date.now() - t0;
  // Signs come in up to VISIBLE_MS after the last write; a late one still counts as ever visible.
  await sleep(VISIBLE_MS + 2000);
  const ratio = { vigil: 0, npd: 0 };
  const notes: Record<string, unknown> = { faults, span_ms: span };
  for (const [agent, node] of [
    ['vigil', pair.vNode],
    ['npd', pair.nNode],
  ] as const) {
    const lat: number[] = [];
    const missed: number[] = [];
    const kinds = { event: 0, condition: 0 };
    for (const [i, f] of written.entries()) {
      const s = obs.signs.find((x) => x.at >= f.at && names(node, f.pci)(x));
      const ms = s ? s.at - f.at : Infinity;
      if (s && ms <= VISIBLE_MS) {
        lat.push(ms);
        kinds[s.kind]++;
      } else missed.push(i);
    }
    ratio[agent] = lat.length / faults;
    notes[agent] = {
      visible: lat.length,
      sign_p50_ms: percentile(lat, 50),
      sign_p99_ms: percentile(lat, 99),
      first_sign_kinds: kinds,
      // Indexes (0-based) of faults not named within 1 s; at most 30 listed.
      missed: missed.slice(0, 30),
      missed_count: missed.length,
    };
  }
  return { ratio, notes };
}

/** The stream: STREAM_FAULTS faults 0.5-2 s apart (gaps from `rand`, uniform). */
export function streamVisibility(
  obs: ApiObserver,
  pair: VisibilityPair,
  rand: () => number,
  line: (pci: string, i: number) => string,
): Promise<VisibilityResult> {
  return visibility(obs, pair, STREAM_FAULTS, () => 500 + rand() * 1500, line);
}

/** The burst: BURST_FAULTS faults within one second. */
export function burstVisibility(
  obs: ApiObserver,
  pair: VisibilityPair,
  line: (pci: string, i: number) => string,
): Promise<VisibilityResult> {
  return visibility(obs, pair, BURST_FAULTS, () => 1000 / BURST_FAULTS, line);
}
