/** OpenAI Chat frames as an upstream sends them, for scripted attempts. */

/** The role preamble: no visible output. */
export const role =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'

/** A frame of visible text. */
export const text = (content: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":"${content}"},"finish_reason":null}]}\n\n`

/** The finish frame and `[DONE]`. */
export const finish =
  'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
