/** A Finding with the fields every host check fills the same way. */
import type { BuiltinFinding, SourceName } from '../api/types.ts';
import type { ReasonName } from '../catalog/index.ts';

export function finding(
  reason: ReasonName,
  source: SourceName,
  entity: string,
  message: string,
  at: number,
  attrs?: Record<string, string | number | boolean>,
): BuiltinFinding {
  return attrs ? { reason, source, entity, message, at, attrs } : { reason, source, entity, message, at };
}

export const pct = (r: number): string => `${(r * 100).toFixed(1)}%`;
