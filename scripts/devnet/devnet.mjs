// Commonroom devnet: an in-memory PLC directory + the Bluesky reference PDS (@atproto/pds) in
// one Node (>= 22) process, listening on loopback only.
//
// Do not run this file from the repository: its packages live in the setup cache. Use
// scripts/devnet/run, or daemon/devnet.py, which copies it into <cache>/app/run/ and starts it
// with the cache's Node.
//
// Environment (all optional):
//   PLC_PORT=2582  PDS_PORT=2583   ports (0 is not supported: the PDS must know its own URL)
//   DEVNET_DIR=<dir>               data directory (default: a new temporary one); use a fresh
//                                  one each start, since the PLC database lives in memory
//   DEVNET_BIND_HOST=127.0.0.1     address both servers listen on
//   DEVNET_PLC_URL=<url>           start no PLC directory: the PDS uses this one (a second PDS
//                                  on another devnet's network; PLC_PORT is then unused)
//   DEVNET_HOSTS="a.example=127.0.0.1,b.example=127.0.0.1"
//                                  resolve these names in this process only (an /etc/hosts for
//                                  the PDS): lets the PDS fetch https OAuth client metadata from
//                                  a local server; pair with NODE_EXTRA_CA_CERTS=<test CA>
//   DEVNET_LEXICON_AUTHORITY=<handle>
//                                  create this account at start and make its DID the authority
//                                  of every NSID, so include:<nsid> permission sets resolve
//                                  offline (put them at com.atproto.lexicon.schema/<nsid>)
//   DEVNET_EXIT_ON_STDIN_EOF=1     shut down when stdin closes (the parent died)
//   PDS_*                          any variable @atproto/pds reads overrides the defaults below
//                                  (PDS_ADMIN_PASSWORD default: random, reported when ready)
//   LOG_ENABLED=true LOG_DESTINATION=<file>   the PDS's own (pino) logs
//
// When both servers are up it prints ONE JSON line on stdout:
//   {"plcUrl", "pdsUrl", "dataDir", "adminPassword", "lexiconAuthority"?: {handle, did, password},
//    "startMs", "rssMB"}
// SIGTERM / SIGINT: stop both servers and exit 0.
import crypto from 'node:crypto'
import dns from 'node:dns'
import fs from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import * as plc from '@did-plc/server'
import { PDS, envToCfg, envToSecrets, readEnv } from '@atproto/pds'
import { Secp256k1Keypair } from '@atproto/crypto'
import * as ui8 from 'uint8arrays'

const t0 = performance.now()
const env = process.env
const plcPort = Number(env.PLC_PORT ?? 2582)
const pdsPort = Number(env.PDS_PORT ?? 2583)
const bindHost = env.DEVNET_BIND_HOST || '127.0.0.1'
const dir = env.DEVNET_DIR || (await fs.mkdtemp(path.join(os.tmpdir(), 'commonroom-devnet-')))
await fs.mkdir(dir, { recursive: true })
const randomSecret = () => crypto.randomBytes(18).toString('base64url')

// Both servers call app.listen(port) with no host, i.e. every interface. Keep them on loopback:
// a host-less listen(port, ...) gets bindHost.
const origListen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, bindHost)
  return origListen.apply(this, args)
}

// Name -> address overrides, for this process only.
if (env.DEVNET_HOSTS) {
  const map = new Map()
  for (const item of env.DEVNET_HOSTS.split(',')) {
    if (!item.trim()) continue
    const [name, ip] = item.split('=').map((s) => s.trim())
    if (!name || !net.isIP(ip)) throw new Error(`DEVNET_HOSTS: expected name=ip, got ${JSON.stringify(item)}`)
    map.set(name.toLowerCase(), ip)
  }
  const origLookup = dns.lookup
  dns.lookup = function (hostname, options, callback) {
    if (typeof options === 'function') [callback, options] = [options, {}]
    const ip = map.get(String(hostname).toLowerCase())
    if (!ip) return origLookup.call(this, hostname, options, callback)
    const family = net.isIP(ip)
    if (options?.all) return process.nextTick(callback, null, [{ address: ip, family }])
    return process.nextTick(callback, null, ip, family)
  }
}

// 1. PLC directory on an in-memory database (like @atproto/dev-env's TestPlc), or, with
//    DEVNET_PLC_URL, another devnet's: a second PDS on the same network (moves between PDSes)
let plcServer = null
let plcUrl = env.DEVNET_PLC_URL
if (!plcUrl) {
  plcServer = plc.PlcServer.create({ db: plc.Database.mock(), port: plcPort })
  await plcServer.start()
  plcUrl = `http://localhost:${plcPort}`
}

// 2. PDS configured like @atproto/dev-env's TestPds
const rotationKey = await Secp256k1Keypair.create({ exportable: true })
const fromEnv = Object.fromEntries(Object.entries(readEnv()).filter(([, v]) => v !== undefined))
const pdsEnv = {
  devMode: true,
  port: pdsPort,
  hostname: 'localhost', // public URL and OAuth issuer http://localhost:<port>; OAuth needs "localhost"
  dataDirectory: path.join(dir, 'pds'),
  blobstoreDiskLocation: path.join(dir, 'blobs'),
  didPlcUrl: plcUrl,
  jwtSecret: randomSecret(),
  adminPassword: randomSecret(),
  plcRotationKeyK256PrivateKeyHex: ui8.toString(await rotationKey.export(), 'hex'),
  inviteRequired: false,
  disableSsrfProtection: true, // the PDS must reach loopback (client metadata, PLC)
  serviceHandleDomains: ['.test'],
  serviceName: 'Commonroom devnet PDS',
  ...fromEnv,
}
await fs.mkdir(pdsEnv.dataDirectory, { recursive: true })
const pds = await PDS.create(envToCfg(pdsEnv), envToSecrets(pdsEnv))
await pds.start()
const pdsUrl = `http://localhost:${pdsEnv.port}`

// 3. Optional lexicon authority account
let lexiconAuthority
if (env.DEVNET_LEXICON_AUTHORITY) {
  const handle = env.DEVNET_LEXICON_AUTHORITY
  const password = randomSecret()
  const res = await fetch(`${pdsUrl}/xrpc/com.atproto.server.createAccount`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ handle, password, email: `${handle}@example.com` }),
  })
  if (!res.ok) throw new Error(`createAccount ${handle}: ${res.status} ${await res.text()}`)
  const { did } = await res.json()
  pds.ctx.cfg.lexicon.didAuthority = did // read by the PDS's lexicon resolver at call time
  lexiconAuthority = { handle, did, password }
}

let stopping = false
async function stop(reason) {
  if (stopping) return
  stopping = true
  setTimeout(() => {
    console.error(`devnet: shutdown (${reason}) still running after 10 s; exiting`)
    process.exit(1)
  }, 10_000).unref()
  try {
    await pds.destroy()
    if (plcServer) await plcServer.destroy()
  } catch (err) {
    console.error('devnet: error during shutdown:', err)
    process.exit(1)
  }
  process.exit(0)
}
process.on('SIGINT', () => stop('SIGINT'))
process.on('SIGTERM', () => stop('SIGTERM'))
if (env.DEVNET_EXIT_ON_STDIN_EOF === '1') {
  process.stdin.on('end', () => stop('stdin closed'))
  process.stdin.on('error', () => stop('stdin error'))
  process.stdin.resume()
}

process.stdout.write(
  JSON.stringify({
    plcUrl,
    pdsUrl,
    dataDir: dir,
    adminPassword: pdsEnv.adminPassword,
    lexiconAuthority,
    startMs: Math.round(performance.now() - t0),
    rssMB: Math.round(process.memoryUsage().rss / 1e6),
  }) + '\n',
)
