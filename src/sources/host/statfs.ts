/** statfs(2) with a timeout: a hung network filesystem would otherwise park a thread-pool thread forever. */
import fs from 'node:fs';
import { abortReason } from '../../util/errors.ts';

export interface StatFsSample {
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
}

export async function statfs(file: string, timeoutMs: number, signal?: AbortSignal): Promise<StatFsSample> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`statfs ${file} timed out after ${timeoutMs}ms`)), timeoutMs);
    signal?.addEventListener('abort', () => reject(abortReason(signal)), { once: true });
  });
  try {
    const s = await Promise.race([fs.promises.statfs(file), timeout]);
    return { blocks: s.blocks, bfree: s.bfree, bavail: s.bavail, files: s.files, ffree: s.ffree };
  } finally {
    clearTimeout(timer);
  }
}
