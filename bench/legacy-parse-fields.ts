/**
 * The hand-written SSE field parser the frame reader used before fields were parsed by
 * `eventsource-parser`. Bench-only: `bench/frame-path.ts` runs it beside the current path
 * so a change in per-frame cost shows in one run.
 *
 * @module
 */

interface LegacyFields {
  event: string | undefined
  data: string | undefined
  id: string | undefined
  retry: number | undefined
  comments: readonly string[]
}

const emptyComments: readonly string[] = Object.freeze([])

/** Parses one frame's text (no BOM, exactly one event) per the SSE spec. */
export function legacyParseFields(text: string): LegacyFields {
  let event: string | undefined
  let data: string | undefined
  let id: string | undefined
  let retry: number | undefined
  let comments: string[] | undefined
  const length = text.length
  const hasCr = text.indexOf('\r') !== -1
  // Next colon at or after `start`, cached so colon-less lines cannot make this quadratic.
  let colon = -2
  let start = 0
  while (start < length) {
    let end: number
    if (hasCr) {
      end = start
      while (end < length) {
        const code = text.charCodeAt(end)
        if (code === 10 || code === 13) break
        end++
      }
    } else {
      end = text.indexOf('\n', start)
      if (end === -1) end = length
    }
    if (end > start) {
      if (colon !== -1 && colon < start) colon = text.indexOf(':', start)
      let field: string
      let value: string
      if (colon === -1 || colon >= end) {
        field = text.slice(start, end)
        value = ''
      } else {
        field = text.slice(start, colon)
        const valueStart = text.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1
        value = valueStart >= end ? '' : text.slice(valueStart, end)
      }
      switch (field) {
        case '':
          if (comments === undefined) comments = []
          comments.push(value)
          break
        case 'data':
          data = data === undefined ? value : `${data}\n${value}`
          break
        case 'event':
          event = value === '' ? undefined : value
          break
        case 'id':
          if (!value.includes('\0')) id = value
          break
        case 'retry':
          if (/^\d+$/.test(value)) retry = Number.parseInt(value, 10)
          break
        default:
          // Unknown fields are ignored, as the spec says.
          break
      }
    }
    start = end + 1
    if (text.charCodeAt(end) === 13 && text.charCodeAt(start) === 10) start++
  }
  return { event, data, id, retry, comments: comments ?? emptyComments }
}
