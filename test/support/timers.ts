import { vi } from 'vitest'

/** Fake timers that also move `performance.now()`, which the watchdogs read. */
export function useFakeClock(): void {
  vi.useFakeTimers({
    toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'],
  })
}
