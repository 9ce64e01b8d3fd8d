/** A Finding with the fields every host check fills the same way. */
import type { Finding, SourceName } from '../api/types.ts';

export function finding(
  reason: string,
  source: SourceName,
  entity: string,
  message: string,
  at: number,
  attrs?: Record<string, string | number | boolean>,
): Finding {
  return attrs ? { reason, source, entity, message, at, attrs } : { reason, source, entity, message, at };
}

export const pct = (r: number): string => `${(r * 100).toFixed(1)}%`;
