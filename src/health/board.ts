/**
 * The agent's own health: one entry per component (a source, the state store, the kmsg ring).
 * /healthz answers from here: any component `failed` fails it (503), `degraded` is served as 200
 * with status "degraded". Each change of state is logged once, so a broken part is never silent
 * and a persistent one does not flood the log.
 */
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';

/** ok: works; degraded: works but lost something (say what); failed: cannot do its job; off: not configured. */
export type ComponentState = 'ok' | 'degraded' | 'failed' | 'off';

export interface ComponentHealth {
  state: ComponentState;
  message: string;
  /** When the component entered this state (ISO 8601). */
  since: string;
}

const LEVEL: Record<ComponentState, number> = { ok: 0, off: 0, degraded: 1, failed: 2 };

export class HealthBoard {
  private readonly parts = new Map<string, ComponentHealth>();
  private readonly gauge: Gauge<'component'>;

  constructor(
    private readonly log: Logger,
    registry: Registry,
    private readonly now: () => number = Date.now,
  ) {
    this.gauge = new Gauge({
      name: 'vigil_component_health',
      help: 'Health of each part of the agent: 0 ok or off, 1 degraded, 2 failed (/healthz fails).',
      labelNames: ['component'],
      registers: [registry],
    });
  }

  /** Records a component's state; logs only when the state or message changes. */
  set(component: string, state: ComponentState, message: string): void {
    const prev = this.parts.get(component);
    if (prev && prev.state === state && prev.message === message) return;
    const since = prev && prev.state === state ? prev.since : new Date(this.now()).toISOString();
    this.parts.set(component, { state, message, since });
    this.gauge.set({ component }, LEVEL[state]);
    if (prev?.state === state && state === 'degraded') return; // a growing count is on /healthz, not a log line each time
    const fields = { event: 'health', component, state, previous: prev?.state ?? null };
    const text = `${component} is ${state}: ${message}`;
    if (state === 'failed') this.log.error(fields, text);
    else if (state === 'degraded') this.log.warn(fields, text);
    else if (prev && prev.state !== state) this.log.info(fields, text);
  }

  get(component: string): ComponentHealth | undefined {
    return this.parts.get(component);
  }

  overall(): 'ok' | 'degraded' | 'failed' {
    let worst = 0;
    for (const p of this.parts.values()) worst = Math.max(worst, LEVEL[p.state]);
    return worst === 2 ? 'failed' : worst === 1 ? 'degraded' : 'ok';
  }

  snapshot(): Record<string, ComponentHealth> {
    // Code-unit order: localeCompare would load ICU's collator, about 2.5 MiB of RSS, on the first probe.
    return Object.fromEntries([...this.parts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}
