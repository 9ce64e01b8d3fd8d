/** `vigil scan`'s assembly: a LogReplay whose engine is built here, like the live agent's. */
import { LogReplay, type ReplayOptions } from '../pipeline/replay.ts';
import { createEngine } from './engine.ts';

export function createReplay(o: Omit<ReplayOptions, 'engine'>): LogReplay {
  return new LogReplay({ ...o, engine: (parts) => createEngine(o.config, { bootId: 'replay', ...parts }) });
}
