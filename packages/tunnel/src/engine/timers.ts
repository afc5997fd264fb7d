/**
 * The engine's clock: stall timers go through it, so tests drive time instead of sleeping. The
 * kit's {@link Timers} under the engine's names.
 */
import { realClock, type Timers } from "@cluster-proxy/kit";

export type { TimerHandle } from "@cluster-proxy/kit";

/** Schedules and cancels one-shot timers (the kit's `Timers`; a `Clock` is one). */
export type EngineTimers = Timers;

/** Node's timers, unref'd (the kit's `realClock`). */
export const realTimers: EngineTimers = realClock;
