/**
 * A CLI script in miniature: one `relay()` into a `webSink` over a one-key pool, under
 * top-level await, with nothing else holding the event loop. It must print the whole answer
 * and exit 0 right after.
 */
import { createMemoryKeyPool, openaiChat, relay, webSink } from '../../../src/index.js'
import { printAnswer, printSettled } from './answer.js'

const url = process.argv[2] as string
const { sink, response } = webSink()
const relayed = relay({
  sink,
  pool: createMemoryKeyPool([{ id: 'only', secret: 'sk-only' }]),
  adapter: openaiChat,
  attempt: ({ key, signal }) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
      signal,
    }),
})
await printAnswer(await response)
const outcome = await relayed
process.stdout.write(`outcome ${outcome.kind}\n`)
printSettled()
