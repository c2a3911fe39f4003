// Unit tests of the SDK that need no warren server: error parsing, URL
// building, ndjson and server-sent events parsing, and retries and resumes
// against a local http server each test starts on 127.0.0.1:0.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";

import { Warren, WarrenError, errorFromResponse, lines, pathOf, queryString, sseMessages } from "../dist/index.js";

// A local server answering each request with the handler the test sets.
let server;
let base;
let handler = (_req, res) => res.end();
before(async () => {
  server = http.createServer((req, res) => handler(req, res));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function client() {
  return new Warren({ url: base, apiKey: "k1", backoffMs: 1 });
}

function stream(chunks) {
  return new ReadableStream({
    start(c) {
      for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
      c.close();
    },
  });
}

async function collect(it) {
  const out = [];
  for await (const x of it) out.push(x);
  return out;
}

test("error bodies become WarrenErrors", () => {
  const cases = [
    { status: 404, body: '{"error":{"code":"not_found","message":"sandbox sb-x not found"}}', code: "not_found", message: "sandbox sb-x not found" },
    { status: 409, body: '{"error":{"code":"conflict","message":"sandbox sb-x is not running (state stopped)"}}', code: "conflict", gone: true },
    { status: 409, body: '{"error":{"code":"conflict","message":"directory /a is not empty"}}', code: "conflict", gone: false },
    // A paused sandbox is not gone: it can be resumed.
    { status: 409, body: '{"error":{"code":"conflict","message":"sandbox sb-x is paused: resume it first (or create it with auto_resume)"}}', code: "conflict", gone: false },
    { status: 409, body: '{"error":{"code":"conflict","message":"sandbox sb-x is not running (state paused)"}}', code: "conflict", gone: false },
    { status: 409, body: '{"error":{"code":"conflict","message":"sandbox sb-x is not running (state moving)"}}', code: "conflict", gone: false },
    { status: 409, body: '{"error":{"code":"conflict","message":"sandbox sb-x is not running (its agent does not answer)"}}', code: "conflict", gone: true },
    { status: 502, body: "<html>bad gateway</html>", code: "bad_gateway", message: "HTTP 502" },
    { status: 599, body: "", code: "unavailable", message: "HTTP 599" },
    { status: 418, body: "{}", code: "bad_request", message: "HTTP 418" },
    { status: 429, body: '{"error":{"code":"too_many_requests","message":"16 streams"}}', code: "too_many_requests" },
  ];
  for (const c of cases) {
    const e = errorFromResponse(c.status, c.body, "req-1");
    assert.ok(e instanceof WarrenError && e instanceof Error);
    assert.equal(e.code, c.code, c.body);
    assert.equal(e.status, c.status);
    assert.equal(e.requestId, "req-1");
    if (c.message) assert.equal(e.message, c.message);
    if (c.gone !== undefined) assert.equal(e.isSandboxGone, c.gone, c.body);
  }
});

test("paths and queries are escaped", () => {
  assert.equal(pathOf("v1", "sandboxes", "sb-1", "files"), "/v1/sandboxes/sb-1/files");
  assert.equal(pathOf("v1", "templates", "a/b c"), "/v1/templates/a%2Fb%20c");
  assert.equal(queryString({ path: "/root/a b&c", recursive: true, limit: 5, none: undefined }), "?path=%2Froot%2Fa+b%26c&recursive=true&limit=5");
  assert.equal(queryString({ state: ["running", "paused"] }), "?state=running&state=paused");
  assert.equal(queryString({ x: undefined }), "");
  const w = new Warren({ url: "http://h:1/prefix/", apiKey: "k" });
  assert.equal(w.transport.url("/v1/info", { a: 1 }), "http://h:1/prefix/v1/info?a=1");
  assert.throws(() => new Warren({ url: "ftp://h", apiKey: "k" }), (e) => e.code === "configuration");
});

test("an error answer carries code, status and request id", async () => {
  handler = (req, res) => {
    assert.equal(req.headers.authorization, "Bearer k1");
    res.writeHead(404, { "Content-Type": "application/json", "X-Request-Id": "r-42" });
    res.end('{"error":{"code":"not_found","message":"sandbox sb-x not found"}}');
  };
  await assert.rejects(client().get("sb-x"), (e) => {
    assert.equal(e.code, "not_found");
    assert.equal(e.status, 404);
    assert.equal(e.message, "sandbox sb-x not found");
    assert.equal(e.requestId, "r-42");
    return true;
  });
});

test("GETs are retried on 503; execs never", async () => {
  let calls = 0;
  handler = (req, res) => {
    calls++;
    if (calls < 3) {
      res.writeHead(503);
      return res.end('{"error":{"code":"unavailable","message":"busy"}}');
    }
    res.end(JSON.stringify({ id: "sb-1", state: "running", network: {} }));
  };
  const sb = await client().get("sb-1");
  assert.equal(sb.id, "sb-1");
  assert.equal(calls, 3);

  calls = 0;
  handler = (req, res) => {
    calls++;
    res.writeHead(503);
    res.end();
  };
  await assert.rejects(sb.exec(["true"]), (e) => e.code === "unavailable" && e.status === 503);
  assert.equal(calls, 1);
});

test("a create is retried under one idempotency key", async () => {
  const keys = [];
  handler = (req, res) => {
    keys.push(req.headers["idempotency-key"]);
    if (keys.length === 1) {
      res.writeHead(502);
      return res.end();
    }
    res.writeHead(201);
    res.end(JSON.stringify({ id: "sb-2", state: "running", network: {} }));
  };
  const sb = await client().create({ memory_mb: 256 });
  assert.equal(sb.id, "sb-2");
  assert.equal(keys.length, 2);
  assert.match(keys[0], /^[0-9a-f]{32}$/);
  assert.equal(keys[0], keys[1]);
});

test("lines splits on every line end, across chunks", async () => {
  const got = await collect(lines(stream(["a\r", "\nb\n", "c\rd", "\r\n\n", "tail"]), "test"));
  assert.deepEqual(got, ["a", "b", "c", "d", "", "tail"]);
});

test("an ndjson exec stream gives its events, bytes and result", async () => {
  const b64 = (s) => Buffer.from(s).toString("base64");
  handler = (req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      const r = JSON.parse(body);
      assert.deepEqual(r.cmd, ["cat"]);
      assert.equal(r.stream, true);
      assert.equal(Buffer.from(r.stdin, "base64").toString(), "hi\x00");
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write('{"type":"start","pid":7}\n{"type":"stdout","data":"' + b64("hi") + '"}\n');
      setTimeout(() => {
        res.write('{"type":"stdout","data":"' + b64("\x00") + '"}\n{"type":"stderr","data":"' + b64("e") + '"}\n');
        res.end('{"type":"end","exit_code":3,"status":"exit status 3","duration_ms":5}\n');
      }, 10);
    });
  };
  const sb = await stubSandbox();
  const events = await sb.execStream(["cat"], { stdin: "hi\x00" });
  const got = await collect(events);
  assert.deepEqual(got.map((e) => e.type), ["start", "stdout", "stdout", "stderr", "end"]);
  assert.deepEqual([...got[2].data], [0]);
  assert.equal(events.pid, 7);
  assert.equal(events.result.exit_code, 3);

  const out = [];
  const r = await sb.exec(["cat"], { stdin: "hi\x00", onStdout: (d) => out.push(Buffer.from(d).toString()) });
  assert.deepEqual(out, ["hi", "\x00"]);
  assert.equal(r.stdout, "hi\x00");
  assert.equal(r.stderr, "e");
  assert.equal(r.exit_code, 3);
  assert.equal(r.pid, 7);
});

test("an error event, or a stream cut before its end, is thrown", async () => {
  handler = (req, res) => {
    req.resume();
    res.end('{"type":"start","pid":1}\n{"type":"error","error":"sandbox sb-1 is not running (state stopped)"}\n');
  };
  const sb = await stubSandbox();
  await assert.rejects(collect(await sb.execStream("true")), (e) => e.code === "conflict" && e.isSandboxGone);
  handler = (req, res) => {
    req.resume();
    res.end('{"type":"start","pid":1}\n');
  };
  await assert.rejects(collect(await sb.execStream("true")), (e) => e.code === "stream_broken");
});

test("server-sent events are parsed as the standard says", async () => {
  const got = await collect(sseMessages(async function* () {
    yield* ["id: 5", "", ": keepalive", "id: 6", "event: sandbox.created", "data: {\"a\":", "data: 1}", "", "data:x", "retry: 2000", ""];
  }()));
  assert.deepEqual(got, [
    { id: "5", event: "message", data: "" },
    { id: "6", event: "sandbox.created", data: '{"a":\n1}' },
    { id: undefined, event: "message", data: "x" },
  ]);
});

test("events resume from the last event ID after a cut", async () => {
  const seen = [];
  handler = (req, res) => {
    seen.push({ url: req.url, last: req.headers["last-event-id"] });
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    const ev = (id, kind) => `id: ${id}\nevent: ${kind}\ndata: ${JSON.stringify({ id, kind, sandbox: "sb-1", at: "2026-12-04T21:30:00Z" })}\n\n`;
    if (seen.length === 1) {
      // The position first, one event, then the connection is cut.
      res.write("id: 10\n\n" + ev(11, "sandbox.created"));
      setTimeout(() => res.destroy(), 20);
    } else if (seen.length === 2) {
      res.write(": keepalive\n\n" + ev(12, "sandbox.running"));
      setTimeout(() => res.destroy(), 20);
    } else {
      res.write('event: events.lost\ndata: {"kind":"events.lost","after":12,"oldest":40}\n\n' + ev(40, "sandbox.deleted"));
    }
  };
  const got = [];
  const opened = [];
  for await (const e of client().events({ sandbox: "sb-1", kinds: ["sandbox", "snapshot"], opened: (after) => opened.push(after) })) {
    got.push(e);
    if (got.length === 4) break;
  }
  assert.deepEqual(got.map((e) => [e.id, e.kind]), [[11, "sandbox.created"], [12, "sandbox.running"], [undefined, "events.lost"], [40, "sandbox.deleted"]]);
  assert.deepEqual(opened, [10], "the position message opens only the first stream");
  assert.equal(got[2].oldest, 40);
  assert.deepEqual(seen.map((s) => s.last), [undefined, "11", "12"]);
  assert.equal(seen[0].url, "/v1/events?sandbox=sb-1&kind=sandbox%2Csnapshot");
});

test("events throw a refusal that retrying cannot fix", async () => {
  handler = (req, res) => {
    res.writeHead(400);
    res.end('{"error":{"code":"bad_request","message":"unknown event kind \\"x\\""}}');
  };
  await assert.rejects(collect(client().events({ kinds: "x" })), (e) => e.code === "bad_request");
});

test("files stream up from a ReadableStream and down as bytes", async () => {
  let got;
  handler = (req, res) => {
    if (req.method === "PUT") {
      const parts = [];
      req.on("data", (d) => parts.push(d));
      req.on("end", () => {
        got = { url: req.url, type: req.headers["content-type"], body: Buffer.concat(parts) };
        res.end(JSON.stringify({ name: "x.bin", path: "/root/x.bin", type: "file", size: got.body.length, mode: 0o600 }));
      });
      return;
    }
    res.end(Buffer.from([0, 1, 2, 255]));
  };
  const sb = await stubSandbox();
  const chunks = [new Uint8Array([0, 1]), new Uint8Array([2, 255])];
  const body = new ReadableStream({ pull: (c) => (chunks.length ? c.enqueue(chunks.shift()) : c.close()) });
  const info = await sb.files.write("/root/x.bin", body, { mode: 0o600 });
  assert.equal(info.size, 4);
  assert.equal(got.url, "/v1/sandboxes/sb-1/files?path=%2Froot%2Fx.bin&mode=0600");
  assert.equal(got.type, "application/octet-stream");
  assert.deepEqual([...got.body], [0, 1, 2, 255]);
  assert.deepEqual([...(await sb.files.read("/root/x.bin"))], [0, 1, 2, 255]);
});

// Read a request's body as JSON ({} when it has none), then answer.
function withBody(answer) {
  return (req, res) => {
    const parts = [];
    req.on("data", (d) => parts.push(d));
    req.on("end", () => {
      const text = Buffer.concat(parts).toString();
      answer(req, res, text ? JSON.parse(text) : {});
    });
  };
}

test("secrets: set, list, get and delete, and a set is not sent twice", async () => {
  const secret = { id: "sec_aaaaaaaaaaaaaaaaaaaa", name: "openai", version: 1, metadata: { team: "ml" },
    created_at: "2026-12-07T10:00:00Z", updated_at: "2026-12-07T10:00:00Z" };
  const seen = [];
  handler = withBody((req, res, body) => {
    seen.push([req.method, req.url, body]);
    if (req.method === "DELETE") {
      res.writeHead(204);
      return res.end();
    }
    res.writeHead(req.method === "PUT" ? 201 : 200);
    res.end(JSON.stringify(req.url === "/v1/secrets" ? { secrets: [secret] } : secret));
  });
  const w = client();
  assert.deepEqual(await w.setSecret("OpenAI", { value: "sk-1", metadata: { team: "ml" } }), secret);
  assert.deepEqual(await w.secrets(), [secret]);
  assert.deepEqual(await w.getSecret("a/b"), secret);
  await w.deleteSecret(secret.id);
  assert.deepEqual(seen, [
    ["PUT", "/v1/secrets/OpenAI", { value: "sk-1", metadata: { team: "ml" } }],
    ["GET", "/v1/secrets", {}],
    ["GET", "/v1/secrets/a%2Fb", {}],
    ["DELETE", "/v1/secrets/sec_aaaaaaaaaaaaaaaaaaaa", {}],
  ]);
  // An empty name would name the list: refused before anything is sent.
  for (const call of [() => w.setSecret("", { value: "v" }), () => w.getSecret(""), () => w.deleteSecret("")]) {
    await assert.rejects(call(), (e) => e.code === "bad_request");
  }
  assert.equal(seen.length, 4);

  // Each set that reaches the server counts a version: a 503 is not retried.
  let calls = 0;
  handler = (req, res) => {
    calls++;
    res.writeHead(503);
    res.end('{"error":{"code":"unavailable","message":"busy"}}');
  };
  await assert.rejects(w.setSecret("openai", { value: "sk-2" }), (e) => e.code === "unavailable");
  assert.equal(calls, 1);
});

test("network rules go out and come back as the API has them", async () => {
  const rules = {
    "api.openai.com": [{ transform: { headers: { Authorization: "Bearer ${secrets.openai}" } } }],
    "*.example.com": [{ transform: { headers: { "X-Key": "${e2b.secrets.k}" } } }],
  };
  const sb = await stubSandbox();
  let got;
  handler = withBody((req, res, body) => {
    got = [req.method, req.url, body];
    res.end(JSON.stringify({ policy: body, address: "10.0.2.15", gateway: "10.0.2.2", denied: 0, rate_limited: 0 }));
  });
  const st = await sb.setNetwork({ allow: ["api.openai.com"], rules });
  assert.deepEqual(got, ["PUT", "/v1/sandboxes/sb-1/network", { allow: ["api.openai.com"], rules }]);
  assert.deepEqual(st.policy.rules, rules);

  handler = withBody((req, res, body) => {
    got = body;
    res.writeHead(201);
    res.end(JSON.stringify({ id: "sb-3", state: "running", network: body.network }));
  });
  const made = await client().create({ network: { none: true, rules } });
  assert.deepEqual(got.network, { none: true, rules });
  assert.deepEqual(made.info.network.rules, rules);
});

// A Sandbox on the stub server.
async function stubSandbox() {
  const h = handler;
  handler = (req, res) => res.end(JSON.stringify({ id: "sb-1", state: "running", network: {} }));
  const sb = await client().get("sb-1");
  handler = h;
  return sb;
}
