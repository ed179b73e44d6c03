/**
 * The Redis key pool's settings, checked and derived once at creation: the options with
 * their defaults, the client with the pool's scripts defined on it, each key's Redis keys
 * and script arguments, and the starting state of every key.
 *
 * @module
 */

import { createMemoryKeyPool } from '../key-pool/memory.js'
import { outcomeKinds } from '../key-pool/outcomes.js'
import type { PoolKey } from '../key-pool/types.js'
import { positiveMilliseconds as duration, rejectUnknownKeys } from '../options.js'
import { type RedisKeyPoolOptions, redisKeyPoolDefaults, redisOptionKeys } from './options.js'
import {
  commandNames,
  fingerprint,
  type Known,
  type OutcomeKind,
  type ScriptClient,
  type ScriptConfig,
  type ScriptName,
} from './replies.js'
import { luaScripts } from './scripts.js'

/** What {@link settingsOf} derives: the pool's options, Redis keys and script arguments. */
export type PoolSettings = ReturnType<typeof settingsOf>

/** Everything `createRedisKeyPool` derives from its arguments before it serves. */
export function settingsOf(keys: readonly PoolKey[], options: RedisKeyPoolOptions) {
  rejectUnknownKeys('createRedisKeyPool', options, redisOptionKeys)
  const {
    redis,
    prefix,
    leaseTtlMs,
    commandTimeoutMs,
    probeIntervalMs,
    onDegraded,
    onRecovered,
    now,
    ...memoryOptions
  } = options
  // Validates keys and the shared options with the memory pool's own messages, and gives
  // the starting state (initialState applied).
  const initial = createMemoryKeyPool(keys, memoryOptions)
  if (typeof (redis as { defineCommand?: unknown } | undefined)?.defineCommand !== 'function') {
    throw new TypeError('redis must be an ioredis client (new Redis() or new Cluster())')
  }
  if (typeof prefix !== 'string' || prefix === '' || /[{}]/.test(prefix)) {
    throw new TypeError(`prefix must be a non-empty string without { or }, got ${String(prefix)}`)
  }
  const config = {
    selection: memoryOptions.selection ?? redisKeyPoolDefaults.selection,
    maxInflight: memoryOptions.maxInflight ?? redisKeyPoolDefaults.maxInflight,
    leaseTtlMs: duration('leaseTtlMs', leaseTtlMs ?? redisKeyPoolDefaults.leaseTtlMs),
    commandTimeoutMs: duration(
      'commandTimeoutMs',
      commandTimeoutMs ?? redisKeyPoolDefaults.commandTimeoutMs,
    ),
    probeIntervalMs: duration(
      'probeIntervalMs',
      probeIntervalMs ?? redisKeyPoolDefaults.probeIntervalMs,
    ),
  }
  const client = redis as unknown as ScriptClient
  for (const name of Object.keys(luaScripts) as ScriptName[]) {
    const command = commandNames[name]
    if (typeof (client as unknown as Record<string, unknown>)[command] !== 'function') {
      client.defineCommand(command, { lua: luaScripts[name] })
    }
  }

  const ids = keys.map((key) => key.id)
  const indexOf = new Map(ids.map((id, index) => [id, index]))
  const perKeyArgs = keys.map((key) => [key.maxInflight ?? config.maxInflight, key.weight ?? 1])
  const tag = `{${prefix}}`
  const redisKeys = ids.map((id) => [`${tag}:s:${id}`, `${tag}:l:${id}`, `${tag}:d:${id}`])
  const allKeys = redisKeys.flat()
  const cursorKey = `${tag}:cursor`
  const { members, indexKeys, indexList, indexFingerprint } = indexNames(
    tag,
    ids,
    perKeyArgs,
    config.selection,
  )
  const localNow = now ?? Date.now
  const clockArg = () => (now === undefined ? '-1' : String(now()))
  const scriptConfig = scriptConfigOf(memoryOptions)
  const configJson = JSON.stringify(scriptConfig)

  const known: Known[] = initial.toJSON().keys.map((state) => ({
    disabled: state.disabled,
    disabledUntil: state.disabledUntil ?? 0,
    cooldownUntil: state.cooldownUntil,
    failures: state.failures,
    circuit: state.circuit,
    circuitUntil: state.circuitUntil,
    leases: 0,
    outcomes: Object.fromEntries(outcomeKinds.map((kind) => [kind, 0])) as Record<
      OutcomeKind,
      number
    >,
  }))
  return {
    memoryOptions,
    onDegraded,
    onRecovered,
    config,
    client,
    ids,
    indexOf,
    perKeyArgs,
    tag,
    redisKeys,
    allKeys,
    cursorKey,
    members,
    indexKeys,
    indexList,
    indexFingerprint,
    localNow,
    clockArg,
    scriptConfig,
    configJson,
    known,
  }
}

/**
 * The index's names (`index-lua.ts`): each key's member (sorted by index), the index's Redis
 * keys, the keys' limits and weights as the index script takes them, and the fingerprint
 * of what the index is built for.
 */
function indexNames(
  tag: string,
  ids: readonly string[],
  perKeyArgs: readonly (readonly number[])[],
  selection: string,
) {
  const members = ids.map((id, index) => `${String(index + 1).padStart(6, '0')}:${id}`)
  const indexKeys = ['m', 'free', 'wake', 'exp', 'cursor'].map((name) => `${tag}:${name}`)
  const indexList = JSON.stringify(
    perKeyArgs.map(([limit, weight], index) => [
      ids[index],
      limit === undefined || limit === Number.POSITIVE_INFINITY ? -1 : limit,
      weight ?? 1,
    ]),
  )
  return {
    members,
    indexKeys,
    indexList,
    indexFingerprint: fingerprint(`${selection}\n${indexList}`),
  }
}

/** The options the scripts apply, with their defaults. */
function scriptConfigOf(
  memoryOptions: Omit<RedisKeyPoolOptions, 'redis' | 'prefix'>,
): ScriptConfig {
  const d = redisKeyPoolDefaults
  return {
    defaultCooldownMs: memoryOptions.defaultCooldownMs ?? d.defaultCooldownMs,
    minCooldownMs: memoryOptions.minCooldownMs ?? d.minCooldownMs,
    maxCooldownMs: memoryOptions.maxCooldownMs ?? d.maxCooldownMs,
    headroomHorizonMs: memoryOptions.headroomHorizonMs ?? d.headroomHorizonMs,
    latencyHalfLifeMs: memoryOptions.latencyHalfLifeMs ?? d.latencyHalfLifeMs,
    failureThreshold: memoryOptions.failureThreshold ?? d.failureThreshold,
    breakerWindowMs: memoryOptions.breakerWindowMs ?? d.breakerWindowMs,
    breakerFailureRatio: memoryOptions.breakerFailureRatio ?? d.breakerFailureRatio,
    circuitOpenMs: memoryOptions.circuitOpenMs ?? d.circuitOpenMs,
    authDisableMs: memoryOptions.authDisableMs ?? d.authDisableMs,
  }
}
