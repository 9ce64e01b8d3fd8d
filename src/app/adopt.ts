/**
 * Adoption of the conditions a Node already shows, done by the root and not by a sink (sinks only
 * receive): a restarted agent keeps the lastTransitionTime a repair engine's toleration clock runs
 * on, where the status is still the same. Type imports only: `vigil run` without Kubernetes loads
 * no client.
 */
import type { ConditionType, EngineEvent, NodeHealth } from '../api/types.ts';
import type { Engine } from '../engine/engine.ts';
import type { ExistingCondition } from '../sinks/kubernetes/conditions.ts';

/** A sink that writes conditions to a Node which may already show some (the Kubernetes sink). */
export interface AdoptingSink {
  /** The Node's conditions of these names; retries until the API server answers. */
  readNode(names: string[]): Promise<ExistingCondition[]>;
  /** Starts writing from this view. */
  begin(health: NodeHealth, adopted: number): void;
  /** The Node's condition of this name as read at start (undefined before begin). */
  existingAtStart(name: string): ExistingCondition | undefined;
}

/** Reads the Node, lets the engine adopt its transition times, then lets the sink write. */
export async function adoptNodeConditions(engine: Engine, sink: AdoptingSink): Promise<void> {
  const existing = await sink.readNode(engine.health().conditions.map((c) => c.name));
  // Names mapped again: the engine may have managed more types while the API server was waited for.
  const byName = new Map(engine.health().conditions.map((c) => [c.name, c.type]));
  engine.adoptConditions(existing.filter((c) => byName.has(c.type)).map((c) => ({ ...c, type: byName.get(c.type)! })));
  sink.begin(engine.health(), existing.length);
}

/**
 * A type the engine manages only now (hardware found late) keeps the clock the Node already
 * showed at start. Returns the engine's view after adoption, or undefined when nothing was adopted.
 */
export function adoptLate(engine: Engine, sinks: readonly AdoptingSink[], event: EngineEvent): NodeHealth | undefined {
  if (event.kind !== 'condition' || event.previous !== 'Unknown') return undefined;
  const type: ConditionType = event.condition.type;
  let adopted = false;
  for (const s of sinks) {
    const seen = s.existingAtStart(event.condition.name);
    if (!seen) continue;
    engine.adoptConditions([{ ...seen, type }]);
    adopted = true;
  }
  return adopted ? engine.health() : undefined;
}
