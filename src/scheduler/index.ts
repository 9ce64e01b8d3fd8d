export {
  WorkQueue,
  realClock,
  CHECK_STATUSES,
  type CheckStatus,
  type ScheduledCheck,
  type RunRecord,
  type QueueClock,
  type WorkQueueOptions,
} from './work-queue.ts';
