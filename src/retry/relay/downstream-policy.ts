/**
 * The relay policy's `downstream`: the client's protocol and its one translator, checked
 * once, and whether the client's protocol can be reached from the upstream adapters.
 *
 * @module
 */

import type { DownstreamOptions } from '../../commit/pump-policy.js'
import { countNormalization } from '../../options.js'
import type { StreamAdapter } from '../../protocols/types.js'
import type { NormalizedDownstream } from '../shared/policy-types.js'

/** What `downstream` keeps alive by default. */
export const downstreamDefaults = Object.freeze({ keepAlive: 'before-content' as const })

export const downstreamKeys = Object.keys({
  adapter: true,
  transform: true,
  translateFrames: true,
  translateStream: true,
  translateResponse: true,
  keepAlive: true,
} satisfies Record<keyof DownstreamOptions, true>)

/** The translators of `downstream`: at most one may be given. */
const translatorKeys = [
  'transform',
  'translateFrames',
  'translateStream',
  'translateResponse',
] as const

/** `value` when it is a function or `undefined`; a `TypeError` naming the option otherwise. */
export function optionalFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${name} must be a function, got ${typeof value}`)
  }
}

/** `downstream` with its default, checked: one translator, and an adapter for a whole one. */
export function normalizeDownstream(
  downstream: DownstreamOptions | undefined,
): NormalizedDownstream {
  countNormalization('downstream')
  if (downstream === undefined)
    return { ...downstreamDefaults, adapter: undefined, transform: undefined }
  if (typeof downstream !== 'object' || downstream === null) {
    throw new TypeError(
      `downstream must be an object, got ${downstream === null ? 'null' : typeof downstream}`,
    )
  }
  if (downstream.adapter !== undefined && typeof downstream.adapter?.inspect !== 'function') {
    throw new TypeError('downstream.adapter must be a StreamAdapter')
  }
  const given = translatorKeys.filter((key) => downstream[key] !== undefined)
  for (const key of given) optionalFunction(`downstream.${key}`, downstream[key])
  if (given.length > 1) {
    throw new TypeError(
      `downstream takes one translator, got ${given.map((key) => `downstream.${key}`).join(' and ')}`,
    )
  }
  const whole = given.find((key) => key !== 'transform')
  if (whole !== undefined && downstream.adapter === undefined) {
    throw new TypeError(
      `downstream.${whole} needs downstream.adapter (the client's protocol): the relay renders every ending it writes in it`,
    )
  }
  const keepAlive = downstream.keepAlive ?? downstreamDefaults.keepAlive
  if (keepAlive !== true && keepAlive !== false && keepAlive !== 'before-content') {
    throw new TypeError(
      `downstream.keepAlive must be true, false or 'before-content', got ${String(keepAlive)}`,
    )
  }
  return {
    adapter: downstream.adapter,
    transform: downstream.transform,
    translateFrames: downstream.translateFrames,
    translateStream: downstream.translateStream,
    translateResponse: downstream.translateResponse,
    keepAlive,
  }
}

/**
 * A client protocol the relay cannot reach: `downstream.adapter` is another protocol than an
 * upstream adapter (the protocol of what the attempt returns) and no translator turns one into
 * the other. Without it the client would get the upstream's frames as they are.
 */
export function checkTranslation(
  downstream: NormalizedDownstream,
  upstream: readonly StreamAdapter[],
): void {
  const client = downstream.adapter
  if (client === undefined || translatorKeys.some((key) => downstream[key] !== undefined)) return
  const other = upstream.find((adapter) => adapter !== client && adapter.name !== client.name)
  if (other === undefined) return
  throw new TypeError(
    `policy.downstream.adapter is ${client.name} but the upstream adapter is ${other.name} (the protocol of what the attempt returns), and no translator was given: add downstream.transform, translateFrames, translateStream or translateResponse from ${other.name} to ${client.name}, or leave downstream.adapter out`,
  )
}
