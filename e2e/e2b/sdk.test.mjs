// The real, unmodified e2b SDK from npm against a real warren server
// (e2e/e2b_test.go starts it and sets E2B_API_KEY, E2B_API_URL and either
// E2B_SANDBOX_URL or E2B_DOMAIN; and WARREN_E2B_SECRETS_HOST, the test
// internet's HTTPS host whose GET /headers answers the request's headers,
// each name in lower case → the hex SHA-256 of its value, "" while it has
// none). Run with `node --test`.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes, createHash } from 'node:crypto'
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  Sandbox,
  Template,
  Secret,
  SecretError,
  SecretNotFoundError,
  CommandExitError,
  NotFoundError,
  FileType,
  FilesystemEventType,
} from 'e2b'

const created = []
async function newSandbox(opts = {}) {
  const sbx = await Sandbox.create('base', { timeoutMs: 300_000, ...opts })
  created.push(sbx)
  return sbx
}

// secrets are the names of the secrets the tests made, destroyed at the
// end if a test did not.
const secrets = []
async function newSecret(name, value, opts) {
  const sec = await Secret.create(name, value, opts)
  secrets.push(sec.name)
  return sec
}

after(async () => {
  for (const s of created) await s.kill().catch(() => {})
  for (const name of secrets) await Secret.destroy(name).catch(() => {})
})

// apiURL is the control API's URL, found as the SDK finds it.
const apiURL = process.env.E2B_API_URL || `https://api.${process.env.E2B_DOMAIN}`

// raw calls the control API without the SDK, to see an answer as it was
// sent: its status, its text and its headers.
async function raw(method, path, body) {
  const res = await fetch(apiURL + path, {
    method,
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body && JSON.stringify(body),
  })
  return { status: res.status, text: await res.text(), headers: [...res.headers].join('\n') }
}

// sha256 is the hex SHA-256 of s.
const sha256 = (s) => createHash('sha256').update(s).digest('hex')

// waitFor polls cond until it holds or 10 s pass.
async function waitFor(what, cond) {
  const end = Date.now() + 10_000
  for (;;) {
    if (await cond()) return
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

test('create with envs and metadata; info, list by metadata, timeout', async () => {
  const tag = randomBytes(6).toString('hex')
  const sbx = await newSandbox({ envs: { GREETING: 'hello' }, metadata: { suite: 'e2b', tag } })
  assert.match(sbx.sandboxId, /^sb-/)
  const r = await sbx.commands.run('echo $GREETING')
  assert.equal(r.stdout, 'hello\n')
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.metadata.tag, tag)
  assert.equal(info.state, 'running')

  await newSandbox({ metadata: { suite: 'e2b', tag: 'other' } })
  const found = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
  assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])

  const before = (await sbx.getInfo()).endAt.getTime()
  await sbx.setTimeout(900_000)
  const later = (await sbx.getInfo()).endAt.getTime()
  assert.ok(later > before + 300_000, `endAt moved from ${before} to ${later}`)
  assert.equal(await sbx.isRunning(), true)

  const metrics = await sbx.getMetrics()
  assert.equal(metrics.length, 1)
  const [m] = metrics
  assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, JSON.stringify(m))
  assert.ok(m.diskTotal > 0 && m.diskUsed > 0 && m.cpuCount >= 1, JSON.stringify(m))
  assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m))
})

test('commands', async () => {
  const sbx = await newSandbox()
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')

  await assert.rejects(sbx.commands.run('exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    return true
  })

  const chunks = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', {
    onStdout: (d) => chunks.push(d),
  })
  assert.equal(chunks.join(''), '1\n2\n3\n')

  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  await sbx.commands.run('id nobody')
  assert.equal((await sbx.commands.run('id -un', { user: 'nobody' })).stdout, 'nobody\n')

  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }))

  // Background, then connect, stdin and kill.
  const bg = await sbx.commands.run('cat', { background: true, stdin: true })
  const again = await sbx.commands.connect(bg.pid)
  await sbx.commands.sendStdin(bg.pid, 'typed\n')
  await waitFor('the echo of stdin', () => again.stdout.includes('typed\n'))
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid), `pid ${bg.pid} not in ${JSON.stringify(procs)}`)
  assert.equal(await sbx.commands.kill(bg.pid), true)
  await assert.rejects(again.wait())
})

test('files', async () => {
  const sbx = await newSandbox()
  const info = await sbx.files.write('/tmp/hello.txt', 'hello file')
  assert.equal(info.path, '/tmp/hello.txt')
  assert.equal(await sbx.files.read('/tmp/hello.txt'), 'hello file')

  // 100 MiB of binary both ways.
  const big = randomBytes(100 << 20)
  await sbx.files.write('/tmp/big.bin', new Blob([big]))
  const sum = (await sbx.commands.run('sha256sum /tmp/big.bin')).stdout.split(' ')[0]
  assert.equal(sum, createHash('sha256').update(big).digest('hex'))
  const back = await sbx.files.read('/tmp/big.bin', { format: 'bytes' })
  assert.equal(back.length, big.length)
  assert.ok(Buffer.from(back).equals(big))

  assert.equal(await sbx.files.makeDir('/tmp/d/e'), true)
  assert.equal(await sbx.files.exists('/tmp/d/e'), true)
  assert.equal(await sbx.files.exists('/tmp/nope'), false)
  await sbx.files.write([
    { path: '/tmp/d/a.txt', data: 'a' },
    { path: '/tmp/d/b.txt', data: 'b' },
  ])
  const names = (await sbx.files.list('/tmp/d')).map((e) => `${e.name}:${e.type}`).sort()
  assert.deepEqual(names, ['a.txt:file', 'b.txt:file', `e:${FileType.DIR}`])
  await sbx.files.rename('/tmp/d/a.txt', '/tmp/d/c.txt')
  assert.equal(await sbx.files.read('/tmp/d/c.txt'), 'a')
  await sbx.files.remove('/tmp/d/c.txt')
  assert.equal(await sbx.files.exists('/tmp/d/c.txt'), false)
  await assert.rejects(sbx.files.read('/tmp/missing.txt'), (err) => {
    assert.ok(err instanceof NotFoundError, `got ${err}`)
    return true
  })
})

test('watch a directory', async () => {
  const sbx = await newSandbox()
  await sbx.files.makeDir('/tmp/w')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/w', (e) => events.push(e))
  await sbx.files.write('/tmp/w/new.txt', 'x')
  await waitFor('a create event', () => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE))
  await handle.stop()
})

test('pty', async () => {
  const sbx = await newSandbox()
  let out = ''
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d) } })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('tty; stty size\n'))
  await waitFor('the tty and its size', () => /\/dev\/pts\/\d+/.test(out) && out.includes('24 80'))
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit\n'))
  await waitFor('the new size', () => out.includes('30 100'))
  await term.wait()
})

test('snapshot, create from it, fork, kill twice', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/root/state.txt', 'saved')
  const snap = await sbx.createSnapshot()
  assert.match(snap.snapshotId, /^sn-/)
  const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId))

  const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 })
  created.push(fromSnap)
  assert.equal(await fromSnap.files.read('/root/state.txt'), 'saved')

  const children = await sbx.fork({ count: 2 })
  assert.equal(children.length, 2)
  for (const c of children) {
    assert.ok(!(c instanceof Error), `fork child failed: ${c}`)
    created.push(c)
  }
  await children[0].files.write('/root/state.txt', 'first')
  await children[1].files.write('/root/state.txt', 'second')
  assert.equal(await children[0].files.read('/root/state.txt'), 'first')
  assert.equal(await children[1].files.read('/root/state.txt'), 'second')
  assert.equal(await sbx.files.read('/root/state.txt'), 'saved')

  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('a named snapshot: listed with its name, a sandbox created from it, deleted by it', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/root/named.txt', 'by name')
  const name = `e2b-named-${randomBytes(4).toString('hex')}`
  const snap = await sbx.createSnapshot({ name })
  assert.match(snap.snapshotId, /^sn-/)
  assert.deepEqual(snap.names, [name])
  assert.deepEqual(await Sandbox.listSnapshots({ name }).nextItems(), [{ snapshotId: snap.snapshotId, names: [name] }])
  const ofSandbox = await sbx.listSnapshots().nextItems()
  assert.ok(ofSandbox.some((s) => s.snapshotId === snap.snapshotId && s.names.includes(name)))
  await assert.rejects(sbx.createSnapshot({ name }), (e) => e.message.includes(snap.snapshotId))

  const fromName = await Sandbox.create(name, { timeoutMs: 300_000 })
  created.push(fromName)
  assert.equal(await fromName.files.read('/root/named.txt'), 'by name')

  assert.equal(await Sandbox.deleteSnapshot(name), true)
  assert.equal(await Sandbox.deleteSnapshot(name), false)
  assert.deepEqual(await Sandbox.listSnapshots({ name }).nextItems(), [])
})

// contextDir is a template build's file context: a directory of the
// test's own, removed when the test ends.
function contextDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'e2b-template-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

test('template build: copy, env, run, workdir, then a sandbox of it', { skip: !process.env.E2B_SANDBOX_URL && 'once, in single-URL mode' }, async (t) => {
  const dir = contextDir(t)
  mkdirSync(join(dir, 'app'))
  writeFileSync(join(dir, 'app', 'hello.txt'), 'from the context\n')
  const name = `e2b-${randomBytes(4).toString('hex')}`
  const template = Template({ fileContextPath: dir })
    .fromTemplate('base')
    .copy('app/hello.txt', '/opt/app/hello.txt')
    .setEnvs({ GREETING: 'hi' })
    .runCmd('echo built > /opt/app/built.txt', { user: 'root' })
    .setWorkdir('/opt/app')
  const logs = []
  const built = await Template.build(template, name, { onBuildLogs: (l) => logs.push(String(l.message)) })
  assert.equal(built.name, name)
  assert.equal(await Template.exists(name), true)
  assert.equal(await Template.exists(`${name}-nope`), false)
  const sbx = await Sandbox.create(name, { timeoutMs: 300_000 })
  created.push(sbx)
  const r = await sbx.commands.run('pwd; cat hello.txt built.txt; echo $GREETING')
  assert.equal(r.stdout, '/opt/app\nfrom the context\nbuilt\nhi\n')

  // A failing step fails the build with its output.
  const broken = Template({ fileContextPath: dir }).fromTemplate(name).runCmd('echo no luck >&2; exit 7')
  await assert.rejects(Template.build(broken, name), (e) => /no luck/.test(e.message) && /exit code 7/.test(e.message))
})

test('template build: files beyond a build\'s 64 MiB are refused, and the build is not started', { skip: !process.env.E2B_SANDBOX_URL && 'once, in single-URL mode' }, async (t) => {
  const dir = contextDir(t)
  // Random bytes: the SDK's gzip cannot shrink them under the bound.
  writeFileSync(join(dir, 'big'), randomBytes(65 << 20))
  const name = `e2b-${randomBytes(4).toString('hex')}`
  const template = Template({ fileContextPath: dir }).fromTemplate('base').copy('big', '/opt/big')
  await assert.rejects(Template.build(template, name), (e) => /Too Large/.test(e.message))
  assert.equal(await Template.exists(name), false)
})

test('a port on its host name', { skip: process.env.E2B_SANDBOX_URL ? 'single-URL mode has no host names' : false }, async () => {
  const sbx = await newSandbox()
  await sbx.commands.run('echo served > /tmp/index.html; cd /tmp && python3 -m http.server 8000 >/dev/null 2>&1', { background: true })
  const url = `https://${sbx.getHost(8000)}/index.html`
  await waitFor(`${url} to answer`, async () => {
    const res = await fetch(url).catch(() => null)
    return res !== null && res.status === 200 && (await res.text()) === 'served\n'
  })
})

test('vm: pause and resume keep a process running', { skip: process.env.WARREN_E2B_VM !== '1' && 'WARREN_E2B_VM is not 1' }, async () => {
  const sbx = await newSandbox({ headers: { 'X-Warren-Runtime': 'vm' } })
  const bg = await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true })
  await waitFor('the counter', async () => Number(await sbx.files.read('/tmp/count').catch(() => '0')) > 1)
  assert.equal(await sbx.pause(), true)
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  assert.equal(await sbx.pause(), false)
  await sbx.connect()
  assert.equal((await sbx.getInfo()).state, 'running')
  const before = Number(await sbx.files.read('/tmp/count'))
  await waitFor('the counter to go on', async () => Number(await sbx.files.read('/tmp/count')) > before)
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid), `pid ${bg.pid} gone after the resume`)
})

// E2B's own pause complaints turned round: a paused sandbox keeps its ID
// and its files, whatever its runtime (a container's processes start
// again; gvisor's and a vm's go on), a call to it wakes it when its
// lifecycle says autoResume, and connect wakes it too.
test('sleep and wake: lifecycle, pause, list paused, autoResume, connect', async () => {
  for (const runtime of ['container', 'auto']) {
    const sbx = await newSandbox({ headers: { 'X-Warren-Runtime': runtime }, lifecycle: { onTimeout: 'pause', autoResume: true } })
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    await sbx.files.write('/root/kept.txt', runtime)
    assert.equal(await sbx.betaPause(), true, runtime)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    assert.equal(await sbx.pause(), false, 'a second pause of a paused sandbox')
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), `${sbx.sandboxId} not listed paused`)
    // autoResume: a call wakes it.
    assert.equal(await sbx.files.read('/root/kept.txt'), runtime)
    assert.equal((await sbx.getInfo()).state, 'running')
    // connect wakes a paused sandbox, under its ID, with its files.
    assert.equal(await sbx.pause(), true)
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.equal((await again.getInfo()).state, 'running')
    assert.equal((await again.commands.run('cat /root/kept.txt')).stdout, runtime)
  }
  // Without autoPause, autoResume is refused by the SDK itself; warren
  // refuses the same request sent as it is.
  await assert.rejects(Sandbox.create('base', { lifecycle: { onTimeout: 'kill', autoResume: true } }), /autoResume/)
})

test('secrets: create, get by name and ID, list in pages, exists, update, destroy; no answer has a value', async () => {
  const tag = randomBytes(4).toString('hex')
  const value = `value-${randomBytes(16).toString('hex')}`
  const name = `E2B-Secret-${tag}`
  const sec = await newSecret(name, value, { metadata: { suite: 'e2b' } })
  assert.match(sec.secretId, /^sec_/)
  assert.equal(sec.name, name.toLowerCase(), 'names are stored in lower case')
  assert.equal(sec.version, 1)
  assert.deepEqual(sec.metadata, { suite: 'e2b' })
  assert.ok(Math.abs(sec.createdAt.getTime() - Date.now()) < 60_000, `createdAt ${sec.createdAt}`)
  assert.equal(sec.updatedAt.getTime(), sec.createdAt.getTime())
  // A name that has a secret is refused, in any case: a create never
  // replaces a value.
  await assert.rejects(Secret.create(name.toUpperCase(), 'other'), (e) => e instanceof SecretError && /^409/.test(e.message))

  for (const ref of [sec.secretId, sec.name, name]) {
    const info = await Secret.getInfo(ref)
    assert.deepEqual(info, sec, `getInfo(${ref})`)
    assert.equal(await Secret.exists(ref), true, `exists(${ref})`)
  }
  const nope = `nope-${tag}`
  assert.equal(await Secret.exists(nope), false)
  await assert.rejects(Secret.getInfo(nope), SecretNotFoundError)
  await assert.rejects(Secret.update(nope, 'x'), SecretNotFoundError)
  assert.equal(await Secret.exists(nope), false, 'an update of a missing secret made one')

  const v2 = await Secret.update(sec.secretId, `${value}-2`)
  assert.equal(v2.secretId, sec.secretId)
  assert.equal(v2.version, 2)
  assert.deepEqual(v2.metadata, { suite: 'e2b' }, 'an update without metadata keeps it')
  assert.ok(v2.updatedAt >= sec.updatedAt)
  assert.equal((await Secret.getInfo(sec.name)).version, 2)

  // Pages two at a time hold every secret once, in name order.
  const mine = [sec.name]
  for (const i of [1, 2]) mine.push((await newSecret(`${name}-${i}`, value)).name)
  const pager = Secret.list({ limit: 2 })
  const seen = []
  let pages = 0
  while (pager.hasNext) {
    const page = await pager.nextItems()
    pages++
    assert.ok(page.length <= 2, `a page of ${page.length}`)
    seen.push(...page.map((s) => s.name))
  }
  assert.ok(pages >= 2, `${pages} pages`)
  for (const n of mine) assert.equal(seen.filter((s) => s === n).length, 1, `${n} in ${seen}`)
  assert.deepEqual(seen, [...seen].sort())

  // No answer carries a value: each route's, as it was sent.
  const answers = [
    await raw('POST', '/secrets', { name: `${name}-raw`, value: `${value}-raw` }),
    await raw('POST', `/secrets/${name}-raw`, { value: `${value}-raw-2` }),
    await raw('GET', `/secrets/${sec.secretId}`),
    await raw('GET', `/secrets/${sec.name}`),
    await raw('GET', '/secrets?limit=1'),
    await raw('GET', '/secrets'),
    await raw('DELETE', `/secrets/${name}-raw`),
  ]
  assert.deepEqual(answers.map((a) => a.status), [201, 200, 200, 200, 200, 200, 204], answers.map((a) => a.text).join('\n'))
  for (const a of answers) assert.ok(!a.text.includes(value) && !a.headers.includes(value), `an answer with the value: ${a.text}`)

  assert.equal(await Secret.destroy(sec.secretId), true)
  assert.equal(await Secret.destroy(sec.name), false)
  assert.equal(await Secret.exists(sec.secretId), false)
  for (const n of mine.slice(1)) assert.equal(await Secret.destroy(n), true)
})

const secretsHost = process.env.WARREN_E2B_SECRETS_HOST

test('secrets at egress: a rule puts a secret in a header the sandbox never sees; a destroyed one is refused', {
  skip: !secretsHost && 'WARREN_E2B_SECRETS_HOST is empty: the test internet serves no HTTPS /headers to send a secret to',
}, async () => {
  const tag = randomBytes(4).toString('hex')
  const value = `key-${randomBytes(16).toString('hex')}`
  const sec = await newSecret(`e2b-egress-${tag}`, value)
  const rules = { [secretsHost]: [{ transform: { headers: { 'X-Api-Key': Secret.fill(sec.name) } } }] }
  // seen is the hex SHA-256 of each header the test internet got from
  // sbx, which sends an X-Api-Key of its own. Where no rule applies, the
  // sandbox's trust of the test internet's own certificate is not under
  // test (-k).
  const sent = 'from-the-sandbox'
  const seen = async (sbx, insecure = false) => {
    const r = await sbx.commands.run(`curl -sS --max-time 20 ${insecure ? '-k ' : ''}-H 'X-Api-Key: ${sent}' https://${secretsHost}/headers`)
    assert.ok(!r.stdout.includes(value), 'the sandbox saw the value')
    return JSON.parse(r.stdout)
  }

  const sbx = await newSandbox({ network: { rules } })
  assert.equal((await seen(sbx))['x-api-key'], sha256(value), 'the rule\'s header replaces the sandbox\'s')
  const info = await raw('GET', `/sandboxes/${sbx.sandboxId}`)
  assert.equal(info.status, 200)
  assert.ok(!info.text.includes(value), `the sandbox's info has the value: ${info.text}`)
  assert.ok(!(await sbx.commands.run('env')).stdout.includes(value))

  // The network update sets rules on a running sandbox, and the next one,
  // without them, clears them.
  const plain = await newSandbox()
  assert.equal((await seen(plain, true))['x-api-key'], sha256(sent))
  await plain.updateNetwork({ rules })
  assert.equal((await seen(plain))['x-api-key'], sha256(value))
  await plain.updateNetwork({})
  assert.equal((await seen(plain, true))['x-api-key'], sha256(sent))

  // Destroyed, the secret can be named by no new sandbox.
  assert.equal(await Secret.destroy(sec.secretId), true)
  await assert.rejects(
    Sandbox.create('base', { timeoutMs: 60_000, network: { rules } }).then((s) => { created.push(s); return s }),
    (e) => /^400/.test(e.message) && e.message.includes(sec.name),
  )
})
