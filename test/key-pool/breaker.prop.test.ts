import { createMemoryKeyPool } from '../../src/index.js'
import { describeBreakerProperties } from './breaker-properties.js'

describeBreakerProperties(
  'memory pool',
  async (keys, options) => createMemoryKeyPool(keys, options),
  200,
)
