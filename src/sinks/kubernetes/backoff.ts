/** Moved to src/util/backoff.ts (monitors use it too); kept so the sink's imports stay short. */
export { Backoff } from '../../util/backoff.ts';
