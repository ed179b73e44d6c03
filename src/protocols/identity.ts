/**
 * Which answer an upstream sent: its id and the model that wrote it, read from the first
 * data frame of a stream or from a whole JSON answer, in any shipped protocol's shape.
 *
 * @module
 */

import { field, parseData } from './common.js'

/**
 * The upstream's id for an answer and the model it named, when it said them.
 *
 * @group Relay
 */
export interface ResponseIdentity {
  /** `chatcmpl-…`, `resp_…`, `msg_…`, Gemini's `responseId`. */
  readonly id?: string
  /** The model the upstream says answered (Gemini's `modelVersion`). */
  readonly model?: string
}

const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' && value.length <= 256 ? value : undefined

/**
 * The id and model an answer's JSON states: at its top (OpenAI Chat, a whole Responses or
 * Anthropic answer), under `response` (Responses' `response.created`) or `message`
 * (Anthropic's `message_start`), or Gemini's `responseId` and `modelVersion`.
 */
export function identityOf(json: unknown): ResponseIdentity | undefined {
  if (typeof json !== 'object' || json === null) return undefined
  const holder = field(json, 'response') ?? field(json, 'message') ?? json
  const id = text(field(holder, 'id')) ?? text(field(json, 'responseId'))
  const model = text(field(holder, 'model')) ?? text(field(json, 'modelVersion'))
  if (id === undefined && model === undefined) return undefined
  return { ...(id === undefined ? {} : { id }), ...(model === undefined ? {} : { model }) }
}

/** The identity in a stream's first data frame (its text), if any. */
export function identityOfData(data: string | undefined): ResponseIdentity | undefined {
  return data === undefined ? undefined : identityOf(parseData(data))
}

/**
 * The model a request asks for: its body's `model`, or the model in a Gemini URL
 * (`…/models/gemini-2.5-pro:streamGenerateContent`).
 */
export function requestedModel(url: string | undefined, body: unknown): string | undefined {
  const named = text(field(body, 'model'))
  if (named !== undefined) return named
  const match = url === undefined ? null : /\/models\/([^/:?]+):/.exec(url)
  if (match?.[1] === undefined) return undefined
  try {
    return text(decodeURIComponent(match[1]))
  } catch {
    return undefined
  }
}
