/**
 * An injected clock and node:test's mocked timers (setTimeout, setInterval) that move together,
 * installed around every test of the file that calls it: the engine and the sink see the same time.
 */
import { afterEach, beforeEach, mock } from 'node:test';

export interface MockClock {
  /** The injected clock's time, in ms since the epoch. */
  readonly now: () => number;
  /** Advances the clock and the mocked timers by `ms`, then lets the writes they started settle. */
  readonly advance: (ms: number) => Promise<void>;
  /** Moves only the injected clock (no timer fires): time that passed while nothing ran. */
  readonly jump: (ms: number) => void;
}

export function useMockClock(start = '2026-12-01T00:00:00Z'): MockClock {
  let t = 0;
  beforeEach(() => {
    t = Date.parse(start);
    mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  });
  afterEach(() => mock.timers.reset());
  return {
    now: () => t,
    advance: async (ms) => {
      t += ms;
      mock.timers.tick(ms);
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    },
    jump: (ms) => {
      t += ms;
    },
  };
}
