/** Writes findings and condition changes as structured JSON log lines (pino). */
import type { Logger } from 'pino';
import type { EngineEvent, Sink } from '../../api/types.ts';

export class LogSink implements Sink {
  readonly name = 'log';

  constructor(private readonly log: Logger) {}

  handle(event: EngineEvent): void {
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
      case 'repeat':
        break; // counted in metrics; logging every repeat would flood the log
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
