/**
 * What a stream has shown, and how it ended. Every verdict of {@link classifyEof} comes
 * from the state the tracker recorded; nothing is guessed.
 *
 * @module
 */

import { countNormalization } from '../options.js'
import { mayReportMore } from '../protocols/shortcut.js'
import type {
  BlockEdge,
  FrameVerdict,
  OutputVerdict,
  RenderState,
  StreamAdapter,
  TerminalInfo,
  TokenUsage,
  UpstreamErrorInfo,
} from '../protocols/types.js'
import { mergeUsage } from '../protocols/usage.js'
import { FrameView, type SseFrame } from '../sse/frame.js'

/**
 * Options of {@link createStreamTracker}.
 *
 * @group Peek and classify
 */
export interface StreamTrackerOptions {
  /**
   * Keep reasoning text, up to this many characters, for the thinking-only fallback
   * (`renderReasoningAsText`). `0` keeps none.
   * @default 65_536
   */
  keepReasoningChars?: number
  /**
   * Keep visible text, up to this many characters (Responses' synthesized stop reports it).
   * @default 0 (the Responses adapter raises it to 262_144 through `trackerDefaults`)
   */
  keepTextChars?: number
  /**
   * Keep the first data frame's `data`, up to this many characters, for renderers (ids, model).
   * @default 16_384
   */
  keepFirstDataChars?: number
}

/**
 * Defaults of {@link StreamTrackerOptions}.
 *
 * @group Peek and classify
 */
export const streamTrackerDefaults: Readonly<Required<StreamTrackerOptions>> = Object.freeze({
  keepReasoningChars: 65_536,
  keepTextChars: 0,
  keepFirstDataChars: 16_384,
})

/**
 * What a stream has shown so far.
 *
 * @group Peek and classify
 */
export interface StreamState extends RenderState {
  /** Bytes of all frames observed. */
  readonly bytes: number
  /** Meta and keep-alive frames observed. */
  readonly meta: number
  readonly keepalives: number
  /** Index of the first frame with visible output (text, tool, refusal or reasoning), or `null`. */
  readonly firstVisibleIndex: number | null
  /** Index of the first frame with content (text, tool or refusal), or `null`. */
  readonly firstContentIndex: number | null
  /** Whether a terminal frame was seen. */
  readonly terminalSeen: boolean
  /** The first terminal that named a reason, else the first terminal; `null` when none. */
  readonly terminal: TerminalInfo | null
  /** Error frames observed. */
  readonly errors: number
  /** The first error frame's info, or `null`. */
  readonly firstError: UpstreamErrorInfo | null
  /**
   * Token usage the stream reported so far (its frames' reports merged), or `null` when it
   * reported none. Frames counted without parsing on the pump's hot path report nothing:
   * every protocol reports its final usage on a frame that is parsed (a usage chunk, a
   * terminal event).
   */
  readonly usage: TokenUsage | null
}

/**
 * How a stream ended. A discriminated union on `kind`.
 *
 * @group Peek and classify
 */
export type EofClass =
  | { readonly kind: 'completed'; readonly terminal: TerminalInfo }
  | { readonly kind: 'partial' }
  | { readonly kind: 'thinking-only' }
  | { readonly kind: 'error-only'; readonly error: UpstreamErrorInfo }
  | { readonly kind: 'empty' }

/**
 * Tracks one stream: every frame goes through {@link StreamTracker.observe}.
 *
 * @group Peek and classify
 */
export interface StreamTracker {
  /** Classifies `frame` with the adapter, records it, and returns the verdict. */
  observe(frame: SseFrame): FrameVerdict
  /**
   * The pump's hot path: once content was committed, the last output frame read in full was
   * text and no text is kept, frames the adapter's `quickOutput` recognises are counted as
   * text without being decoded or parsed,
   * unless their bytes hold a usage report, an error or a finish (a `usage`, `usageMetadata`,
   * `error`, `finish_reason` or `finishReason` key whose value is not `null`): those are read
   * in full, so the state is what `observe` on every frame gives. Returns the verdict's kind.
   * `frame` may be a reused view: it is not kept.
   */
  observeCommitted(frame: SseFrame): FrameVerdict['kind']
  /** The state so far (a live view; copy it to keep a snapshot). */
  readonly state: StreamState
  /** The adapter this tracker classifies with. */
  readonly adapter: StreamAdapter
}

interface MutableState {
  frames: number
  bytes: number
  meta: number
  keepalives: number
  counts: { text: number; tool: number; reasoning: number; refusal: number }
  firstVisibleIndex: number | null
  firstContentIndex: number | null
  terminalSeen: boolean
  terminal: TerminalInfo | null
  errors: number
  firstError: UpstreamErrorInfo | null
  reasoningText: string
  visibleText: string
  firstData: string | undefined
  openBlocks: number[]
  lastBlockIndex: number
  usage: TokenUsage | null
}

/** Each adapter's limits when no options are given: checked once, not on every request. */
const adapterLimits = new WeakMap<StreamAdapter, Required<StreamTrackerOptions>>()

/** The limits of frozen options over a frozen adapter, checked once (see `checkTrackerOptions`). */
const checkedLimits = new WeakMap<
  StreamTrackerOptions,
  WeakMap<StreamAdapter, Required<StreamTrackerOptions>>
>()

function normalize(
  options: StreamTrackerOptions | undefined,
  adapter: StreamAdapter,
): Required<StreamTrackerOptions> {
  if (options === undefined) {
    let limits = adapterLimits.get(adapter)
    if (limits === undefined) {
      limits = check({ ...streamTrackerDefaults, ...adapter.trackerDefaults })
      // Only a frozen adapter's defaults cannot change after they were checked.
      const defaults = adapter.trackerDefaults
      if (Object.isFrozen(adapter) && (defaults === undefined || Object.isFrozen(defaults))) {
        adapterLimits.set(adapter, limits)
      }
    }
    return limits
  }
  const known = checkedLimits.get(options)?.get(adapter)
  if (known !== undefined) return known
  const limits = check({ ...streamTrackerDefaults, ...adapter.trackerDefaults, ...options })
  // Only frozen options over a frozen adapter cannot change after they were checked.
  const defaults = adapter.trackerDefaults
  if (
    Object.isFrozen(options) &&
    Object.isFrozen(adapter) &&
    (defaults === undefined || Object.isFrozen(defaults))
  ) {
    keepLimits(options, adapter, limits)
  }
  return limits
}

function keepLimits(
  options: StreamTrackerOptions,
  adapter: StreamAdapter,
  limits: Required<StreamTrackerOptions>,
): void {
  let byAdapter = checkedLimits.get(options)
  if (byAdapter === undefined) {
    byAdapter = new WeakMap()
    checkedLimits.set(options, byAdapter)
  }
  byAdapter.set(adapter, limits)
}

/**
 * Checks, once, the tracker limits a relay's adapter gets with `options` (the relay's frozen
 * peek options) and without, and keeps them for that adapter: a relay built with
 * `createRelay` fixes its adapters' limits when it is built, and its attempts' trackers find
 * them checked (guarantee 30). Throws a `RangeError` naming a bad limit.
 */
export function checkTrackerOptions(
  adapter: StreamAdapter,
  options: Readonly<StreamTrackerOptions> | undefined,
): void {
  if (!adapterLimits.has(adapter)) {
    adapterLimits.set(adapter, check({ ...streamTrackerDefaults, ...adapter.trackerDefaults }))
  }
  if (options !== undefined && checkedLimits.get(options)?.get(adapter) === undefined) {
    keepLimits(
      options,
      adapter,
      check({ ...streamTrackerDefaults, ...adapter.trackerDefaults, ...options }),
    )
  }
}

function check(out: Required<StreamTrackerOptions>): Required<StreamTrackerOptions> {
  countNormalization('streamTracker')
  for (const [key, value] of Object.entries(out)) {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`${key} must be a non-negative integer, got ${String(value)}`)
    }
  }
  return out
}

/** Appends up to `limit` characters; slices only at the bound (slicing every time is quadratic). */
function keep(kept: string, text: string, limit: number): string {
  if (kept.length >= limit || text === '') return kept
  const next = kept + text
  return next.length > limit ? next.slice(0, limit) : next
}

/** The largest number of open blocks tracked; a stream opening more is not a real one. */
const maxOpenBlocks = 256

/** A tracker's state before its first frame. */
function emptyState(): MutableState {
  return {
    frames: 0,
    bytes: 0,
    meta: 0,
    keepalives: 0,
    counts: { text: 0, tool: 0, reasoning: 0, refusal: 0 },
    firstVisibleIndex: null,
    firstContentIndex: null,
    terminalSeen: false,
    terminal: null,
    errors: 0,
    firstError: null,
    reasoningText: '',
    visibleText: '',
    firstData: undefined,
    openBlocks: [],
    lastBlockIndex: -1,
    usage: null,
  }
}

/** A terminal frame: the first one is kept, unless a later one names the reason it lacked. */
function recordTerminal(state: MutableState, terminal: TerminalInfo): void {
  state.terminalSeen = true
  if (state.terminal === null || (state.terminal.reason === null && terminal.reason !== null)) {
    state.terminal = terminal
  }
}

/** Usage a frame reported, merged into what earlier frames reported. */
function recordUsage(state: MutableState, reported: TokenUsage): void {
  state.usage = mergeUsage(state.usage ?? undefined, reported) ?? null
}

/** The stream's `index`th frame, an output one (text, tool, reasoning, refusal): counted, its text kept within `limits`. */
function recordOutput(
  state: MutableState,
  verdict: OutputVerdict,
  index: number,
  limits: Required<StreamTrackerOptions>,
): void {
  if (verdict.usage !== undefined) recordUsage(state, verdict.usage)
  state.counts[verdict.kind]++
  state.firstVisibleIndex ??= index
  if (verdict.kind === 'reasoning') {
    state.reasoningText = keep(state.reasoningText, verdict.text, limits.keepReasoningChars)
  } else {
    state.firstContentIndex ??= index
    if (verdict.kind === 'text') {
      state.visibleText = keep(state.visibleText, verdict.text, limits.keepTextChars)
    }
  }
  if (verdict.terminal !== undefined) recordTerminal(state, verdict.terminal)
}

/** A frame's block edge: the highest block index seen, and the blocks still open (at most {@link maxOpenBlocks}). */
function recordBlock(state: MutableState, block: BlockEdge): void {
  state.lastBlockIndex = Math.max(state.lastBlockIndex, block.index)
  const open = state.openBlocks.indexOf(block.index)
  if (block.edge === 'close' && open !== -1) state.openBlocks.splice(open, 1)
  else if (block.edge === 'open' && open === -1 && state.openBlocks.length < maxOpenBlocks) {
    state.openBlocks.push(block.index)
  }
}

/**
 * Creates a tracker that classifies frames with `adapter` and records what the stream showed.
 *
 * @example
 * const tracker = createStreamTracker(openaiChat)
 * for (let frame = await reader.next(); frame; frame = await reader.next()) tracker.observe(frame)
 * classifyEof(tracker.state) // { kind: 'completed', terminal: { reason: 'stop', raw: 'stop' } }
 *
 * @group Peek and classify
 */
export function createStreamTracker(
  adapter: StreamAdapter,
  options?: StreamTrackerOptions,
): StreamTracker {
  const limits = normalize(options, adapter)
  const state = emptyState()

  /**
   * The kind of the last output frame read in full. The shortcut counts a frame as text, so it
   * is taken only after text: in an answer that is only a tool call every frame is read, and
   * the synthesized stop says `tool_calls` / `tool_use` as the full reading does.
   */
  let lastOutput: OutputVerdict['kind'] | undefined

  function observe(frame: SseFrame): FrameVerdict {
    const verdict = adapter.inspect(frame)
    const index = state.frames++
    state.bytes += frame.raw.length
    if (state.firstData === undefined && verdict.kind !== 'keepalive') {
      const data = frame.data
      if (data !== undefined && data.length <= limits.keepFirstDataChars) state.firstData = data
    }
    switch (verdict.kind) {
      case 'keepalive':
        state.keepalives++
        return verdict
      case 'meta':
        state.meta++
        if (verdict.usage !== undefined) recordUsage(state, verdict.usage)
        break
      case 'terminal':
        recordTerminal(state, verdict.terminal)
        if (verdict.usage !== undefined) recordUsage(state, verdict.usage)
        break
      case 'error':
        state.errors++
        state.firstError ??= verdict.error
        if (verdict.usage !== undefined) recordUsage(state, verdict.usage)
        return verdict
      default:
        recordOutput(state, verdict, index, limits)
        lastOutput = verdict.kind
    }
    if (verdict.block !== undefined) recordBlock(state, verdict.block)
    return verdict
  }

  const quick = adapter.quickOutput?.bind(adapter)
  // Hot spot: after commit most frames end here, decided by a few byte scans instead of
  // TextDecoder and JSON.parse (docs/performance.md, "Why the code is shaped this way").
  function observeCommitted(frame: SseFrame): FrameVerdict['kind'] {
    if (
      quick !== undefined &&
      state.firstContentIndex !== null &&
      lastOutput === 'text' &&
      limits.keepTextChars === 0 &&
      quick(frame) &&
      // Usage and errors are read from every frame that reports them, output deltas included
      // (OpenRouter's usage comes on a chunk whose finish_reason is null).
      !mayReportMore(frame.raw)
    ) {
      state.frames++
      state.bytes += frame.raw.length
      state.counts.text++
      return 'text'
    }
    // Whatever inspect is given may be kept: a view is only good until it moves on.
    return observe(frame instanceof FrameView ? frame.toFrame() : frame).kind
  }

  return { observe, observeCommitted, state, adapter }
}

/**
 * Classifies how a stream ended, from its tracked state:
 * `completed` (a terminal frame was seen), `partial` (text, tool or refusal output, no
 * terminal), `thinking-only` (reasoning only, no terminal), `error-only` (an error frame and
 * nothing visible), `empty` (nothing visible: meta frames and keep-alives don't count).
 *
 * @group Peek and classify
 */
export function classifyEof(state: StreamState): EofClass {
  if (state.terminalSeen && state.terminal !== null)
    return { kind: 'completed', terminal: state.terminal }
  const { text, tool, refusal, reasoning } = state.counts
  if (text + tool + refusal > 0) return { kind: 'partial' }
  if (reasoning > 0) return { kind: 'thinking-only' }
  if (state.firstError !== null) return { kind: 'error-only', error: state.firstError }
  return { kind: 'empty' }
}
