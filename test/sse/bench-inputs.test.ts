import { describe, expect, it } from 'vitest'
import { anthropicStream, chunkFixed, chunkPerFrame, openaiChatStream } from '../../bench/inputs.js'
import { createFrameReader } from '../../src/index.js'
import { chunkStream, readAll } from '../support/sources.js'

describe('benchmark inputs', () => {
  it('are deterministic for a seed', () => {
    expect(openaiChatStream(50, 7)).toEqual(openaiChatStream(50, 7))
    expect(openaiChatStream(50, 7)).not.toEqual(openaiChatStream(50, 8))
  })

  it('read back as the same frames under both benchmark chunkings', async () => {
    for (const bytes of [openaiChatStream(200), anthropicStream(200)]) {
      const perFrame = chunkPerFrame(bytes)
      const fixed = chunkFixed(bytes, 16 * 1024)
      const a = await readAll(createFrameReader(chunkStream(perFrame)))
      const b = await readAll(createFrameReader(chunkStream(fixed)))
      expect(a).toHaveLength(perFrame.length)
      expect(a.map((f) => f.data)).toEqual(b.map((f) => f.data))
      expect(a.every((f) => f.terminated && f.data !== undefined)).toBe(true)
    }
  })
})
