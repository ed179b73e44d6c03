import {
  type AttemptContext,
  type AttemptFunction,
  type AttemptRequest,
  createMemoryKeyPool,
  createRelay,
  fetchAttempt,
  openaiChat,
  relay,
  type UpstreamRequest,
  webSink,
} from 'stream-boundary'
import { describe, expectTypeOf, it } from 'vitest'

/**
 * `context.request` follows whether `relay()` was given a `request`: defined when it was (no
 * TS18048 "possibly undefined" to check away), possibly `undefined` when it was not.
 */

const pool = createMemoryKeyPool([{ id: 'a', secret: 'sk-a' }])
const request: UpstreamRequest = { url: 'https://api.test/v1/chat/completions', body: {} }

describe('the attempt context follows the request given to relay()', () => {
  it('with a request and a pool: context.request is the request', () => {
    void relay({
      sink: webSink().sink,
      pool,
      adapter: openaiChat,
      request,
      attempt: async (context) => {
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest>()
        expectTypeOf(context.key.secret).toBeString()
        return fetch(context.request.url ?? '', { body: JSON.stringify(context.request.body) })
      },
    })
  })

  it('with a request and no pool: context.request is the request, and there is no key', () => {
    void relay({
      sink: webSink().sink,
      adapter: openaiChat,
      request,
      attempt: async (context) => {
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest>()
        expectTypeOf(context.key).toEqualTypeOf<undefined>()
        return fetch(context.request.url ?? '')
      },
    })
  })

  it('without a request: context.request may be undefined, and must be checked', () => {
    void relay({
      sink: webSink().sink,
      pool,
      adapter: openaiChat,
      attempt: async (context) => {
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest | undefined>()
        // @ts-expect-error without a request given, it may be undefined
        void context.request.body
        return fetch('https://api.test')
      },
    })
  })

  it('a request that may be absent: the same as none', () => {
    const maybe = request as UpstreamRequest | undefined
    void relay({
      sink: webSink().sink,
      pool,
      adapter: openaiChat,
      ...(maybe === undefined ? {} : { request: maybe }),
      attempt: async (context) => {
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest | undefined>()
        return fetch('https://api.test')
      },
    })
  })

  it('the ready attempts and functions typed with the plain AttemptContext still fit', () => {
    const mine = async (context: AttemptContext) => fetch(context.request?.url ?? '')
    void relay({ sink: webSink().sink, pool, adapter: openaiChat, request, attempt: mine })
    void relay({
      sink: webSink().sink,
      pool,
      adapter: openaiChat,
      request,
      attempt: fetchAttempt(),
    })
    expectTypeOf<AttemptContext>().toEqualTypeOf<AttemptContext<AttemptRequest | undefined>>()
  })
})

describe('the attempt context of a relay built by createRelay() follows its requests', () => {
  it('an attempt function given per request with a request: context.request is the request', () => {
    const chat = createRelay({ pool, adapter: openaiChat })
    void chat({
      sink: webSink().sink,
      request,
      attempt: async (context) => {
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest>()
        expectTypeOf(context.key.secret).toBeString()
        return fetch(context.request.url ?? '')
      },
    })
  })

  it('a built attempt function typed to need context.request: every request must carry one', () => {
    const send: AttemptFunction<AttemptRequest> = async (context) =>
      fetch(context.request.url ?? '')
    const chat = createRelay({ pool, adapter: openaiChat, attempt: send })
    void chat({ sink: webSink().sink, request })
    // @ts-expect-error its attempt function reads context.request: a request is needed
    void chat({ sink: webSink().sink })
  })

  it('without a pool: no key, and an attempt given per request without a request may not read it', () => {
    const chat = createRelay({ adapter: openaiChat, attempt: fetchAttempt() })
    void chat({ sink: webSink().sink, request })
    void createRelay({ adapter: openaiChat })({
      sink: webSink().sink,
      attempt: async (context) => {
        expectTypeOf(context.key).toEqualTypeOf<undefined>()
        expectTypeOf(context.request).toEqualTypeOf<AttemptRequest | undefined>()
        return fetch('https://api.test')
      },
    })
  })
})
