import { describe, expect, it } from 'vitest'
import type { FrameVerdict } from '../../src/advanced.js'
import { checkRestart, type RestartCheck } from '../../src/retry/decisions/continuation-restart.js'

/**
 * The rule that tells a continuation from a restart (the relay's side is tested through the
 * official SDKs in continuation-edges and the property in continuation.prop): hold while its
 * text repeats the start of the received text, release at the first character that differs,
 * refuse once it repeated all of it or ended while repeating it.
 */

const text = (delta: string): FrameVerdict => ({ kind: 'text', text: delta })
const received = 'The quick '

describe('checkRestart', () => {
  it.each<[string, number, FrameVerdict | 'end', RestartCheck]>([
    ['a first character that differs: release', 0, text(' brown'), { kind: 'release' }],
    ['a prefix of the received text: hold', 0, text('The'), { kind: 'hold', matched: 3 }],
    ['more of it: hold on', 3, text(' qu'), { kind: 'hold', matched: 6 }],
    ['then a character that differs: release', 6, text('een'), { kind: 'release' }],
    ['all of it: a restart', 6, text('ick '), { kind: 'restarted' }],
    [
      'all of it and more in one delta: a restart',
      0,
      text('The quick brown'),
      { kind: 'restarted' },
    ],
    ['an empty delta decides nothing', 3, text(''), { kind: 'hold', matched: 3 }],
    [
      'meta, keep-alive, reasoning decide nothing',
      3,
      { kind: 'meta' },
      { kind: 'hold', matched: 3 },
    ],
    ['its end while repeating: absent', 3, 'end', { kind: 'restarted' }],
    [
      'its final event while repeating: absent',
      3,
      { kind: 'terminal', terminal: { reason: 'stop', raw: 'end_turn' } },
      { kind: 'restarted' },
    ],
    ['a tool call while repeating: absent', 3, { kind: 'tool', text: 'f' }, { kind: 'restarted' }],
    ['its end before any text: release (nothing repeated)', 0, 'end', { kind: 'release' }],
    [
      'its final event before any text: release',
      0,
      { kind: 'terminal', terminal: { reason: 'stop', raw: 'end_turn' } },
      { kind: 'release' },
    ],
    [
      'a last chunk that repeats and ends (Gemini): absent',
      0,
      { kind: 'text', text: 'The', terminal: { reason: 'stop', raw: 'STOP' } },
      { kind: 'restarted' },
    ],
  ])('%s', (_name, matched, seen, expected) => {
    expect(checkRestart(received, matched, seen)).toEqual(expected)
  })

  it('whitespace counts: a continuation of "Hello " that writes " world" is released', () => {
    expect(checkRestart('Hello ', 0, text(' world'))).toEqual({ kind: 'release' })
    expect(checkRestart('Hello ', 0, text('Hello world'))).toEqual({ kind: 'restarted' })
  })

  it('nothing received: nothing to repeat', () => {
    expect(checkRestart('', 0, text('anything'))).toEqual({ kind: 'release' })
  })
})
