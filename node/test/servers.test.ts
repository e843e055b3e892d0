// The harness itself: a server counts as started by testkit's rule (INFO shows this child's process_id
// and loading:0), so a start whose port another server holds is neither mistaken for that server nor
// given up: it is retried on another port.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Server, info } from "./servers.ts";

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
