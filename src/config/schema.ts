/**
 * The core sections of the configuration file (engine, Kubernetes, quarantine, diagnostics, source
 * retries, condition names); src/settings assembles them with every monitor's own section. Every
 * option has a default, so an empty file is valid; unknown keys are rejected so a typo is an error
 * rather than a silently ignored setting. Values that would break `run` are refused here, so
 * `check-config` and `run` agree. docs/configuration.md describes each option.
 */
import * as z from 'zod';
import { CONDITION_TYPES } from '../api/types.ts';
import { duration, positiveDuration } from './duration.ts';
import { kubeconfigProblem } from './kubeconfig.ts';
import { regexString } from './regex.ts';
import { filePath } from './file-path.ts';
import { DIAGNOSTIC_CATEGORIES } from '../diagnostics/bundle.ts';

/** `conditions.names`: the name each condition type is written under on the Node. */
export const conditionNames = z
  .strictObject(
    Object.fromEntries(
      CONDITION_TYPES.map((t) => [
        t,
        z
          .string()
          .regex(/^[A-Za-z][A-Za-z0-9]*$/)
          .default(t),
      ]),
    ) as Record<(typeof CONDITION_TYPES)[number], z.ZodDefault<z.ZodString>>,
  )
  .superRefine((names, ctx) => {
    // Two conditions under one name would overwrite each other on the Node.
    const seen = new Map<string, string>();
    for (const [type, name] of Object.entries(names)) {
      const other = seen.get(name);
      if (other) ctx.addIssue({ code: 'custom', path: [type], message: `"${name}" is already the name of ${other}` });
      seen.set(name, type);
    }
  });

export const kubernetesConfig = z
  .strictObject({
    /** auto: use in-cluster config or a kubeconfig when one is found; off: standalone. */
    mode: z.enum(['auto', 'on', 'off']).default('auto'),
    kubeconfig: filePath.optional(),
    /** Condition re-write period even when nothing changed; 0 disables. */
    heartbeat: duration('5m'),
    /** Changes within this window are written together (well under a second). */
    coalesce: duration('200ms').refine((ms) => ms <= 1000, 'at most 1s: repair engines should see a change at once'),
    /** Namespace for Events about the Node. */
    eventNamespace: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'expected a Kubernetes namespace name (a DNS label)')
      .default('default'),
    /** Events per reason per minute; more are dropped and counted. */
    eventsPerReasonPerMinute: z.number().int().min(1).default(6),
    /**
     * Events for Fatal findings, per reason per minute: a bucket of their own, larger, because each
     * one names a newly failing part (repeats only update its Event series) and must be seen at once.
     * Those over it are named together in summary Events (a bucket of the same size), never dropped.
     */
    fatalEventsPerReasonPerMinute: z.number().int().min(1).default(30),
  })
  .superRefine((k, ctx) => {
    const problem = k.mode !== 'off' && k.kubeconfig !== undefined ? kubeconfigProblem(k.kubeconfig) : undefined;
    if (problem) ctx.addIssue({ code: 'custom', path: ['kubeconfig'], message: `${k.kubeconfig}: ${problem}` });
  });

/**
 * Optional quarantine (src/remediation/quarantine.ts): cordon and taint the node while a Vigil
 * condition is False. Off by default; it needs extra RBAC (deploy/rbac-quarantine.yaml). The taint
 * key is fixed (vigil.dev/unhealthy) so the admission policy can name it.
 */
export const quarantineConfig = z.strictObject({
  enabled: z.boolean().default(false),
  /** Log, count and record an Event for what would be done; change nothing on the Node. */
  dryRun: z.boolean().default(false),
  /** Hold back when quarantining this node would put more than this share of all nodes in quarantine. */
  maxQuarantinedShare: z.number().min(0, 'a share from 0 to 1').max(1, 'a share from 0 to 1').default(0.2),
  /** A random wait up to this long before the cluster-wide count, so a fleet-wide fault does not decide all at once. */
  jitter: duration('10s'),
  /** While held back, how often the count is taken again. */
  recheck: positiveDuration('1m'),
});

/**
 * Diagnostic bundles (src/diagnostics): NodeDiagnostic requests through Kubernetes, and an
 * optional capture when a Fatal finding arrives. docs/configuration.md describes each option.
 */
const diagnosticsFields = z.strictObject({
  /** Act on NodeDiagnostic resources for this node (needs the Kubernetes sink and the CRD). */
  requests: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  autoCapture: z
    .strictObject({
      enabled: z.boolean().default(false),
      /** Where bundles are PUT; {node} and {time} are replaced (one URL serves a fleet). */
      uploadUrl: z
        .string()
        .regex(/^https?:\/\/[^\s]+$/, 'expected an http(s) URL that accepts a PUT')
        .optional(),
      /** At most one automatic capture per node in this period, across restarts. */
      minInterval: positiveDuration('1h'),
      /** What to collect; empty: every category. */
      categories: z.array(z.enum(DIAGNOSTIC_CATEGORIES)).default([]),
      /** Only Fatal reasons matching this regex start a capture (e.g. '^NvidiaXID'); absent: every Fatal reason. */
      match: regexString.optional(),
    })
    .superRefine((a, ctx) => {
      if (a.enabled && !a.uploadUrl) ctx.addIssue({ code: 'custom', path: ['uploadUrl'], message: 'required when autoCapture is enabled' });
    })
    .prefault({}),
  /** Bundles kept on the node (node delivery, failed uploads), under the state directory. */
  keep: z
    .strictObject({
      maxBundles: z.number().int().min(1).default(5),
      maxBytes: z.number().int().min(1).default(2_147_483_648),
      retention: positiveDuration('24h'),
    })
    .prefault({}),
  /**
   * Where uploads may go (issue #22 point 1): https to public addresses only, unless a host is
   * listed (its addresses are then not checked) or http is allowed.
   */
  upload: z
    .strictObject({
      allowedHosts: z.array(z.string().regex(/^[^\s/?#@]+$/, 'expected a host name or IP address, not a URL')).default([]),
      allowHttp: z.boolean().default(false),
    })
    .prefault({}),
  /** Upload attempts before the bundle is kept on the node instead. */
  uploadAttempts: z.number().int().min(1).max(20).default(5),
  /** Each collector is cut (and recorded as timed out) after this long. */
  collectorTimeout: positiveDuration('30s'),
});

export const diagnosticsConfig = diagnosticsFields.superRefine((d, ctx) => {
  // Refused at start rather than at the first Fatal fault, when the capture would be lost.
  if (d.autoCapture.uploadUrl?.startsWith('http:') && !d.upload.allowHttp) {
    ctx.addIssue({
      code: 'custom',
      path: ['autoCapture', 'uploadUrl'],
      message: 'http:// needs diagnostics.upload.allowHttp: true (https otherwise)',
    });
  }
});

/**
 * A source that cannot see (kernel log missing or unreadable, NVML not loadable or not
 * initialising) is tried again after `initial`, doubling up to `max`, each wait drawn between half
 * and all of the step; its condition leaves Unknown on the first try that sees.
 */
export const sourceRetryConfig = z.strictObject({ initial: positiveDuration('1s'), max: positiveDuration('5m') }).superRefine((r, ctx) => {
  if (r.max < r.initial) ctx.addIssue({ code: 'custom', path: ['max'], message: 'must be at least sourceRetry.initial' });
});
