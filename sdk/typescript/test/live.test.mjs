// Live tests against a real warren server: skipped unless WARREN_URL and
// WARREN_API_KEY are set. e2e/typescript_test.go runs them against the
// end-to-end suite's daemon with a tenant key of their own.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { Warren } from "../dist/index.js";

const skip = process.env.WARREN_URL && process.env.WARREN_API_KEY
  ? false
  : "WARREN_URL and WARREN_API_KEY are not set: the live tests need a warren server";

describe("against a warren server", { skip }, () => {
  const warren = new Warren();
  let sb;
  const made = [];

  before(async () => {
    sb = await warren.create({ timeout_seconds: 600, metadata: { test: "typescript-sdk" } });
    made.push(sb);
  });
  after(async () => {
    for (const s of made) await s.delete().catch(() => undefined);
  });

  test("create", async () => {
    assert.match(sb.id, /^sb-/);
    assert.equal(sb.state, "running");
    assert.ok(sb.info.isolation);
    const got = await warren.get(sb.id);
    assert.equal(got.info.metadata.test, "typescript-sdk");
    const listed = await warren.list({ state: "running" });
    assert.ok(listed.some((s) => s.id === sb.id));
  });

  test("the two questions, collected", async () => {
    const six = await sb.exec(["python3", "-c", "print(3 + 3)"], { timeoutMs: 60_000 });
    assert.equal(six.stdout, "6\n");
    assert.equal(six.exit_code, 0);
    const three = await sb.exec(["python3", "-c", 'print("strawberry".count("r"))']);
    assert.equal(three.stdout.trim(), "3");
    const shell = await sb.exec("echo out; echo err >&2; exit 3");
    assert.deepEqual([shell.stdout, shell.stderr, shell.exit_code], ["out\n", "err\n", 3]);
    const slow = await sb.exec(["sleep", "30"], { timeoutMs: 500 });
    assert.equal(slow.timed_out, true);
  });

  test("exec streamed: callbacks and async iteration", async () => {
    const pieces = [];
    const r = await sb.exec("for i in 1 2 3; do echo $i; sleep 0.1; done", { onStdout: (d) => pieces.push(Buffer.from(d).toString()) });
    assert.equal(pieces.join(""), "1\n2\n3\n");
    assert.equal(r.stdout, "1\n2\n3\n");
    assert.equal(r.exit_code, 0);

    const events = await sb.execStream(["cat"], { stdin: new Uint8Array([0, 1, 255]) });
    const types = [];
    const out = [];
    for await (const ev of events) {
      types.push(ev.type);
      if (ev.type === "stdout") out.push(...ev.data);
    }
    assert.equal(types[0], "start");
    assert.equal(types.at(-1), "end");
    assert.deepEqual(out, [0, 1, 255]);
    assert.equal(events.result.exit_code, 0);
  });

  test("a background process: stdin streamed, signal, wait, output", async () => {
    const p = await sb.start(["cat"], { tag: "cat" });
    assert.ok(p.pid > 0);
    const chunks = ["one\n", "two\n"];
    const body = new ReadableStream({
      pull(c) {
        const s = chunks.shift();
        if (s === undefined) c.close();
        else c.enqueue(new TextEncoder().encode(s));
      },
    });
    await p.sendStdin(body);
    await p.sendStdin("three\n", { close: true });
    const r = await p.output(30_000);
    assert.equal(r.stdout, "one\ntwo\nthree\n");
    assert.equal(r.exit_code, 0);
    assert.equal((await p.info()).tag, "cat");

    const sleeper = await sb.start(["sleep", "600"]);
    await assert.rejects(sleeper.wait(200), (e) => e.code === "timeout" && e.status === 504);
    await sleeper.signal("TERM");
    const end = await sleeper.wait(30_000);
    assert.notEqual(end.exit_code, 0);
  });

  test("a pty process with resize", async () => {
    const p = await sb.start(["sh", "-c", "read line; stty size"], { pty: { cols: 80, rows: 24 } });
    await p.resize(100, 30);
    await p.sendStdin("go\n");
    const r = await p.output(30_000);
    assert.match(r.stdout, /30 100/);
  });

  test("files: 10 MiB of binary round trip, text, and the rest", async () => {
    const data = new Uint8Array(randomBytes(10 << 20));
    const info = await sb.files.write("/root/big.bin", data);
    assert.equal(info.size, data.length);
    const back = await sb.files.read("/root/big.bin");
    assert.equal(back.length, data.length);
    assert.ok(Buffer.from(back).equals(Buffer.from(data)), "read back differs");
    let streamed = 0;
    for await (const chunk of await sb.files.readStream("/root/big.bin")) streamed += chunk.length;
    assert.equal(streamed, data.length);

    await sb.files.write("run.sh", "#!/bin/sh\necho hi\n", { mode: 0o755 });
    assert.equal(await sb.files.readText("/root/run.sh"), "#!/bin/sh\necho hi\n");
    assert.equal((await sb.files.stat("/root/run.sh")).mode, 0o755);
    await sb.files.mkdir("/root/d/e");
    await sb.files.move("/root/run.sh", "/root/d/e/run.sh");
    const names = (await sb.files.list("/root/d", { depth: 2 })).map((f) => f.path);
    assert.deepEqual(names, ["/root/d/e", "/root/d/e/run.sh"]);
    await assert.rejects(sb.files.remove("/root/d"), (e) => e.code === "conflict");
    await sb.files.remove("/root/d", { recursive: true });
    assert.equal(await sb.files.exists("/root/d"), false);
    await assert.rejects(sb.files.read("/../etc/passwd"), (e) => e.code === "bad_request");
  });

  test("network, preview and metrics", async () => {
    const st = await sb.setNetwork({ allow: ["example.com"] });
    assert.deepEqual(st.policy.allow, ["example.com"]);
    assert.deepEqual((await sb.network()).policy.allow, ["example.com"]);
    await sb.setNetwork({});
    const pv = await sb.preview();
    assert.equal(typeof pv.token, "string");
    assert.match(await sb.portUrl(8080), /8080/);
    const m = await sb.metrics();
    assert.ok(m.memory_total_bytes > 0 && m.disk_total_bytes > 0 && m.pids > 0);
    await sb.setTimeout(900);
    assert.ok(Date.parse(sb.info.expires_at) > Date.now() + 800_000);
  });

  test("secrets: set, list, get, delete; rules that name one, read back", async () => {
    const name = `ts-sdk-${randomBytes(6).toString("hex")}`;
    const first = await warren.setSecret(name.toUpperCase(), { value: "sk-live-first", metadata: { suite: "typescript-sdk" } });
    try {
      assert.match(first.id, /^sec_/);
      assert.deepEqual([first.name, first.version, first.metadata], [name, 1, { suite: "typescript-sdk" }]);
      // A new value is the next version; metadata not given is kept.
      const second = await warren.setSecret(name, { value: "sk-live-second" });
      assert.deepEqual([second.id, second.version, second.metadata], [first.id, 2, first.metadata]);
      assert.deepEqual(await warren.getSecret(first.id), second);
      assert.deepEqual(await warren.getSecret(name.toUpperCase()), second);
      const listed = await warren.secrets();
      assert.ok(listed.some((x) => x.id === first.id));
      assert.deepEqual(listed.map((x) => x.name), listed.map((x) => x.name).sort());
      for (const path of ["/v1/secrets", `/v1/secrets/${name}`]) {
        const r = await fetch(warren.transport.url(path), { headers: { Authorization: `Bearer ${process.env.WARREN_API_KEY}` } });
        assert.ok(!(await r.text()).includes("sk-live"), path);
      }
      for (const [n, value] of [["bad name!", "v"], [name, ""], [name, "sk-live\nsecond line"]]) {
        await assert.rejects(warren.setSecret(n, { value }), (e) => e.code === "bad_request" && !e.message.includes("sk-live"));
      }

      // Rules are part of the policy: set, shown, replaced whole.
      const rules = { "example.com": [{ transform: { headers: { Authorization: "Bearer ${secrets." + name + "}" } } }] };
      let st = await sb.setNetwork({ allow: ["example.com"], rules });
      assert.deepEqual(st.policy, { allow: ["example.com"], rules });
      assert.deepEqual((await sb.network()).policy, { allow: ["example.com"], rules });
      assert.deepEqual((await warren.get(sb.id)).info.network, { allow: ["example.com"], rules });
      await assert.rejects(
        sb.setNetwork({ rules: { "example.com": [{ transform: { headers: { X: "${secrets.ts-sdk-none}" } } }] } }),
        (e) => e.code === "bad_request" && e.message.includes("ts-sdk-none"),
      );
      st = await sb.setNetwork({});
      assert.equal(st.policy.rules, undefined);

      await warren.deleteSecret(name);
      await assert.rejects(warren.getSecret(first.id), (e) => e.code === "not_found");
      await assert.rejects(warren.deleteSecret(name), (e) => e.code === "not_found");
    } finally {
      await warren.deleteSecret(first.id).catch(() => undefined);
      await sb.setNetwork({}).catch(() => undefined);
    }
  });

  test("snapshot, restore and lineage", async () => {
    await sb.files.write("/root/state.txt", "before the snapshot");
    const snap = await sb.snapshot({ wait: true });
    assert.equal(snap.state, "durable");
    assert.equal((await warren.getSnapshot(snap.id)).id, snap.id);
    assert.ok((await sb.snapshots()).some((s) => s.id === snap.id));
    assert.ok((await warren.snapshots()).some((s) => s.id === snap.id));
    const [kid] = await warren.restore(snap.id, { count: 1, timeout_seconds: 300 });
    made.push(kid);
    assert.equal(kid.info.origin, snap.id);
    assert.equal(await kid.files.readText("/root/state.txt"), "before the snapshot");
    const second = await kid.snapshot();
    assert.deepEqual(await warren.lineage(second.id), [snap.id]);
    assert.equal((await warren.waitSnapshot(second.id)).state, "durable");
    await warren.deleteSnapshot(second.id);
    await assert.rejects(warren.restore(second.id), (e) => e.code === "not_found" || e.code === "conflict");
  });

  test("a named snapshot, found, restored and deleted by its name", async () => {
    const name = `ts-named-${randomBytes(4).toString("hex")}`;
    await sb.files.write("/root/named.txt", "named");
    const snap = await sb.snapshot({ wait: true, name });
    assert.equal(snap.name, name);
    assert.equal((await warren.getSnapshot(name)).id, snap.id);
    assert.ok((await sb.snapshots()).some((s) => s.id === snap.id && s.name === name));
    await assert.rejects(sb.snapshot({ name }), (e) => e.code === "conflict" && e.message.includes(snap.id));
    await assert.rejects(sb.snapshot({ name: "sn-mine" }), (e) => e.code === "bad_request");
    const [kid] = await warren.restore(name, { timeout_seconds: 300 });
    made.push(kid);
    assert.equal(kid.info.origin, snap.id);
    assert.equal(await kid.files.readText("/root/named.txt"), "named");
    await warren.deleteSnapshot(name);
    await assert.rejects(warren.getSnapshot(name), (e) => e.code === "not_found");
  });

  test("fork", async () => {
    await sb.files.write("/root/fork.txt", "parent");
    const r = await sb.fork({ count: 1 });
    made.push(...r.sandboxes);
    assert.equal(r.sandboxes.length, 1);
    assert.equal(r.sandboxes[0].info.origin, r.snapshot.id);
    assert.equal(await r.sandboxes[0].files.readText("/root/fork.txt"), "parent");
  });

  // A paused sandbox's info, as pause answered it and as get reads it.
  async function assertPaused(s) {
    assert.equal(s.state, "paused");
    const p = s.info.paused;
    // A container pauses as a durable disk snapshot and a stop: it keeps
    // no memory; vm and gvisor do.
    assert.equal(p.memory, s.info.runtime !== "container", s.info.runtime);
    assert.equal(p.reason, "requested");
    assert.match(p.snapshot, /^sn-/);
    assert.deepEqual((await warren.get(s.id)).info.paused, p);
  }

  test("sleep and wake: an exec wakes it with its files", async () => {
    const s = await warren.create({ timeout_seconds: 300, on_timeout: "pause", idle_timeout_seconds: 600, auto_resume: true });
    made.push(s);
    assert.deepEqual([s.info.on_timeout, s.info.idle_timeout_seconds, s.info.auto_resume], ["pause", 600, true]);
    assert.ok(s.info.paused_ttl_seconds > 0);
    assert.equal(s.info.paused, undefined);
    await s.files.write("/root/sleep.txt", "kept\n");
    await assertPaused(await s.pause());
    assert.equal((await s.exec(["cat", "/root/sleep.txt"])).stdout, "kept\n");
    await s.refresh();
    assert.equal(s.state, "running");
    assert.equal(s.info.paused, undefined);
  });

  test("sleep without auto_resume: a call is a conflict, not gone", async () => {
    const s = await warren.create({ timeout_seconds: 300, runtime: "container" });
    made.push(s);
    await s.files.write("/root/sleep.txt", "kept\n");
    await assertPaused(await s.pause());
    for (const call of [() => s.exec(["true"]), () => s.files.readText("/root/sleep.txt")]) {
      await assert.rejects(call(), (e) => e.code === "conflict" && e.status === 409 && !e.isSandboxGone && /paused/.test(e.message));
    }
    await s.resume();
    assert.equal(s.state, "running");
    assert.equal(await s.files.readText("/root/sleep.txt"), "kept\n");
  });

  test("events of a create and a delete, then delete", async () => {
    // The stream opens first, from now: the events are those of this test's
    // acts, whatever the server's store held before.
    let ready;
    const opened = new Promise((resolve) => (ready = resolve));
    const events = warren.events({ kinds: "sandbox.created,sandbox.deleted", opened: ready, signal: AbortSignal.timeout(60_000) });
    const first = events.next();
    await Promise.race([opened, first]);
    const s = await warren.create({ timeout_seconds: 300 });
    made.push(s);
    await s.delete();
    const kinds = [];
    for (let r = await first; !r.done; r = await events.next()) {
      if (r.value.sandbox !== s.id) continue;
      kinds.push(r.value.kind);
      if (r.value.kind === "sandbox.deleted") break;
    }
    await events.return();
    assert.deepEqual(kinds, ["sandbox.created", "sandbox.deleted"]);
  });
});
