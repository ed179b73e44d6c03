/**
 * `Stop`, the abort the library makes for itself instead of an `AbortController`, against a
 * real `AbortController` as the model: any sequence of listener adds and removes, aborts
 * and reads of its real signal calls the same listeners in the same order, and leaves the
 * same `aborted` and `reason`; the real signal made from it, whenever made, agrees with it.
 */
import { getEventListeners } from 'node:events'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { followSignals, followStops } from '../src/follow-signals.js'
import { Stop } from '../src/stop.js'
import { runs } from './support/runs.js'

type Op =
  | { readonly op: 'add'; readonly listener: number }
  | { readonly op: 'remove'; readonly listener: number }
  | { readonly op: 'abort'; readonly reason: 'none' | 'given' }
  | { readonly op: 'real' }

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('add' as const), listener: fc.nat(3) }),
  fc.record({ op: fc.constant('remove' as const), listener: fc.nat(3) }),
  fc.record({ op: fc.constant('abort' as const), reason: fc.constantFrom('none', 'given') }),
  fc.record({ op: fc.constant('real' as const) }),
)

describe('Stop', () => {
  it('property: a Stop calls the listeners an AbortController would, in the same order, and ends with the same aborted and reason', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 30 }), (ops) => {
        const model = new AbortController()
        const stop = new Stop()
        const modelCalls: number[] = []
        const stopCalls: number[] = []
        const modelListeners = [0, 1, 2, 3].map((n) => () => modelCalls.push(n))
        const stopListeners = [0, 1, 2, 3].map((n) => () => stopCalls.push(n))
        const given = new Error('given')
        let real: AbortSignal | undefined
        let abortedWhenReal = false
        let realCalls = 0
        for (const step of ops) {
          if (step.op === 'add') {
            model.signal.addEventListener('abort', modelListeners[step.listener] as () => void, {
              once: true,
            })
            stop.addEventListener('abort', stopListeners[step.listener] as () => void)
          } else if (step.op === 'remove') {
            model.signal.removeEventListener('abort', modelListeners[step.listener] as () => void)
            stop.removeEventListener('abort', stopListeners[step.listener] as () => void)
          } else if (step.op === 'abort') {
            model.abort(step.reason === 'given' ? given : undefined)
            stop.abort(step.reason === 'given' ? given : undefined)
          } else if (real === undefined) {
            abortedWhenReal = stop.aborted
            real = stop.real
            real.addEventListener('abort', () => realCalls++)
          }
          expect(stopCalls).toEqual(modelCalls)
          expect(stop.aborted).toBe(model.signal.aborted)
        }
        if (model.signal.reason === given) expect(stop.reason).toBe(given)
        else if (model.signal.aborted) {
          expect(stop.reason).toBeInstanceOf(DOMException)
          expect((stop.reason as DOMException).name).toBe('AbortError')
        } else expect(stop.reason).toBeUndefined()
        // The real signal, made before or after the abort, agrees; it never aborts twice.
        const late = stop.real
        expect(late).toBeInstanceOf(AbortSignal)
        expect(late.aborted).toBe(stop.aborted)
        if (stop.aborted) expect(late.reason).toBe(stop.reason)
        if (real !== undefined) {
          expect(real).toBe(late)
          // Made after the abort, it was born aborted: no abort event then.
          expect(realCalls).toBe(stop.aborted && !abortedWhenReal ? 1 : 0)
        }
      }),
      { numRuns: runs(300) },
    )
  })

  it('a listener that throws does not stop the others; its error surfaces as uncaught', async () => {
    const stop = new Stop()
    const called: string[] = []
    const boom = new Error('listener failed')
    stop.addEventListener('abort', () => {
      called.push('first')
      throw boom
    })
    stop.addEventListener('abort', () => called.push('second'))
    const uncaught = new Promise<unknown>((resolve) => {
      const listeners = process.listeners('uncaughtException')
      process.removeAllListeners('uncaughtException')
      process.once('uncaughtException', (error) => {
        for (const listener of listeners) process.on('uncaughtException', listener)
        resolve(error)
      })
    })
    stop.abort()
    expect(called).toEqual(['first', 'second'])
    expect(await uncaught).toBe(boom)
  })
})

describe('followStops and followSignals', () => {
  it('property: the follower aborts with the reason of the first of its signals to abort, and release leaves no listener behind', () => {
    fc.assert(
      fc.property(
        fc.array(fc.boolean(), { minLength: 1, maxLength: 4 }),
        fc.array(fc.nat(3), { maxLength: 4 }),
        fc.boolean(),
        (realOnes, order, light) => {
          const sources = realOnes.map((real) => (real ? new AbortController() : new Stop()))
          const signals = sources.map((source) => source.signal)
          const follower = (light ? followStops : followSignals)([...signals, signals[0]])
          const aborted = order.map((index) => index % sources.length)
          const first = aborted[0]
          for (const index of aborted) {
            ;(sources[index] as { abort(reason?: unknown): void }).abort(
              new Error(`source ${index}`),
            )
          }
          const target = follower.controller.signal
          expect(target.aborted).toBe(first !== undefined)
          if (first !== undefined) {
            expect((target.reason as Error).message).toBe(`source ${first}`)
          }
          follower.release()
          for (const source of sources) {
            if (source instanceof AbortController) {
              expect(getEventListeners(source.signal, 'abort')).toHaveLength(0)
            }
          }
        },
      ),
      { numRuns: runs(300) },
    )
  })

  it('release removes the follower from a long-lived host signal: 10,000 requests leave it no listener', () => {
    const host = new AbortController()
    for (let i = 0; i < 10_000; i++) followStops([host.signal]).release()
    for (let i = 0; i < 10_000; i++) followSignals([host.signal]).release()
    expect(getEventListeners(host.signal, 'abort')).toHaveLength(0)
  })
})
