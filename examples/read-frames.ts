/**
 * Reads an SSE body frame by frame: exact bytes for relaying, parsed fields for deciding.
 * Run: node --import tsx examples/read-frames.ts
 */
import { createFrameReader } from 'stream-boundary'

const upstream = new Response(
  [
    ': keep-alive\n\n',
    'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n',
    'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n',
    'data: [DONE]\n\n',
  ].join(''),
)

const reader = createFrameReader(upstream.body as ReadableStream<Uint8Array>, {
  maxFrameBytes: 256 * 1024,
})
for (let frame = await reader.next(); frame !== null; frame = await reader.next()) {
  const kind = frame.data === undefined ? `comment ${JSON.stringify(frame.comments)}` : frame.data
  console.log(`${frame.raw.length} bytes, terminated=${frame.terminated}: ${kind}`)
}
