/** What a collector is and what it is given; the runner (../collect.ts) enforces time and size. */
import type { VigilConfig } from '../../settings/index.ts';
import type { ExecResult } from '../../sources/host/index.ts';
import type { DiagnosticCategory } from '../bundle.ts';
import { VigilError } from '../../util/errors.ts';

/** The capture's options with every default filled in. */
export interface ResolvedCapture {
  categories: DiagnosticCategory[];
  node: string;
  hostRoot: string;
  stateDir: string;
  configPath?: string;
  /** The agent's configuration; defaults when none was given or it did not load. */
  config: VigilConfig;
  configError?: string;
  kernelLogPath: string;
  /** Journal span. */
  sinceMs: number;
  collectorTimeoutMs: number;
  collectorMaxBytes: number;
  /** Collector name -> argv that replaces the collector's commands (or a new command collector). */
  commands: Record<string, string[]>;
  /** More configuration files to include, redacted (runtime category). */
  includeFiles: string[];
  /** Where the bundle is assembled; collectors may leave scratch files under `scratchDir`. */
  scratchDir: string;
}

export interface CollectorContext {
  readonly capture: ResolvedCapture;
  /** Aborted at the collector's timeout or when the capture stops. */
  readonly signal: AbortSignal;
  /** Size cap for this collector's output. */
  readonly maxBytes: number;
  /** Milliseconds left before this collector's timeout. */
  remainingMs(): number;
  /**
   * Runs a program in its own process group (killed, with everything it started, at the timeout),
   * capturing at most maxBytes of stdout. A test override for this collector replaces `argv`.
   * Throws MissingToolError when the program is not installed.
   */
  exec(argv: readonly string[], opts?: { maxBytes?: number }): Promise<ExecResult>;
  /** A host path under the configured host root. */
  host(p: string): string;
}

export interface CollectorOutput {
  /** Text is redacted before it is written; a Buffer is written as it is. */
  data?: string | Buffer;
  truncated?: boolean;
  timedOut?: boolean;
  error?: string;
  /** Nothing to collect on this node (a tool not installed, no such file): recorded, not an error. */
  skipped?: string;
  /** A fact worth reading in the manifest (records lost, NVML state). */
  note?: string;
}

export interface Collector {
  /** Unique, `category/what`. */
  name: string;
  category: DiagnosticCategory;
  /** Path inside the bundle. */
  file: string;
  /** Multiplies the capture's per-collector timeout (nvidia-bug-report.sh takes minutes). */
  timeoutScale?: number;
  run(ctx: CollectorContext): Promise<CollectorOutput>;
}

export class MissingToolError extends VigilError {
  constructor(readonly tool: string) {
    super('VIGIL_E_DIAGNOSTICS_TOOL_MISSING', `${tool} is not installed`);
    this.name = 'MissingToolError';
  }
}
