import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import {
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiResponses,
  type StreamAdapter,
} from '../../src/index.js'

export interface FixtureExpectation {
  protocol: 'openai-chat' | 'openai-responses' | 'anthropic-messages' | 'gemini'
  file: string
  description: string
  eof: 'completed' | 'partial' | 'thinking-only' | 'empty' | 'error-only'
  verdicts: string[]
  text: string
  reasoning: string
  terminalReason: string | null
  error: { type: string; retryable: boolean } | null
}

const root = new URL('../fixtures/', import.meta.url)

export const adapters: Record<FixtureExpectation['protocol'], StreamAdapter> = {
  'openai-chat': openaiChat,
  'openai-responses': openaiResponses,
  'anthropic-messages': anthropicMessages,
  gemini: geminiGenerateContent,
}

export const fixtures: FixtureExpectation[] = JSON.parse(
  readFileSync(fileURLToPath(new URL('expectations.json', root)), 'utf8'),
)

export function fixtureBytes(file: string): Uint8Array {
  return new Uint8Array(readFileSync(fileURLToPath(new URL(file, root))))
}
