// Resolves the names under WARREN_E2B_DOMAIN to WARREN_E2B_ADDRESS, as the
// wildcard DNS record of a real deployment would (loaded with node's
// --import by e2e/e2b_test.go). The SDK itself is not touched.
import dns from 'node:dns'

const domain = process.env.WARREN_E2B_DOMAIN
const address = process.env.WARREN_E2B_ADDRESS
const lookup = dns.lookup

dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') {
    cb = opts
    opts = {}
  }
  if (domain && (host === domain || host.endsWith('.' + domain))) {
    if (opts && opts.all) return process.nextTick(cb, null, [{ address, family: 4 }])
    return process.nextTick(cb, null, address, 4)
  }
  return lookup.call(this, host, opts, cb)
}
