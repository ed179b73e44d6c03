/**
 * The synchronous core of the frame reader: bytes in, whole frames out. No I/O, no timers.
 * Frame boundaries are found on bytes; a frame inside one chunk is a zero-copy view of it.
 *
 * @module
 */

import { FrameTooLargeError } from '../errors.js'
import { Frame } from './frame.js'
import { indexOfByte } from './index-of.js'

const LF = 10
const CR = 13

/**
 * Splits a byte stream into SSE frames. Chunks pushed in must not be mutated afterwards:
 * frames may be views of them.
 */
export class FrameSplitter {
  readonly #maxFrameBytes: number
  /** Chunks holding the unread bytes; the first one is read from `#head`. */
  #chunks: Uint8Array[] = []
  #head = 0
  #buffered = 0
  /** Scan position: chunk index and offset; everything before it is classified. */
  #scanChunk = 0
  #scanOffset = 0
  /** Bytes of the current frame already scanned (for the size bound). */
  #scanned = 0
  #atLineStart = true
  /** The last scanned byte was a CR ending a line: an LF right after it belongs to it. */
  #afterCr = false
  /** A blank line ended by CR was scanned: the frame ends there, or after one more LF. */
  #blankCr = false
  /** Where to look for the next CR in the scan chunk; `-1` when it has none left. */
  #nextCr = -2
  /** 0: no frame yet, BOM undecided; 1: decided, first frame pending; 2: past the first frame. */
  #bomState: 0 | 1 | 2 = 0
  #bomBytes = 0

  constructor(maxFrameBytes: number) {
    this.#maxFrameBytes = maxFrameBytes
  }

  /** How many bytes are held (read from the source but not yet returned as frames). */
  get bufferedBytes(): number {
    return this.#buffered
  }

  /** Appends a chunk. Empty chunks are ignored. */
  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return
    this.#chunks.push(chunk)
    this.#buffered += chunk.length
  }

  /**
   * Returns the next whole frame, or `null` when more bytes are needed. Throws
   * {@link FrameTooLargeError} when the frame under construction passes the bound.
   */
  take(): Frame | null {
    if (this.#bomState === 0 && !this.#decideBom(false)) {
      // The undecided bytes all belong to the first frame.
      if (this.#buffered > this.#maxFrameBytes) {
        throw new FrameTooLargeError(this.#maxFrameBytes, this.#buffered)
      }
      return null
    }
    const end = this.#scan()
    if (end === null) {
      if (this.#scanned > this.#maxFrameBytes) {
        throw new FrameTooLargeError(this.#maxFrameBytes, this.#scanned)
      }
      return null
    }
    return this.#frame(this.#cut(end), true)
  }

  /**
   * Like {@link take}, but returns only the frame's bytes: no frame object is made. For a
   * caller past the first frame (a pump after commit), where the bytes are all it needs.
   */
  takeRaw(): Uint8Array | null {
    if (this.#bomState !== 2) {
      const frame = this.take()
      return frame === null ? null : frame.raw
    }
    const end = this.#scan()
    if (end === null) {
      if (this.#scanned > this.#maxFrameBytes) {
        throw new FrameTooLargeError(this.#maxFrameBytes, this.#scanned)
      }
      return null
    }
    return this.#cut(end)
  }

  /**
   * At end of input: returns the last frame (a blank line ended by a final CR is whole; bytes
   * with no blank line make a frame with `terminated: false`), or `null` when nothing is held.
   */
  finish(): Frame | null {
    if (this.#bomState === 0) this.#decideBom(true)
    const end = this.#scan()
    if (end !== null) return this.#frame(this.#cut(end), true)
    if (this.#blankCr) {
      this.#blankCr = false
      return this.#frame(this.#cut(this.#scanned), true)
    }
    if (this.#buffered === 0) return null
    if (this.#buffered > this.#maxFrameBytes) {
      throw new FrameTooLargeError(this.#maxFrameBytes, this.#buffered)
    }
    return this.#frame(this.#cut(this.#buffered), false)
  }

  /** Drops everything held. */
  clear(): void {
    this.#chunks = []
    this.#head = 0
    this.#buffered = 0
    this.#scanChunk = 0
    this.#scanOffset = 0
    this.#scanned = 0
    this.#nextCr = -2
  }

  /** A UTF-8 BOM at the very start is skipped by the line scanner (it stays in `raw`). */
  #decideBom(atEnd: boolean): boolean {
    if (this.#buffered < 3 && !atEnd) {
      // Undecided only while every byte so far matches the BOM's prefix.
      const bom = [0xef, 0xbb, 0xbf]
      let i = 0
      for (const chunk of this.#chunks) {
        for (const byte of chunk) {
          if (byte !== bom[i]) {
            this.#bomState = 1
            return true
          }
          i++
        }
      }
      return false
    }
    const first = this.#peekBytes(3)
    if (first[0] === 0xef && first[1] === 0xbb && first[2] === 0xbf) {
      this.#bomBytes = 3
      this.#advanceScan(3)
    }
    this.#bomState = 1
    return true
  }

  #peekBytes(count: number): number[] {
    const out: number[] = []
    let offset = this.#head
    for (const chunk of this.#chunks) {
      for (let i = offset; i < chunk.length && out.length < count; i++) out.push(chunk[i] as number)
      offset = 0
      if (out.length >= count) break
    }
    return out
  }

  #advanceScan(count: number): void {
    let left = count
    while (left > 0) {
      const chunk = this.#chunks[this.#scanChunk] as Uint8Array
      const room = chunk.length - this.#scanOffset
      const step = Math.min(room, left)
      this.#scanOffset += step
      this.#scanned += step
      left -= step
      this.#advanceChunk()
    }
  }

  /**
   * Scans forward from the saved position. Returns the length of the next whole frame
   * (bytes from the head), or `null` when the held bytes end inside a frame.
   */
  #scan(): number | null {
    const chunks = this.#chunks
    while (this.#scanChunk < chunks.length) {
      const chunk = chunks[this.#scanChunk] as Uint8Array
      let i = this.#scanOffset
      if (this.#blankCr) {
        // The frame ended with a blank line's CR; take the LF of a CRLF if it is here.
        this.#blankCr = false
        if (chunk[i] === LF) {
          this.#scanned++
          i++
        }
        this.#scanOffset = i
        return this.#scanned
      }
      if (this.#afterCr) {
        this.#afterCr = false
        if (chunk[i] === LF) {
          i++
          this.#scanned++
        }
      }
      const length = chunk.length
      while (i < length) {
        let lf = indexOfByte(chunk, LF, i)
        if (lf === -1) lf = length
        let cr = this.#nextCr
        if (cr !== -1 && cr < i) {
          cr = indexOfByte(chunk, CR, i)
          this.#nextCr = cr
        }
        const stop = cr !== -1 && cr < lf ? cr : lf
        if (stop === length) {
          this.#scanned += length - i
          if (length > i) this.#atLineStart = false
          i = length
          break
        }
        const blank = this.#atLineStart && stop === i
        this.#scanned += stop + 1 - i
        i = stop + 1
        this.#atLineStart = true
        if (chunk[stop] === CR) {
          if (i === length) {
            // CR at the end of the held bytes: an LF may follow in the next chunk.
            this.#scanOffset = i
            if (blank) {
              this.#blankCr = true
              this.#advanceChunk()
              return null
            }
            this.#afterCr = true
            break
          }
          if (chunk[i] === LF) {
            i++
            this.#scanned++
          }
        }
        if (blank) {
          this.#scanOffset = i
          return this.#scanned
        }
      }
      this.#scanOffset = i
      this.#advanceChunk()
    }
    return null
  }

  #advanceChunk(): void {
    const chunk = this.#chunks[this.#scanChunk]
    if (chunk !== undefined && this.#scanOffset >= chunk.length) {
      this.#scanChunk++
      this.#scanOffset = 0
      this.#nextCr = -2
    }
  }

  #frame(raw: Uint8Array, terminated: boolean): Frame {
    const first = this.#bomState === 1
    this.#bomState = 2
    return new Frame(raw, terminated, first ? this.#bomBytes : 0, first)
  }

  /** Removes the first `length` held bytes and returns them. */
  #cut(length: number): Uint8Array {
    if (length > this.#maxFrameBytes) {
      const received = length
      this.clear()
      throw new FrameTooLargeError(this.#maxFrameBytes, received)
    }
    const first = this.#chunks[0] as Uint8Array
    let raw: Uint8Array
    if (this.#head === 0 && first.length === length) {
      // The frame is the whole chunk (how LLM upstreams send): no view to make.
      raw = first
      this.#dropChunks(1)
    } else if (first.length - this.#head >= length) {
      raw = first.subarray(this.#head, this.#head + length)
      this.#head += length
      if (this.#head === first.length) this.#dropChunks(1)
    } else {
      raw = new Uint8Array(length)
      let filled = 0
      let used = 0
      let offset = this.#head
      while (filled < length) {
        const chunk = this.#chunks[used] as Uint8Array
        const take = Math.min(chunk.length - offset, length - filled)
        raw.set(chunk.subarray(offset, offset + take), filled)
        filled += take
        offset += take
        if (offset === chunk.length) {
          used++
          offset = 0
        }
      }
      this.#dropChunks(used)
      this.#head = offset
    }
    this.#buffered -= length
    this.#scanned = 0
    return raw
  }

  #dropChunks(count: number): void {
    if (count === 0) return
    // One chunk (the usual case) is popped: setting `length` is a runtime call on V8.
    if (count === 1 && this.#chunks.length === 1) this.#chunks.pop()
    else if (count === this.#chunks.length) this.#chunks = []
    else this.#chunks.splice(0, count)
    this.#head = 0
    this.#scanChunk -= count
    if (this.#scanChunk < 0) {
      // The scan stood at the end of a dropped chunk.
      this.#scanChunk = 0
      this.#scanOffset = 0
      this.#nextCr = -2
    }
  }
}
