/**
 * The code blocks of README.md and docs/*.md that say they are code a user copies: a
 * `<!-- snippet: check -->` line right above a ```ts block marks it as a whole module that
 * must compile; `<!-- snippet: run NAME -->` also has it started and driven by a named test
 * (test/readme/run-snippets.test.ts). Blocks without a mark are fragments.
 */

import { readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

export const root: string = fileURLToPath(new URL('../../', import.meta.url))

export interface MarkedSnippet {
  /** The page, relative to the repository's root. */
  readonly page: string
  /** The line of the block's opening fence. */
  readonly line: number
  readonly mode: 'check' | 'run'
  /** The runner's name for a `run` snippet. */
  readonly name: string | undefined
  readonly code: string
}

const mark = /^<!-- snippet: (check|run [a-z0-9-]+) -->\n```ts\n([\s\S]*?)^```$/gm

/** Every marked block of one page. */
export function snippetsOf(page: string): MarkedSnippet[] {
  const text = readFileSync(`${root}${page}`, 'utf8')
  return [...text.matchAll(mark)].map((match) => {
    const [mode = '', name] = (match[1] ?? '').split(' ')
    return {
      page,
      line: text.slice(0, match.index).split('\n').length + 1,
      mode: mode === 'run' ? 'run' : 'check',
      name,
      code: match[2] ?? '',
    }
  })
}

/** The pages users read: the README and every page in docs/. */
function pages(): string[] {
  const docs = readdirSync(`${root}docs`).filter((file) => file.endsWith('.md'))
  return ['README.md', ...docs.map((file) => `docs/${file}`)]
}

/** Every marked block of every page. */
export function markedSnippets(): MarkedSnippet[] {
  return pages().flatMap(snippetsOf)
}

/** The `run` snippet named `name`; throws when no page has it. */
export function runSnippet(name: string): MarkedSnippet {
  const found = markedSnippets().filter((snippet) => snippet.name === name)
  if (found.length !== 1)
    throw new Error(`expected one snippet "run ${name}", found ${found.length}`)
  return found[0] as MarkedSnippet
}
