/**
 * One whole SSE frame: its exact bytes, and its fields parsed on first access by
 * `eventsource-parser`. The splitter finds frame bounds on bytes (the parser cannot hand
 * back bytes); the parser reads the fields of one frame at a time. Two per-frame rules
 * differ from a browser `EventSource` on purpose: `id` is the frame's own (not the last one
 * seen), and a last frame cut by end of stream is delivered (`terminated: false`).
 *
 * @module
 */

import { createParser } from 'eventsource-parser'

/**
 * The fields of an SSE frame, parsed as the SSE specification (and eventsource-parser) do.
 *
 * @group Frames
 */
export interface SseFields {
  /** The `event` field; `undefined` when absent or empty. */
  readonly event: string | undefined
  /** The `data` lines joined with `\n`; `undefined` when the frame has no data field. */
  readonly data: string | undefined
  /**
   * The `id` field of this frame; `undefined` when absent (or when it held a NUL). Unlike
   * `EventSource.lastEventId` it is not carried over from earlier frames.
   */
  readonly id: string | undefined
  /** The last valid `retry` field of this frame (ASCII digits only), in milliseconds. */
  readonly retry: number | undefined
  /** Comment lines, without the leading `:` and one optional space. */
  readonly comments: readonly string[]
}

/**
 * A whole SSE frame as read by a {@link FrameReader}.
 *
 * @group Frames
 */
export interface SseFrame extends SseFields {
  /**
   * The exact bytes of the frame as they arrived, its terminating blank line included.
   * The first frame of a stream keeps the stream's byte order mark, if any.
   */
  readonly raw: Uint8Array
  /**
   * `false` for a trailing frame that end of stream cut before its blank line. A compliant
   * `EventSource` discards such a frame; the reader delivers it so a caller can still see a
   * final `finish_reason` a sloppy upstream did not terminate. Its last line is parsed as if
   * it had ended.
   */
  readonly terminated: boolean
}

const decoder = new TextDecoder('utf-8', { ignoreBOM: true })
const emptyComments: readonly string[] = Object.freeze([])

/** What the parser reported for the frame being parsed. */
interface Scratch {
  dispatched: boolean
  event: string | undefined
  data: string | undefined
  id: string | undefined
  retry: number | undefined
  comments: string[] | undefined
  /** Set while a frame is parsed a second time for its `event` and `id` only. */
  secondPass: boolean
}

// One parser serves every frame: parsing is synchronous and the callbacks only fill this
// scratch record, which is emptied after each frame, so no frame sees another's fields.
const scratch: Scratch = {
  dispatched: false,
  event: undefined,
  data: undefined,
  id: undefined,
  retry: undefined,
  comments: undefined,
  secondPass: false,
}

const parser = createParser({
  onEvent(message) {
    scratch.dispatched = true
    scratch.event = message.event
    scratch.id = message.id
    scratch.data = message.data
  },
  onRetry(retry) {
    if (!scratch.secondPass) scratch.retry = retry
  },
  onComment(comment) {
    if (scratch.secondPass) return
    if (scratch.comments === undefined) scratch.comments = [comment]
    else scratch.comments.push(comment)
  },
})

/**
 * Ends the frame's last line and the frame, for a frame the parser has not dispatched yet:
 * one whose blank line is a final CR (the parser waits for a possible LF) or one that end of
 * stream cut. Both are parsed as if they had ended.
 */
const frameEnd = '\n\n'

/**
 * Parses one frame's text with `eventsource-parser`. `text` has no BOM and holds exactly one
 * event (the splitter found its bounds on bytes), so its `id` is this frame's own.
 * `streamStart` says whether the frame opens the stream: `reset()` re-arms the parser's
 * start-of-stream check (it drops a leading `ï»¿`, a BOM read as Latin-1), which must apply
 * to the stream's first frame only, as when the parser reads the whole stream.
 */
function parseFields(text: string, streamStart: boolean): SseFields {
  parser.reset()
  // An empty first chunk disarms the check and parses nothing.
  if (!streamStart) parser.feed('')
  parser.feed(text)
  if (!scratch.dispatched) parser.feed(frameEnd)
  if (!scratch.dispatched && (text.includes('event') || text.includes('id'))) {
    // eventsource-parser dispatches only events with data, but a frame's `event` and `id`
    // count without it (`event: ping`). A data line of our own makes it dispatch them.
    scratch.secondPass = true
    parser.reset()
    parser.feed('data\n')
    parser.feed(text)
    parser.feed(frameEnd)
    scratch.secondPass = false
    scratch.data = undefined
  }
  const fields: SseFields = {
    event: scratch.event,
    data: scratch.data,
    id: scratch.id,
    retry: scratch.retry,
    comments: scratch.comments ?? emptyComments,
  }
  scratch.dispatched = false
  scratch.event = scratch.data = scratch.id = scratch.retry = scratch.comments = undefined
  return fields
}

function fieldsOf(raw: Uint8Array, skip: number, streamStart: boolean): SseFields {
  // Hot spot: decoding is most of a frame's parse cost (docs/performance.md, "Why the code is
  // shaped this way"); adapters decide on `event` or byte checks first where they can.
  return parseFields(decoder.decode(skip === 0 ? raw : raw.subarray(skip)), streamStart)
}

/**
 * The fields of a frame, parsed from its bytes when first read and kept until its bytes
 * change: the getters {@link Frame} and {@link FrameView} share.
 */
abstract class LazyFields {
  abstract readonly raw: Uint8Array
  #fields: SseFields | undefined

  /** Bytes at the start of `raw` that are not part of the text (a leading BOM). */
  protected skip(): number {
    return 0
  }

  /** Whether the frame is the stream's first. */
  protected streamStart(): boolean {
    return false
  }

  /** Forgets the parsed fields (the bytes changed). */
  protected forget(): void {
    this.#fields = undefined
  }

  #parsed(): SseFields {
    this.#fields ??= fieldsOf(this.raw, this.skip(), this.streamStart())
    return this.#fields
  }

  get event(): string | undefined {
    return this.#parsed().event
  }

  get data(): string | undefined {
    return this.#parsed().data
  }

  get id(): string | undefined {
    return this.#parsed().id
  }

  get retry(): number | undefined {
    return this.#parsed().retry
  }

  get comments(): readonly string[] {
    return this.#parsed().comments
  }

  /** A plain snapshot of the fields. */
  protected fields(): SseFields {
    return this.#parsed()
  }
}

/**
 * The frame object the reader yields. Fields are parsed only when first read, so a pump
 * that forwards `raw` without looking pays nothing for parsing.
 */
export class Frame extends LazyFields implements SseFrame {
  readonly raw: Uint8Array
  readonly terminated: boolean
  /** Bytes at the start of `raw` that are not part of the text (a leading BOM). */
  readonly #skip: number
  readonly #streamStart: boolean

  constructor(raw: Uint8Array, terminated: boolean, skip: number, streamStart = false) {
    super()
    this.raw = raw
    this.terminated = terminated
    this.#skip = skip
    this.#streamStart = streamStart
  }

  protected override skip(): number {
    return this.#skip
  }

  protected override streamStart(): boolean {
    return this.#streamStart
  }

  /** A plain snapshot, so a frame prints and compares as data. */
  toJSON(): SseFields & { terminated: boolean; bytes: number } {
    const { event, data, id, retry, comments } = this.fields()
    return { event, data, id, retry, comments, terminated: this.terminated, bytes: this.raw.length }
  }
}

const noBytes = new Uint8Array(0)

/**
 * One frame object pointed at one frame's bytes after another, so a hot loop that only asks
 * cheap questions of most frames allocates nothing per frame. A frame seen through it is
 * valid until the next `point()`; hand on a {@link Frame} (`toFrame()`) to anything that keeps it.
 */
export class FrameView extends LazyFields implements SseFrame {
  raw: Uint8Array = noBytes
  readonly terminated = true

  /** Points the view at a whole frame's bytes (never the stream's first: no BOM handling). */
  point(raw: Uint8Array): this {
    this.raw = raw
    this.forget()
    return this
  }

  /** The frame the view points at, as a frame object of its own. */
  toFrame(): Frame {
    return new Frame(this.raw, true, 0)
  }
}
