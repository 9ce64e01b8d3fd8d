/**
 * Writes findings and condition changes as structured JSON log lines (pino), in order, once the
 * turn that found them is over: the Kubernetes sink's request leaves only after the turn's
 * synchronous work, and a fresh agent's first line (0.2-0.5 ms to build while its code is cold)
 * need not go before the first signal. close() writes what is still waiting.
 */
import type { Logger } from 'pino';
import type { EngineEvent, Sink } from '../../api/types.ts';

export class LogSink implements Sink {
  readonly name = 'log';
  private pending: EngineEvent[] = [];
  private scheduled: NodeJS.Immediate | undefined;

  constructor(private readonly log: Logger) {}

  handle(event: EngineEvent): void {
    if (event.kind === 'repeat') return; // counted in metrics; logging every repeat would flood the log
    this.pending.push(event);
    this.scheduled ??= setImmediate(() => this.flush());
  }

  close(): Promise<void> {
    this.flush();
    return Promise.resolve();
  }

  private flush(): void {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = undefined;
    const events = this.pending;
    this.pending = [];
    for (const e of events) this.write(e);
  }

  private write(event: EngineEvent): void {
    switch (event.kind) {
      case 'finding': {
        const f = event.finding;
        const level = f.severity === 'Info' ? 'info' : 'warn';
        this.log[level](
          {
            event: 'finding',
            reason: f.reason,
            severity: f.severity,
            condition: f.condition,
            entity: f.entity,
            source: f.source,
            count: f.count,
            action: f.action,
            attrs: f.attrs,
          },
          f.message,
        );
        break;
      }
      case 'condition': {
        const c = event.condition;
        this.log[c.status === 'False' ? 'error' : 'info'](
          {
            event: 'condition',
            type: c.name,
            status: c.status,
            previous: event.previous,
            reason: c.reason,
            lastTransitionTime: c.lastTransitionTime,
          },
          `${c.name} is ${c.status}: ${c.message}`,
        );
        break;
      }
      case 'recovered':
        this.log.info(
          {
            event: 'recovered',
            reason: event.problem.reason,
            entity: event.problem.entity,
            condition: event.problem.condition,
            why: event.why,
          },
          `${event.problem.reason} recovered (${event.why})`,
        );
        break;
    }
  }
}
