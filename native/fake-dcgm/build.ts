/**
 * Builds the fake DCGM library (a test double, see README.md) and scripts it. Used by the DCGM
 * tests and bench/dcgm.ts; never by the agent itself.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compilerFor } from '../compiler.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const SOURCE = join(HERE, 'fake_dcgm.c');
const CACHE = resolve(HERE, '../../.cache/fake-dcgm');

/**
 * Compiles fake_dcgm.c for this Node's architecture (gcc, or aarch64-linux-gnu-gcc for an arm64 Node
 * under qemu: ../compiler.ts) once per architecture and source (cached under .cache/fake-dcgm/ARCH-HASH)
 * and returns the library path.
 */
export function buildFakeDcgm(): string {
  const src = readFileSync(SOURCE);
  const { cc, arch } = compilerFor();
  const out = join(CACHE, `${arch}-${createHash('sha256').update(src).digest('hex').slice(0, 16)}`, 'libdcgm.so.4');
  if (existsSync(out)) return out;
  mkdirSync(dirname(out), { recursive: true });
  // A private name, then rename: parallel test files may build at once.
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync(cc, ['-shared', '-fPIC', '-O2', '-Wall', '-Wextra', '-pthread', '-o', tmp, SOURCE], { stdio: ['ignore', 'inherit', 'inherit'] });
  renameSync(tmp, out);
  return out;
}

/** dcgmPolicyCondition_t bits. */
export const DCGM_COND = { DBE: 0x1, PCI: 0x2, MAX_PAGES_RETIRED: 0x4, THERMAL: 0x8, POWER: 0x10, NVLINK: 0x20, XID: 0x40 } as const;

/** A scripted policy violation: `a`/`b` fill the condition's payload (see README.md). */
export interface FakeDcgmEvent {
  id: number;
  gpu: number;
  condition: number;
  a?: number;
  b?: number;
}

export interface FakeDcgmConfig {
  /** DCGM gpuId -> PCI bus id (DCGM's "00000000:18:00.0" form) and UUID. */
  gpus: { id: number; pci: string; uuid: string }[];
  events?: FakeDcgmEvent[];
  /** Return-code overrides by function name ("*" = all), e.g. { dcgmConnect_v2: -21 }. */
  rc?: Record<string, number>;
  /** Sleep this many ms inside the named function. */
  hang?: Record<string, number>;
  /** The host engine went away: every call answers CONNECTION_NOT_VALID and callbacks stop. */
  lost?: boolean;
}

/** Writes the script atomically (temp file + rename), so the library never reads half a file. */
export function writeFakeDcgmConfig(path: string, cfg: FakeDcgmConfig): void {
  const lines = [
    ...cfg.gpus.map((g) => `gpu ${g.id} ${g.pci} ${g.uuid}`),
    ...(cfg.events ?? []).map((e) => `event ${e.id} ${e.gpu} ${e.condition} ${e.a ?? 0} ${e.b ?? 0}`),
    ...Object.entries(cfg.rc ?? {}).map(([fn, rc]) => `rc ${fn} ${rc}`),
    ...Object.entries(cfg.hang ?? {}).map(([fn, ms]) => `hang ${fn} ${ms}`),
    ...(cfg.lost ? ['lost'] : []),
  ];
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, lines.join('\n') + '\n');
  renameSync(tmp, path);
}
