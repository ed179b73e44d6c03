import { createMemoryKeyPool } from '../../src/index.js'
import { runs } from '../support/runs.js'
import { describeSelectionProperties } from './selection-properties.js'

describeSelectionProperties(
  'memory pool',
  async (keys, options) => createMemoryKeyPool(keys, options),
  runs(20),
)
