/**
 * The one duration parser, for the config, the catalog, user rules and NPD files: Go-style strings
 * such as 250ms, 30s, 5m, 1h, 2d, 1h30m, 1.5h and 0.
 */
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$/;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/g;

/**
 * The longest delay a Node.js timer can hold (2^31 - 1 ms, about 24.8 days): a longer one fires
 * after 1 ms, so a period above it would spin. Every configured timer period is refused above it.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Why `ms` cannot be a timer's delay, or undefined when it can. */
export function timerLimitProblem(ms: number): string | undefined {
  return ms > MAX_TIMER_MS ? `at most ${MAX_TIMER_MS} ms (about 24.8 days, the longest a timer can wait)` : undefined;
}

/** Milliseconds, or undefined when `text` is not a duration. */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === '0') return 0;
  if (!DURATION.test(s)) return undefined;
  let ms = 0;
  for (const [, n, unit] of s.matchAll(PART)) ms += Number(n) * UNIT_MS[unit];
  return Math.round(ms);
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
