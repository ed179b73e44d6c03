/**
 * The official `openai` SDK with `createResilientFetch()`: the embedded upstream's first
 * attempt answers `200 text/event-stream` and ends without a single token; the wrapped fetch
 * retries inside the pre-output window, so the SDK sees one clean stream.
 *
 * Run it: node --import tsx examples/wrap-fetch.ts
 */

import { pathToFileURL } from 'node:url'
import OpenAI from 'openai'
import { createResilientFetch, type RelayOutcome } from 'stream-boundary'
import { createFaultyUpstream } from 'stream-boundary/testing'

export async function main(): Promise<void> {
  const upstream = createFaultyUpstream({ scenarios: { flaky: ['empty', 'ok'] } })
  const url = await upstream.listen()
  let reported!: (outcome: RelayOutcome) => void
  const outcome = new Promise<RelayOutcome>((resolve) => {
    reported = resolve
  })
  try {
    const client = new OpenAI({
      apiKey: 'sk-demo',
      baseURL: `${url}/v1`,
      fetch: createResilientFetch({ onOutcome: reported }),
      defaultHeaders: { 'x-fault-scenario': 'flaky' },
    })
    const stream = await client.chat.completions.create({
      model: 'demo-model',
      messages: [{ role: 'user', content: 'Say the pangram.' }],
      stream: true,
    })
    let text = ''
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ''
    console.log(`text: ${text}`)
    // The relay reports its outcome just after the stream's last byte.
    for (const attempt of (await outcome).attempts)
      console.log(
        `attempt ${attempt.attemptNumber} (key ${attempt.keyId ?? 'caller'}): ${attempt.result}`,
      )
    console.log(`upstream saw: ${upstream.requests.map((request) => request.fault).join(', ')}`)
  } finally {
    await upstream.close()
  }
}

const entry = process.argv[1]
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  await main()
  process.exit(0)
}
