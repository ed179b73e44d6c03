/**
 * Protocol adapters: per wire protocol, what a frame is and how to write the frames the
 * library must write itself.
 *
 * @module
 */

export { adapterForUrl } from './adapter-for-url.js'
export { anthropicMessages } from './anthropic-messages.js'
export type { ContinuationReceived, ContinuationSplice } from './continuation.js'
export { geminiGenerateContent } from './gemini.js'
export { openaiChat, openaiChatWith } from './openai-chat.js'
export type { OpenAIChatContinuation, OpenAIChatOptions } from './openai-chat-continuation.js'
export { openaiResponses } from './openai-responses.js'
export type {
  BlockEdge,
  ErrorVerdict,
  FrameVerdict,
  KeepaliveVerdict,
  MetaVerdict,
  OutputBudgetLimits,
  OutputVerdict,
  RenderableError,
  RenderState,
  StreamAdapter,
  TerminalInfo,
  TerminalReason,
  TerminalVerdict,
  UpstreamErrorInfo,
  UpstreamRequest,
} from './types.js'
export type { TokenUsage } from './usage.js'
