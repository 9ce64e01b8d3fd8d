/**
 * Reads a configuration or rule file with its size capped before anything is parsed. The YAML
 * parser needs about 1 MB of memory and several ms of CPU per KiB, so a wrong path (a log, a core
 * dump) or a hostile file ran for minutes and died out of memory (36 MB: 5-7 min, 4.5 GB). Real
 * files are far smaller: the fully commented example configuration is under 10 KiB.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { errorMessage, VigilError } from '../util/errors.ts';

/** The most a configuration, user rule or NPD file may hold. */
export const MAX_CONFIG_FILE_BYTES = 128 * 1024;

export class FileTooLargeError extends VigilError {
  constructor(
    readonly bytes: number | undefined,
    readonly limit: number,
  ) {
    super('VIGIL_E_FILE_TOO_LARGE', `too large: ${bytes === undefined ? 'more than' : `${bytes} bytes,`} the limit is ${limit / 1024} KiB`);
    this.name = 'FileTooLargeError';
  }
}

/**
 * The file's text, or an Error whose message starts "too large" or "cannot read". A regular file
 * over the limit is refused from its size alone; a pipe (`--config <(...)`) is read to one byte
 * past the limit at most.
 */
export function readConfigText(file: string, limit = MAX_CONFIG_FILE_BYTES): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new VigilError('VIGIL_E_FILE_UNREADABLE', `cannot read: ${errorMessage(err)}`, { cause: err });
  }
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw new VigilError('VIGIL_E_FILE_UNREADABLE', 'cannot read: is a directory');
    if (st.isFile() && st.size > limit) throw new FileTooLargeError(st.size, limit);
    const buf = Buffer.allocUnsafe(limit + 1);
    let off = 0;
    for (;;) {
      let n: number;
      try {
        n = readSync(fd, buf, off, buf.length - off, null);
      } catch (err) {
        throw new VigilError('VIGIL_E_FILE_UNREADABLE', `cannot read: ${errorMessage(err)}`, { cause: err });
      }
      if (n === 0) break;
      off += n;
      if (off > limit) throw new FileTooLargeError(undefined, limit);
    }
    return buf.toString('utf8', 0, off);
  } finally {
    closeSync(fd);
  }
}
