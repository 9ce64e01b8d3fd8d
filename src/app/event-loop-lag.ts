/**
 * Event-loop lag under prom-client's names (`<prefix>nodejs_eventloop_lag_*`), measured as how late
 * a periodic timer runs. prom-client's gauges come from Node's monitorEventLoopDelay, which records
 * each timer interval whole, the period included, so they read the period itself (1 s here) on an
 * idle loop; and the histogram's reset on every scrape also forgets the next interval.
 */
import { performance } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';

/** The names prom-client's default metrics use for event-loop lag (without the prefix). */
export const EVENT_LOOP_LAG_NAMES = [
  'nodejs_eventloop_lag_seconds',
  'nodejs_eventloop_lag_min_seconds',
  'nodejs_eventloop_lag_max_seconds',
  'nodejs_eventloop_lag_mean_seconds',
  'nodejs_eventloop_lag_stddev_seconds',
  'nodejs_eventloop_lag_p50_seconds',
  'nodejs_eventloop_lag_p90_seconds',
  'nodejs_eventloop_lag_p99_seconds',
] as const;

/**
 * A resolution for prom-client's own histogram that its timer never reaches (about 24 days):
 * collectDefaultMetrics cannot leave event-loop lag out, and its gauges are replaced here.
 */
export const UNUSED_RESOLUTION_MS = 2 ** 31 - 1;

/** Samples kept between two scrapes at most (an hour at 1 s): the oldest go first. */
const MAX_SAMPLES = 3600;

export interface LagStats {
  min: number;
  max: number;
  mean: number;
  stddev: number;
  p50: number;
  p90: number;
  p99: number;
}

/** Statistics of lag samples (seconds); nearest-rank percentiles. Undefined without samples. */
export function lagStats(samples: readonly number[]): LagStats | undefined {
  if (samples.length === 0) return undefined;
  const s = [...samples].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  const rank = (p: number) => s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)];
  return {
    min: s[0],
    max: s[s.length - 1],
    mean,
    stddev: Math.sqrt(s.reduce((a, b) => a + (b - mean) ** 2, 0) / s.length),
    p50: rank(50),
    p90: rank(90),
    p99: rank(99),
  };
}

/** How late each tick of a periodic timer ran past its period. */
export class LagSampler {
  private last: number;
  private samples: number[] = [];

  constructor(
    private readonly periodMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.last = now();
  }

  /** Called by the timer: records the time since the previous tick less the period. */
  tick(): void {
    const t = this.now();
    if (this.samples.length >= MAX_SAMPLES) this.samples.shift();
    this.samples.push(Math.max(0, t - this.last - this.periodMs) / 1000);
    this.last = t;
  }

  /** The samples since the previous take. */
  take(): number[] {
    const s = this.samples;
    this.samples = [];
    return s;
  }
}

/**
 * Replaces prom-client's event-loop lag gauges in `registry` with ones from a timer every
 * `periodMs` (unref'd). Each scrape reports the ticks since the previous one; a scrape with no new
 * tick keeps the previous values.
 */
export function registerEventLoopLag(registry: Registry, prefix: string, periodMs: number): void {
  for (const name of EVENT_LOOP_LAG_NAMES) registry.removeSingleMetric(prefix + name);
  const sampler = new LagSampler(periodMs);
  setInterval(() => sampler.tick(), periodMs).unref();
  const gauge = (stat: string, help: string) =>
    new Gauge({ name: `${prefix}nodejs_eventloop_lag_${stat}_seconds`, help, registers: [registry] });
  const gauges: Record<keyof LagStats, Gauge> = {
    min: gauge('min', 'The minimum recorded event loop delay.'),
    max: gauge('max', 'The maximum recorded event loop delay.'),
    mean: gauge('mean', 'The mean of the recorded event loop delays.'),
    stddev: gauge('stddev', 'The standard deviation of the recorded event loop delays.'),
    p50: gauge('p50', 'The 50th percentile of the recorded event loop delays.'),
    p90: gauge('p90', 'The 90th percentile of the recorded event loop delays.'),
    p99: gauge('p99', 'The 99th percentile of the recorded event loop delays.'),
  };
  const lag: Gauge = new Gauge({
    name: `${prefix}nodejs_eventloop_lag_seconds`,
    help: 'Lag of event loop in seconds.',
    registers: [registry],
    collect() {
      // Time to the next turn of the loop, reported by the next scrape (as prom-client does).
      const start = process.hrtime.bigint();
      setImmediate(() => lag.set(Number(process.hrtime.bigint() - start) / 1e9));
      const stats = lagStats(sampler.take());
      if (!stats) return;
      for (const k of Object.keys(gauges) as (keyof LagStats)[]) gauges[k].set(stats[k]);
    },
  });
}
