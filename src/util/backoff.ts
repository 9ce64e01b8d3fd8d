/**
 * Exponential backoff with jitter (each delay is drawn between half and all of the current step),
 * so many nodes recovering from one outage do not stampede the API server.
 */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
    private readonly random = Math.random,
  ) {}

  next(): number {
    const cap = Math.min(this.maxMs, this.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return Math.round(cap / 2 + this.random() * (cap / 2));
  }

  reset(): void {
    this.attempt = 0;
  }
}
