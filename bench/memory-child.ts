/**
 * The memory benchmark in a process of its own, so what earlier benchmarks left in the heap
 * (and in V8's object layouts) does not count against it. Forked by bench/run.ts with
 * `--expose-gc`; sends its result on IPC.
 */

import { benchMemory } from './memory.js'

const [streams, soakFrames] = process.argv.slice(2).map(Number) as [number, number]
const result = await benchMemory({ streams, soakFrames })
process.send?.(result, () => process.exit(0))
