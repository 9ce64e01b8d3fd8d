/**
 * A fake /dev/kmsg for the reader's unit tests, with the device's read semantics: one record per
 * read(2), EAGAIN past the newest, EPIPE once when the reader's position was overwritten (then the
 * position moves to the oldest record). The real device is in test/integration.
 */
import type { KmsgIo } from '../../src/sources/index.ts';

export interface FakeKmsgOptions {
  /** Keep at most this many records: adding past it overwrites the oldest, as the kernel's ring does. */
  capacity?: number;
  /** Where open() puts the reader: the oldest record (as the device does) or past the newest. */
  openAt?: 'oldest' | 'end';
}

export class FakeKmsg implements KmsgIo {
  private ring: string[] = [];
  /** Sequence number of ring[0]. */
  private first = 0;
  private pos = 0;
  /** read(2) calls so far. */
  reads = 0;

  constructor(private readonly opts: FakeKmsgOptions = {}) {}

  /** The sequence number the next record gets. */
  get next(): number {
    return this.first + this.ring.length;
  }

  /** Appends a record in the device's format; returns its sequence number. */
  add(message: string, tsUsec?: number, prio = 6): number {
    const seq = this.next;
    return this.addRaw(`${prio},${seq},${tsUsec ?? 1000 + seq},-;${message}\n`);
  }

  /** Appends a record's text as given (its sequence number is the next one whatever it says). */
  addRaw(text: string): number {
    const seq = this.next;
    this.ring.push(text);
    if (this.opts.capacity !== undefined && this.ring.length > this.opts.capacity) this.overwrite(1);
    return seq;
  }

  /** The kernel overwrote the oldest n records. */
  overwrite(n: number): void {
    const k = Math.min(n, this.ring.length);
    this.ring.splice(0, k);
    this.first += k;
  }

  open(): number {
    this.pos = this.opts.openAt === 'end' ? this.next : this.first;
    return 42;
  }

  read(_fd: number, buf: Buffer): number {
    this.reads++;
    if (this.pos < this.first) {
      this.pos = this.first;
      throw Object.assign(new Error('EPIPE'), { code: 'EPIPE' });
    }
    const text = this.ring[this.pos - this.first];
    if (text === undefined) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
    this.pos++;
    return buf.write(text);
  }

  close(): void {}
}
