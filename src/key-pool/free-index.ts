/**
 * The memory pool's indexes, so that an acquire costs the same at 1,000 keys as at 4: which
 * keys are free now (a segment tree over the keys in pool order, keeping each free key's
 * open leases, so the next free key from the round-robin cursor, the least busy one and the
 * k-th free one are found in O(log n)), and when a key that is out for a time (a cooldown,
 * an open circuit, an auth hold) is to be looked at again (a binary heap).
 *
 * @module
 */

const absent = Number.POSITIVE_INFINITY

/** The free keys by position, each with a value (its open leases): a segment tree. */
export class FreeIndex {
  readonly #size: number
  /** Per node: the smallest value below it (absent: Infinity). */
  readonly #min: Float64Array
  /** Per node: how many free keys are below it. */
  readonly #count: Uint32Array
  /** Nodes looked at since creation: what the counted-operations test reads. */
  visits = 0

  constructor(readonly length: number) {
    let size = 1
    while (size < length) size *= 2
    this.#size = size
    this.#min = new Float64Array(2 * size).fill(absent)
    this.#count = new Uint32Array(2 * size)
  }

  /** How many keys are free. */
  get count(): number {
    return this.#count[1] as number
  }

  /** Whether the key at `position` is free. */
  has(position: number): boolean {
    return (this.#count[this.#size + position] as number) > 0
  }

  /** The key at `position` is free with `value`, or (`value` undefined) not free. */
  set(position: number, value: number | undefined): void {
    let node = this.#size + position
    const min = this.#min
    const count = this.#count
    if (value === undefined ? count[node] === 0 : min[node] === value && count[node] === 1) return
    min[node] = value ?? absent
    count[node] = value === undefined ? 0 : 1
    for (node >>= 1; node >= 1; node >>= 1) {
      this.visits++
      const left = 2 * node
      min[node] = Math.min(min[left] as number, min[left + 1] as number)
      count[node] = (count[left] as number) + (count[left + 1] as number)
    }
  }

  /** The smallest value of a free key (Infinity when none is free). */
  get least(): number {
    return this.#min[1] as number
  }

  /**
   * The first free key at or after `from` in pool order, wrapping around, whose value is at
   * most `atMost`; -1 when there is none.
   */
  firstFrom(from: number, atMost: number): number {
    const after = this.#first(1, 0, this.#size, from, atMost)
    return after >= 0 ? after : this.#first(1, 0, this.#size, 0, atMost)
  }

  #first(node: number, lo: number, hi: number, from: number, atMost: number): number {
    this.visits++
    if (hi <= from || this.#count[node] === 0 || (this.#min[node] as number) > atMost) return -1
    if (hi - lo === 1) return lo
    const mid = (lo + hi) >> 1
    const left = this.#first(2 * node, lo, mid, from, atMost)
    return left >= 0 ? left : this.#first(2 * node + 1, mid, hi, from, atMost)
  }

  /** The position of the `k`-th free key (0-based) in pool order. */
  nth(k: number): number {
    let node = 1
    let rest = k
    while (node < this.#size) {
      this.visits++
      const left = this.#count[2 * node] as number
      if (rest < left) node = 2 * node
      else {
        rest -= left
        node = 2 * node + 1
      }
    }
    return node - this.#size
  }
}

/** Positions due at a time: a binary min-heap of `[at, position]`. */
export class DueHeap {
  readonly #items: [at: number, position: number][] = []

  get length(): number {
    return this.#items.length
  }

  push(at: number, position: number): void {
    const items = this.#items
    items.push([at, position])
    let i = items.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if ((items[parent] as [number, number])[0] <= at) break
      items[i] = items[parent] as [number, number]
      i = parent
    }
    items[i] = [at, position]
  }

  /** Takes every position due at or before `now` (each once per push), earliest first. */
  takeDue(now: number): number[] {
    const items = this.#items
    const due: number[] = []
    while (items.length > 0 && (items[0] as [number, number])[0] <= now) {
      due.push((items[0] as [number, number])[1])
      const last = items.pop() as [number, number]
      if (items.length === 0) break
      let i = 0
      for (;;) {
        const left = 2 * i + 1
        if (left >= items.length) break
        const right = left + 1
        const child =
          right < items.length &&
          (items[right] as [number, number])[0] < (items[left] as [number, number])[0]
            ? right
            : left
        if ((items[child] as [number, number])[0] >= last[0]) break
        items[i] = items[child] as [number, number]
        i = child
      }
      items[i] = last
    }
    return due
  }
}
