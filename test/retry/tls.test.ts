import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { classifyAttemptFailure, classifyConnectionError } from '../../src/advanced.js'

/** Certificates made for this run by `openssl` (EC keys: fast to generate). */
let dir: string

function openssl(...args: string[]): void {
  execFileSync('/usr/bin/openssl', args, { cwd: dir, stdio: 'ignore' })
}

/** A self-signed certificate for 127.0.0.1, valid for a day or (`-days -1`) already expired. */
function selfSigned(name: string, days: string): { key: Buffer; cert: Buffer } {
  openssl(
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    `${name}.key`,
    '-subj',
    '/CN=127.0.0.1',
    '-out',
    `${name}.csr`,
  )
  // `x509 -req` signs with the request's own key and accepts a negative validity: notAfter
  // lands a day before notBefore, so the certificate is expired from the start.
  openssl(
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-signkey',
    `${name}.key`,
    '-days',
    days,
    '-extfile',
    'san.cnf',
    '-out',
    `${name}.crt`,
  )
  return {
    key: readFileSync(join(dir, `${name}.key`)),
    cert: readFileSync(join(dir, `${name}.crt`)),
  }
}

async function serve(tls: { key: Buffer; cert: Buffer }): Promise<{ server: Server; url: string }> {
  const server = createServer(tls, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {}\n\n')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { server, url: `https://127.0.0.1:${port}/v1/chat/completions` }
}

async function fetchError(url: string): Promise<unknown> {
  try {
    const response = await fetch(url, { method: 'POST', body: '{}' })
    await response.body?.cancel()
  } catch (error) {
    return error
  }
  throw new Error('the request succeeded: the certificate was not checked')
}

const servers: Server[] = []
const urls: Record<'selfSigned' | 'expired', string> = { selfSigned: '', expired: '' }

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stream-boundary-tls-'))
  execFileSync('/bin/sh', ['-c', 'printf "subjectAltName=IP:127.0.0.1\\n" > san.cnf'], { cwd: dir })
  for (const [name, days] of [
    ['selfSigned', '1'],
    ['expired', '-1'],
  ] as const) {
    const { server, url } = await serve(selfSigned(name, days))
    servers.push(server)
    urls[name] = url
  }
})

afterAll(async () => {
  await Promise.all(
    servers.map((server) => new Promise((resolve) => server.close(() => resolve(undefined)))),
  )
  rmSync(dir, { recursive: true, force: true })
})

describe('certificate failures of a real HTTPS upstream (node:https on 127.0.0.1, fetch)', () => {
  it('a self-signed certificate is not retried, and the message says it is self-signed', async () => {
    const error = await fetchError(urls.selfSigned)
    const verdict = classifyConnectionError(error)
    expect(verdict).toMatchObject({ retryable: false, code: 'DEPTH_ZERO_SELF_SIGNED_CERT' })
    expect(verdict.message).toContain("the upstream's certificate is self-signed")
    expect(classifyAttemptFailure({ kind: 'connection', error })).toMatchObject({
      retryable: false,
      status: 502,
      error: { type: 'upstream_error', code: 'DEPTH_ZERO_SELF_SIGNED_CERT' },
    })
  })

  it('an expired certificate is not retried, and the message says it has expired', async () => {
    const error = await fetchError(urls.expired)
    const verdict = classifyConnectionError(error)
    expect(verdict).toMatchObject({ retryable: false, code: 'CERT_HAS_EXPIRED' })
    expect(verdict.message).toContain("the upstream's certificate has expired")
    expect(classifyAttemptFailure({ kind: 'connection', error }).retryable).toBe(false)
  })
})
