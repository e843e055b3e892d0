// The harness itself: a server counts as started by testkit's rule (INFO shows this child's process_id
// and loading:0), so a start whose port another server holds is neither mistaken for that server nor
// given up: it is retried on another port. The peer suites' start (peer/peer-run.mjs) is the same one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT, Server, info } from "./servers.ts";

test("a start on a port another server holds is retried on another port, not taken for that server", async () => {
  const holder = await Server.start();
  let second: Server | undefined;
  try {
    second = await Server.start({ port: holder.port });
    assert.notEqual(second.port, holder.port);
    const text = (await info(second.port))!;
    assert.match(text, new RegExp(`process_id:${second.proc!.pid}\\r\\n`));
    assert.match(text, /loading:0\r\n/);
    assert.match((await info(holder.port))!, new RegExp(`process_id:${holder.proc!.pid}\\r\\n`));
  } finally {
    await second?.close();
    await holder.close();
  }
});

test("the peer suites' server (peer-run.mjs' startRedis) is started by the same rule: a taken port is another's, retried", async () => {
  const holder = await Server.start();
  const dir = mkdtempSync(join(tmpdir(), "rl-peer-start-"));
  try {
    // In a process of its own: peer-run.mjs kills its servers when its process exits.
    const script = [
      `import { startRedis } from ${JSON.stringify(pathToFileURL(join(ROOT, "node", "peer", "peer-run.mjs")).href)};`,
      `import { info } from ${JSON.stringify(pathToFileURL(join(ROOT, "node", "test", "redis-start.mjs")).href)};`,
      `const port = await startRedis(${JSON.stringify(dir)}, { port: ${holder.port} });`,
      "console.log(JSON.stringify({ port, info: await info(port) }));",
      "process.exit(0);",
    ].join("\n");
    const out = await new Promise<string>((ok, fail) =>
      execFile(process.execPath, ["--input-type=module", "-e", script], { timeout: 60_000 }, (e, stdout, stderr) => (e ? fail(new Error(`${e.message}\n${stderr}`)) : ok(stdout))),
    );
    const got = JSON.parse(out.trim().split("\n").pop()!) as { port: number; info: string };
    assert.notEqual(got.port, holder.port, "the holder's port was taken for the peer suite's server");
    assert.doesNotMatch(got.info, new RegExp(`process_id:${holder.proc!.pid}\\r\\n`));
    assert.match(got.info, /loading:0\r\n/);
    assert.match(got.info, /module=name=ratelimit|# Modules[\s\S]*ratelimit/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await holder.close();
  }
});
