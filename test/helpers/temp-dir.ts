/**
 * A scratch folder under the system's temporary folder, removed when this test file's process
 * exits (the runner gives each file its own process): CI's machine goes on to other work, and a
 * run left about 37 folders behind, some whose test removed them (an agent it ran wrote its state
 * again on the way out). One that still holds a mount is left alone, not walked into.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const made: string[] = [];

process.on('exit', () => {
  let mounts: string;
  try {
    mounts = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return;
  }
  for (const dir of made) {
    if (mounts.includes(` ${dir}/`) || mounts.includes(` ${dir} `)) continue;
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // Best effort: a folder a child still writes to is left for the system's cleaner.
    }
  }
});

/** mkdtemp under os.tmpdir() with this prefix; removed at exit. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}
