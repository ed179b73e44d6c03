import { followStops } from '../follow-signals.js'
import { rejectUnknownKeys } from '../options.js'
import type { FirstOutputClock } from '../peek/clock.js'
import {
  type NormalizedPeekOptions,
  normalizePeekOptions,
  type PeekOptions,
  type PeekOutcome,
  peekOn,
} from '../peek/index.js'
import type { StreamAdapter } from '../protocols/types.js'
import type { SseFrame } from '../sse/frame.js'
import {
  createFrameReader,
  type FrameReader,
  frameReaderDefaults,
  frameReaderOn,
} from '../sse/reader.js'
import type { FrameSource } from '../sse/sources.js'
import { type SignalLike, stopOf } from '../stop.js'
import type { PumpContinuation } from './continuation.js'
import type { CommitGate } from './gate-options.js'
import { type PumpInput, pumpOn } from './pump.js'
import {
  checkOneTranslator,
  type DownstreamOptions,
  type NormalizedPumpPolicy,
  normalizePumpPolicy,
  type PumpOutcome,
  type PumpPolicy,
} from './pump-policy.js'

/**
 * Options of {@link deliver}.
 *
 * @group Downstream
 */
export interface DeliverOptions extends PumpPolicy {
  readonly gate: CommitGate
  /** The upstream body, or a reader over it. */
  readonly body: FrameSource | FrameReader
  readonly adapter: StreamAdapter
  /** Peek options (the signal is `signal`). */
  readonly peek?: Omit<PeekOptions, 'signal'> | undefined
  /** Options of the frame reader created over `body`. */
  readonly maxFrameBytes?: number | undefined
  /** Rewrites a frame's bytes before they are written (`null` drops the frame). */
  readonly transform?: ((frame: SseFrame) => Uint8Array | null) | undefined
  /** The client's protocol and translator, when they differ from the upstream's. */
  readonly downstream?: DownstreamOptions | undefined
  /** Aborting ends the attempt, before or after commit (the host gave up). */
  readonly signal?: AbortSignal | undefined
  /** Aborting ends the peek only (a pre-commit deadline); it is ignored once committed. */
  readonly peekSignal?: AbortSignal | undefined
  /** See {@link PumpOptions.secrets}. */
  readonly secrets?: readonly string[] | undefined
  /**
   * Asked once, when the first output arrived and before anything is written: `false` means
   * another attempt already won the client (a hedge), so nothing is written, the body is
   * cancelled and the outcome is `not-committed` with an `aborted` peek.
   */
  readonly claim?: (() => boolean) | undefined
  /** Called once, when the first output arrived and before anything is written. */
  readonly onCommit?: ((peek: Extract<PeekOutcome, { kind: 'output' }>) => void) | undefined
}

/**
 * What {@link deliver} reports.
 *
 * @group Downstream
 */
export type DeliverOutcome =
  | {
      readonly kind: 'committed'
      readonly peek: Extract<PeekOutcome, { kind: 'output' }>
      readonly pump: PumpOutcome
    }
  | { readonly kind: 'not-committed'; readonly peek: Exclude<PeekOutcome, { kind: 'output' }> }

function isReader(body: FrameSource | FrameReader): body is FrameReader {
  return (
    typeof (body as FrameReader).next === 'function' &&
    typeof (body as FrameReader).cancel === 'function'
  )
}

const deliverKeys = Object.keys({
  gate: true,
  body: true,
  adapter: true,
  peek: true,
  maxFrameBytes: true,
  transform: true,
  downstream: true,
  signal: true,
  peekSignal: true,
  secrets: true,
  claim: true,
  onCommit: true,
  onPartialEof: true,
  onThinkingOnly: true,
  idleTimeoutMs: true,
  writeStallTimeoutMs: true,
  stallThresholdMs: true,
} satisfies Record<keyof DeliverOptions, true>)

/**
 * One attempt over one upstream body: (with `earlyHeaders`, commit headers first,) peek for
 * the first output, and on output commit and pump to the end. On any other peek outcome
 * nothing reaches the client and the upstream body is released: the caller may retry.
 *
 * @group Downstream
 */
export function deliver(options: DeliverOptions): Promise<DeliverOutcome> {
  rejectUnknownKeys('deliver', options, deliverKeys)
  checkOneTranslator(options)
  return deliverChecked(options)
}

/** {@link deliver}'s options checked (a bad one rejects), then {@link deliverOn}. */
async function deliverChecked(options: DeliverOptions): Promise<DeliverOutcome> {
  // Checked before anything is read or written: a bad pump option must not surface after commit.
  const pump = normalizePumpPolicy(options)
  const peek = normalizePeekOptions(options.peek ?? {})
  const body = isReader(options.body)
    ? options.body
    : createFrameReader(
        options.body,
        options.maxFrameBytes === undefined ? {} : { maxFrameBytes: options.maxFrameBytes },
      )
  const { signal, peekSignal, transform, downstream, secrets, claim, onCommit } = options
  return deliverOn({
    gate: options.gate,
    body,
    adapter: options.adapter,
    peek,
    pump,
    signal,
    peekSignal,
    transform,
    downstream,
    secrets,
    claim,
    onCommit,
  })
}

/** What the relay hands {@link deliverOn}: every option already checked. */
export interface DeliverInput {
  readonly gate: CommitGate
  /** The upstream body, or a reader over it. */
  readonly body: FrameSource | FrameReader
  /** The bound of the reader made over a body, checked. @default the reader's */
  readonly maxFrameBytes?: number | undefined
  readonly adapter: StreamAdapter
  readonly peek: NormalizedPeekOptions
  readonly pump: NormalizedPumpPolicy
  readonly transform?: DeliverOptions['transform']
  readonly downstream?: DownstreamOptions | undefined
  /** Library-made stops may stand for signals (no `AbortSignal` per attempt). */
  readonly signal?: SignalLike | undefined
  readonly peekSignal?: SignalLike | undefined
  readonly secrets?: readonly string[] | undefined
  readonly claim?: DeliverOptions['claim']
  readonly onCommit?: DeliverOptions['onCommit']
  /** Heals a cut after commit (the relay's `continueAfterCut`). */
  readonly continuation?: PumpContinuation | undefined
  /** The attempt's first-byte and first-output clock, handed to the peek (see `peekOn`). */
  readonly clock?: FirstOutputClock | undefined
}

/**
 * {@link deliver} as the relay calls it: its options were checked when the relay was built
 * (guarantee 30: nothing is normalised per attempt), and its signals may be library-made
 * stops (no `AbortSignal` per attempt for what only the library listens to).
 */
export async function deliverOn(options: DeliverInput): Promise<DeliverOutcome> {
  const { gate, adapter, pump: policy } = options
  const reader = isReader(options.body)
    ? options.body
    : frameReaderOn(options.body, options.maxFrameBytes ?? frameReaderDefaults.maxFrameBytes)
  const peekStop = followStops([stopOf(gate), options.signal, options.peekSignal])
  let peeked: PeekOutcome
  try {
    try {
      // An attempt stopped before its peek began (another attempt won and may have closed
      // the response already) commits nothing, headers included.
      if (gate.earlyHeaders && !peekStop.controller.signal.aborted) await gate.commitHeaders()
    } catch (error) {
      options.clock?.dispose()
      await reader.cancel(error)
      throw error
    }
    try {
      peeked = await peekOn(reader, adapter, options.peek, peekStop.controller, options.clock)
    } catch (error) {
      // An adapter that threw mid-peek: the upstream is released before the throw goes on.
      await reader.cancel(error).catch(() => {})
      throw error
    }
  } finally {
    peekStop.release()
  }
  if (peeked.kind === 'output' && options.claim !== undefined && !options.claim()) {
    const reason = new Error('another attempt reached the client first')
    peeked = { ...peeked, kind: 'aborted', reason }
  }
  if (peeked.kind !== 'output') {
    await reader.cancel(peeked.kind === 'aborted' ? peeked.reason : undefined)
    return { kind: 'not-committed', peek: peeked }
  }
  options.onCommit?.(peeked)
  // What the pump reads of its options, named (not a copy of every option given).
  const pumpOptions: PumpInput = {
    gate,
    frames: peeked.frames,
    reader: peeked.reader,
    tracker: peeked.tracker,
    transform: options.transform,
    downstream: options.downstream,
    signal: options.signal,
    secrets: options.secrets,
    continuation: options.continuation,
    // The peek handed its clock's timer over: the pump's watchdog runs on it.
    timer: options.clock?.timer,
  }
  const pumped = await pumpOn(pumpOptions, policy)
  return { kind: 'committed', peek: peeked, pump: pumped }
}
