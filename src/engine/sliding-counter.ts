/** Counts events in a sliding time window, keeping at most `cap` timestamps (bounded memory). */
export class SlidingCounter {
  private readonly times: number[] = [];

  constructor(
    private readonly windowMs: number,
    private readonly cap: number,
  ) {}

  add(at: number): void {
    this.times.push(at);
    if (this.times.length > this.cap) this.times.shift();
  }

  count(now: number): number {
    while (this.times.length && now - this.times[0] > this.windowMs) this.times.shift();
    return this.times.length;
  }

  get empty(): boolean {
    return this.times.length === 0;
  }
}
