/**
 * Benchmarks time what a node runs: the bundled dist/, not the sources through tsx (which costs
 * about 15 MiB more RSS and a slower start). bin/vigil.js falls back to tsx when a source is newer
 * than dist/, so every bench that starts the agent builds dist/ first.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Builds dist/ and pins bin/vigil.js to it; false (and the agent runs from source) when the build fails. */
export function buildDist(log: (msg: string) => void): boolean {
  try {
    execFileSync('npm', ['run', '-s', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    // Others may edit src/ while a bench runs: keep timing the build made now.
    process.env.VIGIL_FROM_SOURCE = '0';
    return true;
  } catch (err) {
    log(`npm run build failed; vigil runs from source (tsx): ${String(err).slice(0, 300)}`);
    return false;
  }
}
