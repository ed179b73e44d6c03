import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'
import {
  type CutClass,
  expectedUsage,
  finalClass,
  frameCodes,
  type Protocol,
  splitFrames,
  type Usage,
} from './oracle.js'

/** Where a recording came from (test/fixtures/recorded/sources.json). */
export interface Source {
  readonly file: string
  readonly protocol: Protocol
  readonly family: string
  readonly source: {
    readonly repo: string
    readonly path: string
    readonly commit: string
    readonly response?: number
    readonly of?: number
  }
  readonly licence: string
}

/** What the oracle says of a recording (test/fixtures/recorded/expectations.json). */
export interface Expectation {
  readonly file: string
  /** One letter a frame (oracle.ts, `FrameCode`). */
  readonly frames: string
  /** How the whole recording ends; two or more classes where the oracle leaves a frame open. */
  readonly final: readonly (CutClass | 'completed')[]
  /** The usage it reported, by the usage rule; `null` when it reported none. */
  readonly usage: Usage | null
}

export interface Recording extends Source, Expectation {
  readonly bytes: Uint8Array
  readonly adapter: StreamAdapter
}

const root = new URL('../fixtures/recorded/', import.meta.url)
const path = (name: string) => fileURLToPath(new URL(name, root))

const adapters: Record<Protocol, StreamAdapter> = {
  'openai-chat': openaiChat,
  'openai-responses': openaiResponses,
  'anthropic-messages': anthropicMessages,
  gemini: geminiGenerateContent,
}

export const sources: Source[] = JSON.parse(readFileSync(path('sources.json'), 'utf8'))

/** The oracle's reading of a recording's bytes. */
export function judge(source: Source, bytes: Uint8Array): Expectation {
  const frames = splitFrames(new TextDecoder().decode(bytes))
  const codes = frameCodes(source.protocol, frames)
  return {
    file: source.file,
    frames: codes.join(''),
    final: finalClass(codes),
    usage: expectedUsage(source.protocol, frames) ?? null,
  }
}

export function readBytes(file: string): Uint8Array {
  return new Uint8Array(readFileSync(path(file)))
}

/** Rewrites expectations.json from the oracle (`CORPUS_WRITE_EXPECTATIONS=1`). */
function writeExpectations(): void {
  const all = sources.map((source) => judge(source, readBytes(source.file)))
  // Arrays of classes on one line, as the formatter (Biome) writes them.
  const json = JSON.stringify(all, null, 2).replace(
    /\[\s+("[a-z-]+"(?:,\s+"[a-z-]+")*)\s+\]/g,
    (_all, items: string) => `[${items.replace(/,\s+/g, ', ')}]`,
  )
  writeFileSync(path('expectations.json'), `${json}\n`)
}

if (process.env.CORPUS_WRITE_EXPECTATIONS) writeExpectations()

export const expectations: Expectation[] = JSON.parse(
  readFileSync(path('expectations.json'), 'utf8'),
)

/** Every recording with its bytes, adapter and stored expectation. */
export const recordings: Recording[] = sources.map((source) => {
  const expectation = expectations.find((e) => e.file === source.file)
  if (expectation === undefined) throw new Error(`${source.file} has no expectation`)
  return {
    ...source,
    ...expectation,
    bytes: readBytes(source.file),
    adapter: adapters[source.protocol],
  }
})

/** The recordings that end with their protocol's terminal event (and no error after it). */
export const complete = recordings.filter((r) => r.final.length === 1 && r.final[0] === 'completed')
