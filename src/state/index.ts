export { StateStore, StateDirLockedError, type PersistedState, type StateStoreOptions, type LoadResult } from './store.ts';
