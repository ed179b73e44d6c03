/**
 * `checkAdapter`: the conformance properties of a `StreamAdapter`, run with fast-check, each
 * named after the rule it checks; a failure names the property, the counterexample and how
 * to replay it.
 *
 * @module
 */

import type fc from 'fast-check'
import { isUserCodeError, UserCodeError } from '../errors.js'
import { adapterReturns, guardMethods } from '../guard-methods.js'
import { didYouMean, positiveInteger } from '../options.js'
import type { StreamAdapter } from '../protocols/types.js'
import {
  type Conformance,
  errorBodyHoldsMessage,
  type Inputs,
  inputsOf,
  inspectNeverThrows,
  quickOutputIsOutput,
  reasoningAsText,
  renderErrorIsError,
  renderFromMessageReads,
  renderStopCompletes,
  sameUnderChunking,
  statedEof,
  usageIsCounts,
} from './conformance.js'
import type { RunParameters, StreamSample } from './samples.js'

/**
 * Options of {@link checkAdapter}. An unknown key is a `TypeError` naming it.
 *
 * @group Conformance
 */
export interface CheckAdapterOptions {
  /** Streams of your protocol (include normal, partial, error and reasoning streams). */
  readonly streams: fc.Arbitrary<StreamSample>
  /**
   * Runs per property. The two properties over any bytes (`inspect` and `quickOutput`) spend
   * their first runs on the entries of `arbitraries.frameDataCorpus`, one frame each.
   * @default 100
   * @example
   * await checkAdapter(myAdapter, { streams, numRuns: 1_000 })
   */
  readonly numRuns?: number
  /**
   * fast-check's seed: the same seed draws the same inputs. A failure reports the one it ran.
   * @example
   * await checkAdapter(myAdapter, { streams, seed: 1_234_567 })
   */
  readonly seed?: number
  /**
   * fast-check's replay path of a failure, given with the `seed` and `property` it was reported
   * with: the property runs the reported counterexample first, so it fails on its first run
   * (and is not shrunk again). Paste what an {@link AdapterConformanceError} says.
   * @example
   * await checkAdapter(myAdapter, {
   *   streams,
   *   seed: 1_234_567,
   *   path: '41:2:0',
   *   property: 'inspect never throws, whatever the bytes',
   * })
   */
  readonly path?: string
  /**
   * Check only the property of this name (see {@link checkAdapter} for the list). A `path`
   * needs it: a replay path belongs to one property's run.
   * @example
   * await checkAdapter(myAdapter, { streams, property: 'renderStop after output writes well-formed frames that end the stream completed' })
   */
  readonly property?: string
}

/**
 * One conformance property failed. The message names it and shows the counterexample.
 *
 * @group Conformance
 */
export class AdapterConformanceError extends Error {
  override readonly name = 'AdapterConformanceError' as const
  /** The property that failed. */
  readonly property: string
  /** The adapter's name. */
  readonly adapter: string
  /** fast-check's seed and path: with {@link property}, the options that replay the failure. */
  readonly seed: number
  readonly path: string | undefined

  constructor(
    adapter: string,
    property: string,
    detail: string,
    seed: number,
    path: string | undefined,
    cause: unknown,
  ) {
    super(
      `Adapter "${adapter}" breaks the property "${property}".\n${detail}\n` +
        `Replay with { seed: ${seed}${path === undefined ? '' : `, path: '${path}'`}, property: '${property}' }.`,
      { cause },
    )
    this.property = property
    this.adapter = adapter
    this.seed = seed
    this.path = path
  }
}

/** The properties, in the order they run. */
const propertyNames = [
  'inspect never throws, whatever the bytes',
  'verdicts and the EOF class are the same under every chunking',
  'the EOF class is the one the sample states',
  'renderError writes one well-formed frame classified as error',
  'renderStop after output writes well-formed frames that end the stream completed',
  'quickOutput vouches only for output frames that neither end nor fail',
  'renderReasoningAsText writes visible text, never a keep-alive',
  'renderErrorBody writes a JSON object holding the sanitised message',
  'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object',
  'usage is counts of the known fields, in verdicts and from usageOf, whatever the input',
] as const

type PropertyName = (typeof propertyNames)[number]

/** What to change when a property fails and its rule names no plainer fix. */
const fixes: Record<PropertyName, string> = {
  'inspect never throws, whatever the bytes':
    'inspect must return a verdict for every frame, whatever its bytes: catch your own JSON.parse and field reads, and return a verdict for a frame you cannot read instead of throwing',
  'verdicts and the EOF class are the same under every chunking':
    'inspect must read only the frame it is given (its fields and raw bytes), never how the bytes arrived or state kept between calls',
  'the EOF class is the one the sample states':
    "inspect must mark your protocol's terminal event terminal, its error frames { kind: 'error' } and text, tools and reasoning as output, as your streams generator's samples state",
  'renderError writes one well-formed frame classified as error':
    "renderError must return one whole SSE frame that your inspect reads as { kind: 'error' } carrying sanitizeMessage(error.message) (from 'stream-boundary/advanced')",
  'renderStop after output writes well-formed frames that end the stream completed':
    "renderStop must write your protocol's finishing frames, the ones your inspect marks terminal, as whole SSE frames",
  'quickOutput vouches only for output frames that neither end nor fail':
    'quickOutput may return true only for a frame your inspect reads as output that neither ends nor fails the stream; when unsure, return false',
  'renderReasoningAsText writes visible text, never a keep-alive':
    "renderReasoningAsText must write the reasoning as your protocol's visible text frames, the ones your inspect reads as text",
  'renderErrorBody writes a JSON object holding the sanitised message':
    "renderErrorBody must return a JSON object, as text, holding sanitizeMessage(message) (from 'stream-boundary/advanced')",
  'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object':
    'renderFromMessage must return whole SSE frames your inspect reads, for any JSON object: check each field you read instead of assuming the shape',
  'usage is counts of the known fields, in verdicts and from usageOf, whatever the input':
    'usage must hold only non-negative integer counts of the known fields: leave a count out rather than pass on a value that is not one',
}

const checkAdapterDefaults = { numRuns: 100 } as const

/** Every option, so that an unknown one is refused (the compiler checks none is missing). */
const optionNames: Record<keyof CheckAdapterOptions, true> = {
  streams: true,
  numRuns: true,
  seed: true,
  path: true,
  property: true,
}

interface NormalizedOptions {
  readonly streams: fc.Arbitrary<StreamSample>
  readonly property: PropertyName | undefined
  readonly parameters: RunParameters
}

/** Options checked up front, with exact messages, and merged with their defaults. */
function normalize(options: CheckAdapterOptions): NormalizedOptions {
  if (typeof options !== 'object' || options === null)
    throw new TypeError('checkAdapter: options must be an object with streams')
  const known = Object.keys(optionNames)
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(optionNames, key))
      throw new TypeError(`checkAdapter: unknown option "${key}"${didYouMean(key, known)}`)
  }
  const { streams, seed, path, property } = options
  if (typeof (streams as { generate?: unknown } | undefined)?.generate !== 'function')
    throw new TypeError('checkAdapter: streams must be a fast-check arbitrary of stream samples')
  const numRuns = positiveInteger('numRuns', options.numRuns ?? checkAdapterDefaults.numRuns)
  if (seed !== undefined && !Number.isInteger(seed))
    throw new RangeError(`seed must be an integer, got ${String(seed)}`)
  if (property !== undefined && !(propertyNames as readonly string[]).includes(property)) {
    throw new TypeError(
      `checkAdapter: unknown property "${property}"${didYouMean(property, propertyNames)}`,
    )
  }
  if (path !== undefined) {
    if (typeof path !== 'string' || !/^\d+(:\d+)*$/.test(path))
      throw new TypeError(
        `checkAdapter: path must be a replay path such as "41:2:0", got ${JSON.stringify(path)}`,
      )
    if (seed === undefined || property === undefined)
      throw new TypeError('checkAdapter: path needs the seed and property it was reported with')
  }
  return {
    streams,
    property: property as PropertyName | undefined,
    parameters: {
      numRuns,
      ...(seed === undefined ? {} : { seed }),
      ...(path === undefined ? {} : { path }),
      // A replay starts at the counterexample, already shrunk.
      endOnFailure: path !== undefined,
    },
  }
}

/** Every property, by name: the compiler checks none is missing. */
function conformances(
  adapter: StreamAdapter,
  inputs: Inputs,
): Record<PropertyName, () => Conformance> {
  return {
    'inspect never throws, whatever the bytes': () => inspectNeverThrows(adapter, inputs),
    'verdicts and the EOF class are the same under every chunking': () =>
      sameUnderChunking(adapter, inputs),
    'the EOF class is the one the sample states': () => statedEof(adapter, inputs),
    'renderError writes one well-formed frame classified as error': () =>
      renderErrorIsError(adapter, inputs),
    'renderStop after output writes well-formed frames that end the stream completed': () =>
      renderStopCompletes(adapter, inputs),
    'quickOutput vouches only for output frames that neither end nor fail': () =>
      quickOutputIsOutput(adapter, inputs),
    'renderReasoningAsText writes visible text, never a keep-alive': () => reasoningAsText(adapter),
    'renderErrorBody writes a JSON object holding the sanitised message': () =>
      errorBodyHoldsMessage(adapter, inputs),
    'renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object': () =>
      renderFromMessageReads(adapter, inputs),
    'usage is counts of the known fields, in verdicts and from usageOf, whatever the input': () =>
      usageIsCounts(adapter, inputs),
  }
}

/**
 * Runs the conformance properties on `adapter`, in this order, each named after the rule it
 * checks:
 *
 * 1. **inspect never throws, whatever the bytes**: `inspect` returns a verdict for every frame
 *    (malformed input is an `error` verdict), and the stream's EOF class can be read after
 *    them. The bytes: each entry of `arbitraries.frameDataCorpus` as a one-frame stream
 *    first, then your streams, `arbitraries.sseStream()`, and mostly
 *    `arbitraries.mangledStream(streams)`: your streams with frames whose `data` is a JSON
 *    scalar (`null` most often), an array, JSON nested 20–100 levels deep, an object with
 *    the protocol's keys holding wrong-typed values (`choices: null`, `delta: 5`,
 *    `content: {}`, also at the paths your own frames use), non-JSON text, empty or
 *    multi-line.
 * 2. **verdicts and the EOF class are the same under every chunking**: a stream (yours, or
 *    mangled) gives the same verdicts and the same `classifyEof` class whether it arrives
 *    whole or split anywhere (one byte at a time, inside CRLF, inside a multibyte character).
 * 3. **the EOF class is the one the sample states**: a sample `{ bytes, eof }` ends as `eof`.
 * 4. **renderError writes one well-formed frame classified as error**: after any stream (yours,
 *    or mangled), `renderError({ type, message, code?, status? }, state)` returns exactly one
 *    whole SSE frame; `inspect` reads it as `error`, and its `error.message` equals
 *    `sanitizeMessage(message)`: the message round-trips through the library's sanitiser.
 * 5. **renderStop after output writes well-formed frames that end the stream completed**: cut
 *    a stream where it had visible output, no terminal and no error; `renderStop(state)`
 *    returns whole SSE frames (every one terminated, no bytes left over), and after them the
 *    stream's EOF class is `completed`.
 * 6. **quickOutput vouches only for output frames that neither end nor fail** (when the adapter
 *    has `quickOutput`): for every frame it returns `true` on, `inspect` says neither `error`,
 *    `keepalive` nor `terminal`, and sets no `terminal`.
 * 7. **renderReasoningAsText writes visible text, never a keep-alive**: for any non-empty
 *    reasoning (and any `firstData`, odd ones included), `renderReasoningAsText(state)` returns
 *    whole SSE frames, none of them a keep-alive, whose `text` verdicts join to exactly the
 *    reasoning.
 * 8. **renderErrorBody writes a JSON object holding the sanitised message** (when the adapter
 *    has `renderErrorBody`): the body parses as a JSON object, and one of its string values, at
 *    any depth, equals `sanitizeMessage(message)`.
 * 9. **renderFromMessage writes whole SSE frames its adapter reads, whatever the JSON object**
 *    (when the adapter has `renderFromMessage`): for any JSON object (protocol keys holding
 *    wrong-typed values, objects from your streams' frames, random objects) it returns whole
 *    SSE frames, and `inspect` reads each of them.
 * 10. **usage is counts of the known fields, in verdicts and from usageOf, whatever the
 *    input**: every `usage` a verdict carries (over the same bytes as property 1), and what
 *    `usageOf` returns for any JSON object (when the adapter has it), is `undefined` or an
 *    object whose fields are among `inputTokens`, `outputTokens`, `cachedInputTokens`,
 *    `cacheCreationInputTokens` and `reasoningTokens`, each a non-negative safe integer.
 *
 * In every property, an adapter method that throws, or returns the wrong kind of value
 * (`inspect` an object with a `kind`, a renderer a `Uint8Array`, `renderErrorBody` a string),
 * breaks that property, and the reason names the method: `adapter.inspect threw (TypeError: boom)`.
 *
 * Resolves when all hold; rejects with an {@link AdapterConformanceError} naming the first
 * property that failed, its counterexample and the options that replay it
 * (`{ seed, path, property }`). Options are checked first: an unknown key is a `TypeError`
 * naming it (`checkAdapter: unknown option "numRun"; did you mean "numRuns"?`).
 *
 * @example
 * await checkAdapter(myAdapter, { streams: myStreamArbitrary, numRuns: 200 })
 *
 * @group Conformance
 */
export async function checkAdapter(
  adapter: StreamAdapter,
  options: CheckAdapterOptions,
): Promise<void> {
  const { streams, property, parameters } = normalize(options)
  const guarded = guardMethods(
    adapter,
    'adapter',
    (component, cause, what) => new UserCodeError(component, cause, what),
    adapterReturns,
  )
  const table = conformances(guarded, inputsOf(streams))
  for (const name of propertyNames) {
    if (property !== undefined && name !== property) continue
    const failure = await table[name]().run(parameters)
    if (failure === undefined) continue
    // The cause is the adapter's own error when one of its methods threw (not the library's
    // wrapper), and the stack starts at the caller: no frame names a file of this package.
    const error = new AdapterConformanceError(
      adapter.name,
      name,
      `${failure.detail}\nHow to fix: ${failure.fix ?? fixes[name]}`,
      failure.seed,
      failure.path,
      isUserCodeError(failure.error) ? failure.error.cause : failure.error,
    )
    Error.captureStackTrace?.(error, checkAdapter)
    throw error
  }
}
