/**
 * Persists what must survive an agent restart (engine state and the kmsg cursor) in one JSON file,
 * written atomically (temp file, fsync, rename) so a crash leaves the old or the new state, never
 * half of one. Both parts go in the same file so the cursor never runs ahead of the findings.
 */
import { mkdirSync, readFileSync, writeFileSync, renameSync, openSync, fsyncSync, closeSync } from 'node:fs';
import path from 'node:path';
import type { EngineSnapshot } from '../engine/engine.ts';

export interface PersistedState {
  version: 1;
  engine?: EngineSnapshot;
  kmsgCursor?: { bootId: string; seq: number };
  /** Condition types Vigil wrote to its Node, so a type dropped from configuration is cleaned up. */
  kubernetes?: { writtenTypes: string[] };
}

export class StateStore {
  readonly file: string;
  private timer: NodeJS.Timeout | undefined;
  private lastError: Error | undefined;

  constructor(
    dir: string,
    private readonly collect: () => PersistedState,
    private readonly delayMs = 100,
  ) {
    mkdirSync(dir, { recursive: true });
    this.file = path.join(dir, 'state.json');
  }

  /** Reads the saved state; a missing file is a first start, a corrupt one is reported and set aside. */
  load(): { state: PersistedState | undefined; warning?: string } {
    let text: string;
    try {
      text = readFileSync(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: undefined };
      return { state: undefined, warning: `cannot read ${this.file}: ${(err as Error).message}` };
    }
    try {
      const parsed = JSON.parse(text) as PersistedState;
      if (parsed?.version !== 1) throw new Error(`unsupported state version ${String(parsed?.version)}`);
      return { state: parsed };
    } catch (err) {
      const aside = `${this.file}.corrupt-${Date.now()}`;
      try {
        renameSync(this.file, aside);
      } catch {
        /* keep going without it */
      }
      return { state: undefined, warning: `state file ${this.file} is unreadable (${(err as Error).message}); moved to ${aside}` };
    }
  }

  /** Coalesces bursts of changes into one write shortly after. */
  schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, this.delayMs);
    this.timer.unref();
  }

  flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const tmp = `${this.file}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(this.collect()));
      const fd = openSync(tmp, 'r');
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, this.file);
      this.lastError = undefined;
    } catch (err) {
      this.lastError = err as Error;
    }
  }

  /** The last write error, if the latest write failed (surfaced on /healthz and in metrics). */
  get error(): Error | undefined {
    return this.lastError;
  }
}
