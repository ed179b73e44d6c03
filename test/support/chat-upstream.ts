import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/** One scripted upstream answer: a status and body, or SSE frames then an end. */
export interface ChatScript {
  readonly status?: number
  /** A whole JSON body (non-streaming error answers). */
  readonly json?: unknown
  /** SSE frames, written one by one `gapMs` apart. */
  readonly frames?: readonly string[]
  readonly gapMs?: number
  /** `eof` ends the body cleanly; `destroy` cuts the socket; `hold` writes nothing more. */
  readonly end?: 'eof' | 'destroy' | 'hold'
}

/** An OpenAI Chat chunk frame. */
export function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  const choice = { index: 0, delta, finish_reason: finish }
  return `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', model: 'gpt-test', choices: [choice] })}\n\n`
}

export const done = 'data: [DONE]\n\n'

/**
 * An OpenAI Chat upstream on 127.0.0.1 following a script, one answer per request (the last
 * repeats). `closed` counts requests whose connection closed before their answer ended.
 */
export async function startChatUpstream(scripts: readonly ChatScript[]) {
  let requests = 0
  const closedAt: number[] = []
  const server = createServer((req, res) => {
    const script = scripts[Math.min(requests, scripts.length - 1)] as ChatScript
    requests++
    req.resume()
    res.on('close', () => {
      if (!res.writableFinished) closedAt.push(performance.now())
    })
    void answer(script, res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return requests
    },
    closedAt,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function answer(script: ChatScript, res: ServerResponse): Promise<void> {
  if (script.json !== undefined) {
    res.writeHead(script.status ?? 500, {
      'content-type': 'application/json',
      'x-request-id': 'req_upstream_1',
    })
    res.end(JSON.stringify(script.json))
    return
  }
  res.writeHead(script.status ?? 200, { 'content-type': 'text/event-stream' })
  res.flushHeaders()
  for (const frame of script.frames ?? []) {
    if (res.destroyed) return
    if (script.gapMs !== undefined) await new Promise((r) => setTimeout(r, script.gapMs))
    res.write(frame)
  }
  if (script.end === 'destroy') {
    // Let the frames reach the peer first: the cut comes after them, as a dropped tunnel's would.
    await new Promise((r) => setTimeout(r, 30))
    res.destroy()
  } else if (script.end !== 'hold') res.end()
}
