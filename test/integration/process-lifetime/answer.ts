/**
 * Shared by the child scripts of process-lifetime.test.ts: reads an OpenAI Chat stream to its
 * end and prints the answer and the moment the request settled, for the parent to time the
 * child's exit against.
 */
export async function printAnswer(response: Response): Promise<void> {
  const body = await response.text()
  let answer = ''
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: {')) continue
    const chunk = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[] }
    answer += chunk.choices?.[0]?.delta?.content ?? ''
  }
  process.stdout.write(`status ${response.status}\nanswer ${answer}\n`)
}

/**
 * Prints the wall-clock time at which the request settled and, a turn later (once sockets
 * released by the request are gone), what still holds the event loop: a timer the request
 * left behind would show as `Timeout`.
 */
export function printSettled(): void {
  process.stdout.write(`settled ${Date.now()}\n`)
  setImmediate(() => {
    process.stdout.write(`holding ${process.getActiveResourcesInfo().join(',')}\n`)
  })
}
