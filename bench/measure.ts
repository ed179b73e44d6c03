/** A tiny side-by-side timer: contenders run interleaved, round after round, on the same input. */

export interface Contender {
  name: string
  /** Runs once over the whole input and returns how many frames it saw. */
  run: () => Promise<number>
}

export interface Measurement {
  name: string
  frames: number
  /** Median microseconds per frame over the rounds. */
  usPerFrame: number
  /** The fastest round's microseconds per frame: steadier than the median on a busy machine. */
  bestUsPerFrame: number
  megabytesPerSecond: number
}

export async function measureSideBySide(
  contenders: Contender[],
  inputBytes: number,
  rounds: number,
): Promise<Measurement[]> {
  const samples = new Map<string, number[]>(contenders.map((c) => [c.name, []]))
  const frames = new Map<string, number>()
  // Warm-up: let the JIT see every contender before timing.
  for (const contender of contenders) for (let i = 0; i < 3; i++) await contender.run()
  for (let round = 0; round < rounds; round++) {
    for (const contender of contenders) {
      ;(globalThis as { gc?: () => void }).gc?.()
      const start = process.hrtime.bigint()
      const count = await contender.run()
      const elapsed = Number(process.hrtime.bigint() - start) / 1000
      samples.get(contender.name)?.push(elapsed)
      frames.set(contender.name, count)
    }
  }
  return contenders.map(({ name }) => {
    const times = (samples.get(name) ?? []).sort((a, b) => a - b)
    const median = times[Math.floor(times.length / 2)] ?? Number.NaN
    const count = frames.get(name) ?? 0
    return {
      name,
      frames: count,
      usPerFrame: median / count,
      bestUsPerFrame: (times[0] ?? Number.NaN) / count,
      megabytesPerSecond: inputBytes / median,
    }
  })
}

/** Reads a body to its end, as a client would. */
export async function drain(body: ReadableStream<Uint8Array>): Promise<void> {
  const reader = body.getReader()
  while (!(await reader.read()).done) {}
}

/** Throws unless the relay committed an answer that completed (a figure of a failure would mislead). */
export function checkEnded(ended: { kind: string; end?: { kind: string } }): void {
  if (ended.kind !== 'committed' || ended.end?.kind !== 'completed')
    throw new Error(`the relay ended ${ended.kind}`)
}
