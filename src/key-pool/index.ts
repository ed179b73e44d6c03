/**
 * Key pools: the seam (`KeyPool`) and the in-memory default.
 *
 * @module
 */

export type { KeySelection, MemoryKeyPoolOptions } from './memory.js'
export { createMemoryKeyPool } from './memory.js'
export type {
  AcquireOptions,
  AcquireResult,
  KeyHeadroom,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateEvent,
  KeyStateSnapshot,
  KeyStats,
  PoolKey,
} from './types.js'
