/** Metrics are registered on a registry passed in (never the global one), so tests stay isolated. */
export type { Registry } from 'prom-client';
