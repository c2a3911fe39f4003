// Times the e2b SDK against warren's own HTTP API from the same node.js
// process, alternating, so both see the same machine (e2e
// BenchmarkE2BCommandsRun runs it and reports what it prints):
//   exec:   commands.run('true') against POST /v1/sandboxes/ID/exec of the
//           same command the SDK runs (/bin/bash -l -c true), one sandbox;
//   create: Sandbox.create then commands.run('true') against
//           POST /v1/sandboxes then the same exec, each sandbox deleted
//           outside the timing.
// Env: the E2B_* variables, WARREN_URL, WARREN_KEY, BENCH_EXECS,
// BENCH_CREATES. Prints one JSON object.
import { Sandbox } from 'e2b'

const url = process.env.WARREN_URL
const key = process.env.WARREN_KEY
const execs = Number(process.env.BENCH_EXECS || 200)
const creates = Number(process.env.BENCH_CREATES || 10)
const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' }

async function warren(method, path, body) {
  const res = await fetch(url + path, { method, headers, body: body && JSON.stringify(body) })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : null
}

async function warrenExec(id) {
  const r = await warren('POST', `/v1/sandboxes/${id}/exec`, { cmd: ['/bin/bash', '-l', '-c', 'true'] })
  if (r.exit_code !== 0) throw new Error(`exit ${r.exit_code}`)
}

function quantiles(ms) {
  const s = [...ms].sort((a, b) => a - b)
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))]
  return { p50: q(0.5), p99: q(0.99), n: s.length }
}

async function time(f) {
  const t = performance.now()
  await f()
  return performance.now() - t
}

const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
try {
  // Warm both paths: connections, the page cache of bash.
  for (let i = 0; i < 10; i++) {
    await sbx.commands.run('true')
    await warrenExec(sbx.sandboxId)
  }
  const e2b = []
  const own = []
  for (let i = 0; i < execs; i++) {
    e2b.push(await time(() => sbx.commands.run('true')))
    own.push(await time(() => warrenExec(sbx.sandboxId)))
  }
  const e2bCreate = []
  const ownCreate = []
  for (let i = 0; i < creates; i++) {
    let s
    e2bCreate.push(await time(async () => {
      s = await Sandbox.create('base', { timeoutMs: 60_000 })
      await s.commands.run('true')
    }))
    await s.kill()
    let id
    ownCreate.push(await time(async () => {
      id = (await warren('POST', '/v1/sandboxes', { timeout_seconds: 60 })).id
      await warrenExec(id)
    }))
    await warren('DELETE', `/v1/sandboxes/${id}`)
  }
  console.log(JSON.stringify({
    exec: { e2b: quantiles(e2b), warren: quantiles(own) },
    create: { e2b: quantiles(e2bCreate), warren: quantiles(ownCreate) },
  }))
} finally {
  await sbx.kill()
}
