/**
 * Seeded, deterministic inputs shared by the benchmarks and the tests that check them.
 */

const encoder = new TextEncoder()

/** A small deterministic PRNG (mulberry32), so every run relays the same bytes. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const words = [
  'the',
  'stream',
  'boundary',
  ' ',
  'retry',
  'window',
  'é',
  '中文',
  'token',
  '\\n',
  'model',
  'ok',
]

function pickWords(random: () => number, count: number): string {
  let out = ''
  for (let i = 0; i < count; i++) out += words[Math.floor(random() * words.length)]
  return out
}

/** An OpenAI Chat Completions stream of `frames` content chunks, then a finish chunk and `[DONE]`. */
export function openaiChatStream(frames: number, seed = 1): Uint8Array {
  const random = seededRandom(seed)
  const parts: string[] = []
  const head =
    '{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":'
  parts.push(
    `data: ${head}{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}\n\n`,
  )
  for (let i = 0; i < frames; i++) {
    const content = JSON.stringify(pickWords(random, 1 + Math.floor(random() * 4)))
    parts.push(`data: ${head}{"content":${content}},"logprobs":null,"finish_reason":null}]}\n\n`)
  }
  parts.push(`data: ${head}{},"logprobs":null,"finish_reason":"stop"}]}\n\n`)
  parts.push('data: [DONE]\n\n')
  return encoder.encode(parts.join(''))
}

/**
 * A one-frame OpenAI Chat answer: one chunk carrying the content and `finish_reason: "stop"`
 * (output and terminal at once), and no `[DONE]`; what a request costs with the least stream.
 */
export function openaiChatOneFrame(): Uint8Array {
  return encoder.encode(
    'data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":"stop"}]}\n\n',
  )
}

/** An Anthropic Messages stream of `frames` text deltas between its start and stop events. */
export function anthropicStream(frames: number, seed = 1): Uint8Array {
  const random = seededRandom(seed)
  const parts: string[] = [
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}\n\n',
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  ]
  for (let i = 0; i < frames; i++) {
    if (i % 50 === 25) parts.push('event: ping\ndata: {"type": "ping"}\n\n')
    const text = JSON.stringify(pickWords(random, 1 + Math.floor(random() * 4)))
    parts.push(
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${text}}}\n\n`,
    )
  }
  parts.push('event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n')
  parts.push(
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}\n\n',
  )
  parts.push('event: message_stop\ndata: {"type":"message_stop"}\n\n')
  return encoder.encode(parts.join(''))
}

/** Splits a stream into one chunk per SSE frame (how LLM upstreams deliver). */
export function chunkPerFrame(bytes: Uint8Array): Uint8Array[] {
  const chunks: Uint8Array[] = []
  let start = 0
  for (let i = 1; i < bytes.length; i++) {
    if (bytes[i] === 10 && bytes[i - 1] === 10) {
      chunks.push(bytes.slice(start, i + 1))
      start = i + 1
    }
  }
  if (start < bytes.length) chunks.push(bytes.slice(start))
  return chunks
}

/** Splits a stream into fixed-size chunks (a buffered proxy, a fast local upstream). */
export function chunkFixed(bytes: Uint8Array, size: number): Uint8Array[] {
  const chunks: Uint8Array[] = []
  for (let i = 0; i < bytes.length; i += size) chunks.push(bytes.slice(i, i + size))
  return chunks
}

/** A web stream that hands out `chunks` one per pull, as an upstream body would. */
export function streamOf(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  let index = 0
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const chunk = chunks[index++]
        if (chunk === undefined) controller.close()
        else controller.enqueue(chunk)
      },
    },
    { highWaterMark: 0 },
  )
}
