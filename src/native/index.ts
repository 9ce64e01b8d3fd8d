export { libc, pollWorkerLibc, LOCK_EX, LOCK_NB, EINTR, EWOULDBLOCK, type Libc } from './libc.ts';
