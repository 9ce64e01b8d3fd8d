/** The kernel-log monitor as a registry module: `/dev/kmsg` through the built-in, user and NPD rules. */
import path from 'node:path';
import { NATIVE_MAX_PATTERNS, regexEngineInfo } from '../../config/regex.ts';
import { summarizeCounts } from '../../util/summarize.ts';
import { gpuBelow } from '../gpu/attribution.ts';
import { pushMonitor, type MonitorContext } from '../module.ts';
import { kernelLogConfig, type KernelLogConfig } from './config.ts';
import { KernelLogMonitor } from './monitor.ts';
import { classifierOptions, declaredConditions, type LoadedRules } from './options.ts';
import { loadRuleFiles } from './rule-files.ts';

// The kernel log proves the kernel is watched; the other types need their own monitors.
const WATCHES = 'KernelReady';
const BLIND = 'KernelLogUnavailable';

export const kernelLogModule = pushMonitor({
  key: 'kernelLog',
  schema: kernelLogConfig,
  conditions: [WATCHES],
  unknownReason: BLIND,
  create: (k, ctx) => {
    const rules = loadRuleFiles(k);
    logRuleEngines(rules, ctx);
    const monitor = new KernelLogMonitor({
      ...(ctx.restored?.kmsgCursor ? { cursor: ctx.restored.kmsgCursor } : {}),
      reader: { path: k.path, lookbackMs: k.lookback, newBootLookbackMs: k.lookback },
      classifier: { ...classifierOptions(k, ctx.xid, rules), gpuAbove: gpuBelow(path.join(ctx.hostRoot, 'sys'), ctx.gpus) },
      registry: ctx.registry,
      onCursor: () => ctx.markDirty(),
      onError: (err) => ctx.log.warn({ err, monitor: 'kernel-log' }, `kernel log: ${err.message}`),
      // Losses and sheds are logged with their counts, at most once per 10 s (a storm reports them
      // batch by batch); /healthz shows the monitor degraded for a while after a loss.
      onLost: summarizeCounts((lost, total) =>
        ctx.log.warn(
          { event: 'kmsg_lost', monitor: 'kernel-log', lost, total },
          `${lost} kernel log records were lost to a ring overrun (the agent was stopped or too slow); ${total} since start`,
        ),
      ),
      onShed: summarizeCounts((shed, total) =>
        ctx.log.warn(
          { event: 'kmsg_shed', monitor: 'kernel-log', shed, total },
          `${shed} kernel log records that match no rule were shed unclassified while the agent was behind; ${total} since start`,
        ),
      ),
    });
    return {
      monitor,
      conditions: [WATCHES],
      blind: { conditions: [WATCHES], reason: BLIND },
      // NPD files' condition types (False while healthy, as NPD reports them) and user rules' own.
      extraConditions: declaredConditions(rules),
      persist: (state) => {
        const c = monitor.cursor();
        if (c) state.kmsgCursor = c;
      },
    };
  },
});

/** Decides each user/NPD pattern's engine now (else at its first line), so the log says which runs them. */
function logRuleEngines(rules: LoadedRules, ctx: MonitorContext): void {
  const patterns = [...rules.userRules.map((r) => r.re), ...rules.npd.flatMap((c) => c.rules.map((r) => r.re))];
  if (patterns.length === 0) return;
  const native = patterns.filter((re) => re.engine === 're2').length;
  const e = regexEngineInfo();
  const why = e.why ?? (native < patterns.length ? `${e.fallbacks} answered differently, at most ${NATIVE_MAX_PATTERNS} native` : '');
  ctx.log.info(
    { event: 'user_rule_engine', nativeLoaded: e.loaded, native, patterns: patterns.length },
    `kernel log: ${native} of ${patterns.length} user/NPD patterns run on native RE2${native < patterns.length ? `, the rest on re2js (${why})` : ''}`,
  );
}

export type { KernelLogConfig };
