// The high-volume bench (docs/high-volume.md; node/bench/run.mjs runs it on the app's core and puts its
// table in docs/bench-node.md): `node volume.mjs <redis port>` prints the section. One hot key, two
// limiters on connections of their own (two app instances), WORKERS callers on each checking one after
// the other for SECONDS, in each mode (per call, the pre-check, batches of 16, both) and each scenario
// (under the limit: every check allowed; over it: most denied), ROUNDS rounds interleaved, a fresh key
// per run. Measured: Redis' calls (INFO commandstats, reset per run) per decision, each check's time
// (p50, p99; and of the local ones), and the admitted checks against what the bucket could give.
import { Redis } from "ioredis";
import { Limiter, TokenBucket } from "../dist/esm/index.js";

const port = Number(process.argv[2]);
const SECONDS = Number(process.env.RL_BENCH_VOLUME_SECONDS ?? 2);
const ROUNDS = Number(process.env.RL_BENCH_VOLUME_ROUNDS ?? 3);
const WORKERS = 32;
const BATCH = 16;
const SCENARIOS = {
  under: { capacity: 1_000_000_000, perSecond: 1_000_000, text: "under the limit (a bucket of 10^9, 10^6/s: every check allowed)" },
  over: { capacity: 100, perSecond: 100, text: "over the limit (a bucket of 100, 100/s: most checks denied, retry_after 10 ms)" },
};
const MODES = {
  "per call": { precheck: false, batch: false },
  "pre-check": { precheck: true, batch: false },
  [`batch ${BATCH}`]: { precheck: false, batch: true },
  [`batch ${BATCH} + pre-check`]: { precheck: true, batch: true },
};

const admin = new Redis(port, "127.0.0.1");
const connections = [new Redis(port, "127.0.0.1"), new Redis(port, "127.0.0.1")];
let run = 0;

/** Redis' calls of the limiter's commands since the last reset. */
async function rlCalls() {
  const stats = String(await admin.info("commandstats"));
  let n = 0;
  for (const m of stats.matchAll(/cmdstat_rl\.\w+:calls=(\d+)/g)) n += Number(m[1]);
  return n;
}

async function once(scenario, mode) {
  const s = SCENARIOS[scenario], m = MODES[mode];
  const policy = new TokenBucket({ capacity: s.capacity, perSecond: s.perSecond, ...(m.batch && { batch: BATCH }) });
  const key = `rl:{bench-volume-${++run}}:hot`;
  const limiters = connections.map((c) => new Limiter(c, { failure: "open", engine: "module", localPrecheck: m.precheck }));
  await admin.call("CONFIG", "RESETSTAT");
  const times = [], localTimes = [];
  let admitted = 0, degraded = 0;
  const started = performance.now();
  const end = started + SECONDS * 1000;
  await Promise.all(limiters.flatMap((rl) => Array.from({ length: WORKERS }, async () => {
    while (performance.now() < end) {
      const t = performance.now();
      const d = await rl.check(key, policy);
      const took = performance.now() - t;
      times.push(took);
      if (d.local) localTimes.push(took);
      if (d.allowed) admitted++;
      if (d.degraded) degraded++;
    }
  })));
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(limiters.map((rl) => rl.close()));
  const calls = await rlCalls();
  // The most a bucket starting full could give over the run.
  const bound = Math.min(s.capacity + Math.ceil(s.perSecond * elapsed), Number.MAX_SAFE_INTEGER);
  if (degraded) throw new Error(`${scenario}/${mode}: ${degraded} degraded decisions`);
  if (admitted > bound) throw new Error(`${scenario}/${mode}: admitted ${admitted} > ${bound}`);
  return { decisions: times.length, calls, admitted, bound, p50: pct(times, 0.5), p99: pct(times, 0.99), localShare: localTimes.length / times.length, localP99: localTimes.length ? pct(localTimes, 0.99) : null };
}

function pct(xs, p) {
  const s = Float64Array.from(xs).sort();
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

await admin.ping();
const results = {};
for (let r = 0; r < ROUNDS; r++) {
  for (const scenario of Object.keys(SCENARIOS)) {
    const modes = Object.keys(MODES);
    for (let j = 0; j < modes.length; j++) {
      const mode = modes[(r + j) % modes.length];
      const got = await once(scenario, mode);
      (results[`${scenario}/${mode}`] ??= []).push(got);
      console.error(`volume round ${r + 1} ${scenario}/${mode}: ${(got.calls / got.decisions).toFixed(3)} calls per decision, p99 ${(got.p99 * 1000).toFixed(0)} us`);
    }
  }
}
admin.disconnect();
for (const c of connections) c.disconnect();

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const us = (ms) => (ms === null ? "-" : (ms * 1000).toFixed(0));
const rows = [];
for (const scenario of Object.keys(SCENARIOS)) {
  for (const mode of Object.keys(MODES)) {
    const rs = results[`${scenario}/${mode}`];
    const pick = (f) => median(rs.map(f));
    rows.push(`| ${scenario} | ${mode} | ${pick((r) => r.decisions / SECONDS).toFixed(0)} | ${pick((r) => r.calls / r.decisions).toFixed(3)} | ${(pick((r) => r.localShare) * 100).toFixed(0)}% | ${us(pick((r) => r.p50))} | ${us(pick((r) => r.p99))} | ${us(rs.every((r) => r.localP99 !== null) ? pick((r) => r.localP99) : null)} | ${rs.map((r) => `${r.admitted} / ${r.bound}`).join(", ")} |`);
  }
}
console.log(`## High volume: decisions without a round trip

One hot key, two limiters on connections of their own (two app instances) in one process on the app's
core, ${WORKERS} callers on each checking one after the other (\`limiter.check\`, the module) for ${SECONDS} s per
run; ${ROUNDS} rounds interleaved, the median round's numbers (admitted: every round's). Scenarios:
${Object.entries(SCENARIOS).map(([k, s]) => `\`${k}\`, ${s.text}`).join("; ")}. Modes: per call (every check
a round trip), the pre-check (\`localPrecheck: true\`), batched units (\`batch: ${BATCH}\`, lease 1 s), both.
Calls: every RL.* command Redis ran in the run (INFO commandstats; refunds and the second call of a
denied batch included). Admitted: the checks allowed in both instances against the most the bucket
could give over the run (its capacity plus its rate times the run's length): never above.

| scenario | mode | checks/s | Redis calls per decision | local | p50 us | p99 us | p99 us (local) | admitted / most the bucket gave |
|---|---|---:|---:|---:|---:|---:|---:|---|
${rows.join("\n")}

- Local: the checks decided in the process without a round trip (\`Decision.local\`): the pre-check's
  denials, and batched units found held. A check that lacks units waits for its key's batch call in flight
  (one batch call per key at a time, which keeps each instance within batch - 1 units; a hot key's next
  batch is taken ahead when a quarter of it is left) and shares that round trip: not local, as in the
  Rust reference. A local check's time is the event loop's queue of ${2 * WORKERS} callers in one process,
  not the decision's own work: with many callers on one key, batches trade a check's latency for Redis'
  calls and throughput.
- Batches alone do not spare a denied key its round trips (each denial is a call, and a batch denied is
  asked again alone); the pre-check does. Batches spare an allowed hot key its round trips.
`);
process.exit(0);
