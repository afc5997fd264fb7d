/** Test-only: the engine's manual timers are the kit's {@link ManualClock}. */
import { ManualClock } from "@cluster-proxy/kit/testing";

/** Timers that fire only when the test advances the clock, in the order they are due. */
export class ManualTimers extends ManualClock {}
