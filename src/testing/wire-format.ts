/**
 * What every protocol's writer shares: the {@link WireWriter} seam, one SSE frame, and
 * OpenAI's error body. Below `wire.ts` and the writers that live in files of their own.
 *
 * @module
 */

/**
 * Writes one answer's frames in one protocol. Each method returns whole SSE frames.
 *
 * @group Test doubles
 */
export interface WireWriter {
  /** The preamble before any output: role chunk, `message_start`, `response.created`. */
  start(): string[]
  /** A text delta. */
  text(delta: string): string[]
  /** A reasoning delta, in the protocol's own style. */
  reasoning(delta: string): string[]
  /** A whole tool call: its start and its argument fragments. */
  tool(name: string, fragments: readonly string[]): string[]
  /** Closes what is open and writes the terminal frames. */
  finish(reason: 'stop' | 'tool_use'): string[]
  /** A retryable (`overloaded`) or fatal (`invalid request`) error frame. */
  error(retryable: boolean, message: string): string
  /** The JSON body of an error response in this protocol. */
  errorBody(type: string, message: string, status: number): string
  /** The protocol's own keep-alive. */
  keepalive(): string
  /** The complete non-streaming answer (the JSON body) carrying `text`. */
  message(text: string): unknown
  /** An overflow error message stating the numbers, in the protocol's wording. */
  overflowMessage(input: number, output: number, limit: number): string
  /** The error type a rate limit has in this protocol. */
  readonly rateLimitType: string
  /** The error type overload has in this protocol. */
  readonly overloadType: string
  /** The error type a refused (invalid) request has in this protocol. */
  readonly invalidRequestType: string
}

/** One SSE frame. */
export const sse = (data: unknown, event?: string): string =>
  `${event === undefined ? '' : `event: ${event}\n`}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`

/** OpenAI's error body (Chat and Responses). */
export const openaiErrorBody = (type: string, message: string) =>
  JSON.stringify({ error: { message, type, param: null, code: null } })
