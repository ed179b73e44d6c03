/**
 * Smooth weighted round-robin (nginx's) over the free keys in O(log n) a pick: every free key's
 * running weight grows by its weight each pick and the largest (the first in pool order on a
 * tie) wins and pays the free keys' total. The growth is kept lazily: a key's running weight
 * is `currentWeight + weight × (picks − since)`, so keys of one weight keep their order between
 * picks and a heap per distinct weight finds the largest. Exact with integer weights (the
 * additions it stands for are exact); with weights like 0.1 two running weights that differ
 * only by rounding may be ordered differently than by adding one pick at a time.
 *
 * @module
 */

import type { KeyState } from './key-health.js'

/** The free keys of one weight, largest `currentWeight − weight × since` first. */
class WeightHeap {
  readonly items: number[] = []

  constructor(
    private readonly turns: WeightedTurns,
    readonly weight: number,
  ) {}

  /** Whether `a` goes before `b`: larger lazy key, then earlier in pool order. */
  before(a: number, b: number): boolean {
    const ka = this.turns.keyOf(a)
    const kb = this.turns.keyOf(b)
    return ka > kb || (ka === kb && a < b)
  }

  place(i: number, position: number): void {
    this.items[i] = position
    this.turns.where[position] = i
  }

  up(i: number): number {
    const items = this.items
    const position = items[i] as number
    while (i > 0) {
      this.turns.visits++
      const parent = (i - 1) >> 1
      if (!this.before(position, items[parent] as number)) break
      this.place(i, items[parent] as number)
      i = parent
    }
    this.place(i, position)
    return i
  }

  down(i: number): void {
    const items = this.items
    const position = items[i] as number
    for (;;) {
      this.turns.visits++
      const left = 2 * i + 1
      if (left >= items.length) break
      const right = left + 1
      const child =
        right < items.length && this.before(items[right] as number, items[left] as number)
          ? right
          : left
      if (!this.before(items[child] as number, position)) break
      this.place(i, items[child] as number)
      i = child
    }
    this.place(i, position)
  }

  add(position: number): void {
    this.items.push(position)
    this.up(this.items.length - 1)
  }

  remove(position: number): void {
    const i = this.turns.where[position] as number
    const last = this.items.pop() as number
    if (i === this.items.length) return
    this.place(i, last)
    this.down(this.up(i))
  }
}

/** The smooth weighted turns of one pool's free keys. */
export class WeightedTurns {
  #picks = 0
  #total = 0
  readonly #states: readonly KeyState[]
  readonly #since: Float64Array
  readonly #free: Uint8Array
  readonly #heaps = new Map<number, WeightHeap>()
  /** Per key: its place in its weight's heap. */
  readonly where: Int32Array
  /** Heap entries looked at so far (the counted-operations test reads it). */
  visits = 0

  constructor(states: readonly KeyState[]) {
    this.#states = states
    this.#since = new Float64Array(states.length)
    this.#free = new Uint8Array(states.length)
    this.where = new Int32Array(states.length)
  }

  /** The heap order of a free key: its running weight less what the picks since added. */
  keyOf(position: number): number {
    const state = this.#states[position] as KeyState
    return state.currentWeight - state.weight * (this.#since[position] as number)
  }

  #heap(weight: number): WeightHeap {
    let heap = this.#heaps.get(weight)
    if (heap === undefined) {
      heap = new WeightHeap(this, weight)
      this.#heaps.set(weight, heap)
    }
    return heap
  }

  /** The key at `position` is free (takes part in the picks from now) or not. */
  file(position: number, free: boolean): void {
    if ((this.#free[position] === 1) === free) return
    const state = this.#states[position] as KeyState
    const heap = this.#heap(state.weight)
    if (free) {
      this.#since[position] = this.#picks
      this.#free[position] = 1
      this.#total += state.weight
      heap.add(position)
    } else {
      heap.remove(position)
      state.currentWeight += state.weight * (this.#picks - (this.#since[position] as number))
      this.#since[position] = this.#picks
      this.#free[position] = 0
      this.#total -= state.weight
    }
  }

  /** One pick among the free keys (there is at least one): its position. */
  pick(): number {
    const picks = ++this.#picks
    let best = -1
    let bestWeight = Number.NEGATIVE_INFINITY
    for (const heap of this.#heaps.values()) {
      const top = heap.items[0]
      if (top === undefined) continue
      this.visits++
      const running = this.keyOf(top) + heap.weight * picks
      if (running > bestWeight || (running === bestWeight && top < best)) {
        best = top
        bestWeight = running
      }
    }
    const state = this.#states[best] as KeyState
    state.currentWeight = bestWeight - this.#total
    this.#since[best] = picks
    const heap = this.#heap(state.weight)
    heap.down(this.where[best] as number)
    return best
  }
}
