/**
 * Escalation: N findings of one reason on one entity within a window raise another reason,
 * e.g. five NvidiaXID13Warning on one GPU in 10 minutes become NvidiaXID13Repeated (Fatal).
 */
import type { Finding } from '../api/types.ts';
import { ruleReason } from '../catalog/index.ts';
import { UserRegex } from '../config/regex.ts';
import { SlidingCounter } from './sliding-counter.ts';

export interface EscalationRule {
  /** Regex (RE2 syntax) matched against the whole reason; capture groups feed `raise` as $1, $2... */
  match: string;
  count: number;
  windowMs: number;
  /** The reason to raise, e.g. 'NvidiaXID$1Repeated'. */
  raise: string;
}

export class Escalator {
  /** `matches`: each reason's answer, remembered: reasons are a bounded set (the catalog and the rules), and RE2 runs interpreted. */
  private readonly compiled: { re: UserRegex; rule: EscalationRule; matches: Map<string, boolean> }[];
  private readonly counters = new Map<string, SlidingCounter>();

  constructor(rules: EscalationRule[]) {
    // RE2, like every pattern from configuration: linear time whatever the pattern.
    this.compiled = rules.map((rule) => ({ re: UserRegex.compile(`^(?:${rule.match})$`), rule, matches: new Map() }));
  }

  /** Returns the escalated findings this one triggers (usually none). */
  observe(f: Finding, now: number): Finding[] {
    const out: Finding[] = [];
    for (const { re, rule, matches } of this.compiled) {
      let match = matches.get(f.reason);
      if (match === undefined) matches.set(f.reason, (match = re.test(f.reason)));
      if (!match) continue;
      const key = `${rule.match}|${f.reason}|${f.entity}`;
      let c = this.counters.get(key);
      if (!c) this.counters.set(key, (c = new SlidingCounter(rule.windowMs, rule.count)));
      c.add(f.at);
      if (c.count(f.at) < rule.count) continue;
      this.counters.delete(key); // start over, so one burst raises once
      out.push({
        reason: ruleReason(re.replace(f.reason, rule.raise)), // named by configuration
        message: `${rule.count} x ${f.reason} within ${Math.round(rule.windowMs / 1000)}s on ${f.entity || 'node'}; last: ${f.message}`,
        source: 'engine',
        entity: f.entity,
        at: now,
        ...(f.attrs ? { attrs: f.attrs } : {}),
      });
    }
    return out;
  }

  /** Forgets counters whose window has passed, so memory stays bounded. */
  prune(now: number): void {
    for (const [k, c] of this.counters) if (c.count(now) === 0) this.counters.delete(k);
  }
}
