/**
 * The marker a chaos request carries in its body, so the upstream can tell its scenario and
 * attempts through any gateway.
 *
 * @module
 */

/**
 * A scenario and a request id, as carried in a prompt.
 *
 * @group Fault injection
 */
export interface ChaosMarker {
  readonly scenario: string
  readonly requestId: string
}

const markerPattern =
  /\[\[sb-chaos scenario=([A-Za-z0-9:._-]{1,100}) id=([A-Za-z0-9._-]{1,100})\]\]/g

/**
 * The text to put in a prompt so the faulty upstream plays `scenario` for it, counting
 * attempts by `requestId`. Both are limited to `[A-Za-z0-9:._-]`, so JSON never escapes them.
 *
 * @example
 * chaosMarker({ scenario: 'empty', requestId: 'r1' }) // '[[sb-chaos scenario=empty id=r1]]'
 *
 * @group Fault injection
 */
export function chaosMarker(marker: ChaosMarker): string {
  const text = `[[sb-chaos scenario=${marker.scenario} id=${marker.requestId}]]`
  if (parseChaosMarker(text) === undefined)
    throw new RangeError(
      `chaosMarker: scenario and requestId must be 1 to 100 characters of [A-Za-z0-9:._-], got ${JSON.stringify(marker)}`,
    )
  return text
}

/**
 * The last marker in a request body (the last user message comes last), or `undefined`.
 *
 * @group Fault injection
 */
export function parseChaosMarker(body: string): ChaosMarker | undefined {
  let found: ChaosMarker | undefined
  for (const match of body.matchAll(markerPattern)) {
    found = { scenario: match[1] ?? '', requestId: match[2] ?? '' }
  }
  return found
}
