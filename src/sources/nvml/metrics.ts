/**
 * Prometheus metrics for the NVML source and the GPU monitor, registered on the registry passed in
 * (get-or-create, so two monitors on one registry share series instead of throwing).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { nvmlReturnName, NVML_RETURN } from './errors.ts';
import { NVML_FUNCTION_NAMES, type CallStats } from './protocol.ts';

function getOr<T>(registry: Registry, name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

export class NvmlMetrics {
  readonly callDuration: Histogram<'function'>;
  readonly callErrors: Counter<'function' | 'code'>;
  readonly timeouts: Counter<'function'>;
  readonly workerRestarts: Counter<'role' | 'why'>;
  readonly events: Counter<'type'>;
  readonly gpuCount: Gauge<'source'>;
  readonly pollDuration: Histogram<string>;
  readonly checkFailing: Gauge<'check' | 'gpu'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.callDuration = getOr(
      registry,
      'vigil_nvml_call_duration_seconds',
      () =>
        new Histogram({
          name: 'vigil_nvml_call_duration_seconds',
          help: 'Duration of NVML calls, by function',
          labelNames: ['function'],
          buckets: [0.0001, 0.001, 0.01, 0.1, 0.5, 1, 5, 10],
          registers,
        }),
    );
    this.callErrors = getOr(
      registry,
      'vigil_nvml_call_errors_total',
      () =>
        new Counter({
          name: 'vigil_nvml_call_errors_total',
          help: 'NVML calls that returned an error, by function and nvmlReturn_t name',
          labelNames: ['function', 'code'],
          registers,
        }),
    );
    this.timeouts = getOr(
      registry,
      'vigil_nvml_timeouts_total',
      () =>
        new Counter({
          name: 'vigil_nvml_timeouts_total',
          help: 'NVML calls that did not return within the watchdog budget',
          labelNames: ['function'],
          registers,
        }),
    );
    this.workerRestarts = getOr(
      registry,
      'vigil_nvml_worker_restarts_total',
      () =>
        new Counter({
          name: 'vigil_nvml_worker_restarts_total',
          help: 'NVML worker threads replaced, by role and reason',
          labelNames: ['role', 'why'],
          registers,
        }),
    );
    this.events = getOr(
      registry,
      'vigil_nvml_events_total',
      () =>
        new Counter({
          name: 'vigil_nvml_events_total',
          help: 'NVML events received, by event type',
          labelNames: ['type'],
          registers,
        }),
    );
    this.gpuCount = getOr(
      registry,
      'vigil_gpu_count',
      () =>
        new Gauge({
          name: 'vigil_gpu_count',
          help: 'GPUs seen by NVML (source="nvml") and expected (source="expected")',
          labelNames: ['source'],
          registers,
        }),
    );
    this.pollDuration = getOr(
      registry,
      'vigil_gpu_poll_duration_seconds',
      () =>
        new Histogram({
          name: 'vigil_gpu_poll_duration_seconds',
          help: 'Wall time of one GPU poll cycle',
          buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
          registers,
        }),
    );
    this.checkFailing = getOr(
      registry,
      'vigil_gpu_check_failing',
      () =>
        new Gauge({
          name: 'vigil_gpu_check_failing',
          help: '1 while a GPU check fails, 0 when it passes',
          labelNames: ['check', 'gpu'],
          registers,
        }),
    );
  }

  /** Folds a worker's per-call statistics into the histograms and error counters. */
  record(stats: CallStats): void {
    for (let i = 0; i + 2 < stats.length; i += 3) {
      const fn = NVML_FUNCTION_NAMES[stats[i]] ?? 'unknown';
      const rc = stats[i + 2];
      this.callDuration.observe({ function: fn }, stats[i + 1] / 1000);
      // TIMEOUT is how an event wait says "nothing happened": not an error.
      if (rc !== NVML_RETURN.SUCCESS && !(fn === 'nvmlEventSetWait_v2' && rc === NVML_RETURN.TIMEOUT)) {
        this.callErrors.inc({ function: fn, code: nvmlReturnName(rc) });
      }
    }
  }
}
