/**
 * Bundles kept on the node (node delivery, or an upload that failed), under the state directory.
 * Disk use is bounded: at most `maxCount` bundles and `maxBytes` in all (the newest is always
 * kept), none older than `retentionMs`. Only names this store made are ever served.
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, renameSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from 'pino';
import { errorMessage } from '../../util/errors.ts';

export interface KeepLimits {
  maxCount: number;
  maxBytes: number;
  retentionMs: number;
}

/** <node>-<UTC time>-<16 hex>.tar.gz: unguessable, so a name in a status is the only way to one. */
const NAME = /^[a-z0-9][a-z0-9.-]{0,252}-\d{8}t\d{6}z-[0-9a-f]{16}\.tar\.gz$/;
/** Captures in progress write here, apart from what may be served. */
const INCOMING = '.incoming';

export interface KeptBundle {
  name: string;
  path: string;
  bytes: number;
  mtimeMs: number;
}

export class BundleStore {
  readonly dir: string;
  private readonly kept: Gauge;
  private readonly keptBytes: Gauge;

  constructor(
    stateDir: string,
    private readonly limits: KeepLimits,
    registry: Registry,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.dir = path.join(stateDir, 'diagnostics', 'bundles');
    this.kept = new Gauge({ name: 'vigil_diagnostics_kept_bundles', help: 'Diagnostic bundles kept on the node.', registers: [registry] });
    this.keptBytes = new Gauge({
      name: 'vigil_diagnostics_kept_bytes',
      help: 'Bytes of the diagnostic bundles kept on the node.',
      registers: [registry],
    });
  }

  /** A new bundle's name and the path its capture writes to (not served until kept). */
  reserve(node: string): { name: string; partial: string } {
    mkdirSync(path.join(this.dir, INCOMING), { recursive: true, mode: 0o700 });
    const safe =
      node
        .toLowerCase()
        .replace(/[^a-z0-9.-]+/g, '-')
        .replace(/^[^a-z0-9]+/, '')
        .slice(0, 200) || 'node';
    const t = new Date(this.now())
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'z')
      .toLowerCase();
    const name = `${safe}-${t}-${randomBytes(8).toString('hex')}.tar.gz`;
    return { name, partial: path.join(this.dir, INCOMING, name) };
  }

  /** Moves a finished capture in (it may then be served) and enforces the limits. */
  keep(name: string, written: string): KeptBundle {
    const file = path.join(this.dir, name);
    renameSync(written, file);
    this.prune(name);
    const st = lstatSync(file);
    return { name, path: file, bytes: st.size, mtimeMs: st.mtimeMs };
  }

  /** A kept bundle by name, only when this store made it: a plain file in its folder with its naming. */
  get(name: string): KeptBundle | undefined {
    if (!NAME.test(name)) return undefined;
    const file = path.join(this.dir, name);
    try {
      const st = lstatSync(file);
      return st.isFile() ? { name, path: file, bytes: st.size, mtimeMs: st.mtimeMs } : undefined;
    } catch {
      return undefined;
    }
  }

  remove(file: string): void {
    try {
      unlinkSync(file);
    } catch {
      /* already gone */
    }
    this.refresh();
  }

  list(): KeptBundle[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    return names
      .map((n) => this.get(n))
      .filter((b): b is KeptBundle => b !== undefined)
      .sort((a, b) => b.mtimeMs - a.mtimeMs);
  }

  /**
   * Removes bundles past the retention time, then the oldest while over the count or byte limit,
   * and leftovers of captures that died (partial files an hour old). `protect` is never removed.
   */
  prune(protect?: string): void {
    const now = this.now();
    const incoming = path.join(this.dir, INCOMING);
    let names: string[] = [];
    try {
      names = readdirSync(incoming);
    } catch {
      /* no folder yet */
    }
    for (const n of names) {
      try {
        if (now - lstatSync(path.join(incoming, n)).mtimeMs > 3_600_000) unlinkSync(path.join(incoming, n));
      } catch {
        /* gone meanwhile */
      }
    }
    let count = 0;
    let bytes = 0;
    for (const b of this.list()) {
      const fresh = now - b.mtimeMs <= this.limits.retentionMs;
      // The newest fresh one is kept even when alone over the byte limit: it is the one just asked for.
      const fits = count < this.limits.maxCount && (bytes + b.bytes <= this.limits.maxBytes || count === 0);
      if (b.name === protect || (fresh && fits)) {
        count++;
        bytes += b.bytes;
        continue;
      }
      try {
        unlinkSync(b.path);
        this.log.info(
          { event: 'diagnostics', bundle: b.name, bytes: b.bytes },
          'removed a kept diagnostic bundle (retention or disk limit)',
        );
      } catch (err) {
        this.log.warn({ event: 'diagnostics', bundle: b.name }, `cannot remove a kept diagnostic bundle: ${errorMessage(err)}`);
      }
    }
    this.refresh();
  }

  private refresh(): void {
    const all = this.list();
    this.kept.set(all.length);
    this.keptBytes.set(all.reduce((a, b) => a + b.bytes, 0));
  }
}
