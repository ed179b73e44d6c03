/**
 * The README's first-screen snippets ("Three ways to use it", then "Putting it into an
 * existing gateway") compile against the current API, with the project's own compiler
 * options, exactly as a user would paste them.
 */

import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../../', import.meta.url))
const readme = readFileSync(`${root}README.md`, 'utf8')

/** The `ts` code blocks between two headings of the README. */
function snippets(from: string, to: string): string[] {
  const start = readme.indexOf(from)
  const end = readme.indexOf(to, start)
  if (start < 0 || end < 0) throw new Error(`README has no section from "${from}" to "${to}"`)
  return [...readme.slice(start, end).matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] ?? '')
}

/** Compiler errors of virtual files placed in test/readme/, with tsconfig.json's options. */
function diagnostics(files: Readonly<Record<string, string>>): string[] {
  const configPath = `${root}tsconfig.json`
  const config = ts.readConfigFile(configPath, (path) => ts.sys.readFile(path))
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, root)
  const host = ts.createCompilerHost(options)
  const virtual = (path: string) => files[path]
  const { getSourceFile, fileExists, readFile } = host
  host.fileExists = (path) => virtual(path) !== undefined || fileExists(path)
  host.readFile = (path) => virtual(path) ?? readFile(path)
  host.getSourceFile = (path, language, ...rest) => {
    const text = virtual(path)
    return text === undefined
      ? getSourceFile(path, language, ...rest)
      : ts.createSourceFile(path, text, language, true)
  }
  const program = ts.createProgram(Object.keys(files), { ...options, noEmit: true }, host)
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file !== undefined && virtual(d.file.fileName) !== undefined)
    .map((d) => `${d.file?.fileName}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`)
}

describe('README snippets', () => {
  const blocks = snippets('## Three ways to use it', '## Concepts in one screen')
  // The gateway guide's snippets (Node `http` attempt, Hono route) are complete modules too.
  const gatewayBlocks = snippets(
    '## Putting it into an existing gateway',
    '## The demo, side by side',
  )
  // Each block is its own module (top-level await allowed), as in a user's project.
  const files: Record<string, string> = Object.fromEntries([
    ...blocks.map((code, index) => [
      `${root}test/readme/use-${index + 1}.ts`,
      `${code}\nexport {}\n`,
    ]),
    ...gatewayBlocks.map((code, index) => [
      `${root}test/readme/gateway-${index + 1}.ts`,
      `${code}\nexport {}\n`,
    ]),
  ])
  // A copy of the gateway with a wrong option name shows the check can fail.
  const broken = `${root}test/readme/broken.ts`
  files[broken] = (blocks[0] ?? '').replace('adapter: openaiChat', 'protocol: openaiChat')
  // One program for all: loading the SDKs' types is the slow part.
  const errors = diagnostics(files)

  it('the three uses on the first screen compile against the current API', () => {
    expect(blocks).toHaveLength(3)
    expect(errors.filter((error) => error.includes('/test/readme/use-'))).toEqual([])
  })

  it('the gateway guide on the first screens compiles against the current API', () => {
    expect(gatewayBlocks.length).toBeGreaterThanOrEqual(2)
    const gatewayErrors = errors.filter((error) => error.includes('/test/readme/gateway-'))
    expect(gatewayErrors).toEqual([])
  })

  it('a snippet with a wrong option name fails the check', () => {
    expect(files[broken]).not.toBe(blocks[0])
    expect(errors.filter((error) => error.startsWith(broken)).length).toBeGreaterThan(0)
  })
})
