// Node 18.0-18.17 has no Symbol.asyncDispose: the one Node itself adopted later. Imported first by the
// modules whose classes define it (Limiter, Permit, Hold).
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("nodejs.asyncDispose");
export {};
