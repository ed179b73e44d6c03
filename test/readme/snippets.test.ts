/**
 * Every code block of README.md and docs/*.md marked as code a user copies
 * (`<!-- snippet: check -->` or `<!-- snippet: run NAME -->`) compiles against the current API,
 * with the project's own compiler options, each as its own module, exactly as written. The
 * `run` ones are also started and driven by the official SDKs (run-snippets.test.ts).
 */

import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { type MarkedSnippet, markedSnippets, root, snippetsOf } from './marked-snippets.js'

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

/** The virtual file a snippet is checked as: named after its page and line. */
function fileOf(snippet: MarkedSnippet): string {
  return `${root}test/readme/${snippet.page.replace(/[/.]/g, '-')}-${snippet.line}.ts`
}

describe('the code users copy compiles', () => {
  const snippets = markedSnippets()
  // Each block is its own module (top-level await allowed), as in a user's project.
  const files: Record<string, string> = Object.fromEntries(
    snippets.map((snippet) => [fileOf(snippet), `${snippet.code}\nexport {}\n`]),
  )
  // A copy of use 1 with a wrong option name shows the check can fail.
  const gateway = snippets.find((snippet) => snippet.name === 'node-gateway')
  const broken = `${root}test/readme/broken.ts`
  files[broken] = (gateway?.code ?? '').replace('adapter: openaiChat,', 'protocol: openaiChat,')
  // One program for all: loading the SDKs' types is the slow part.
  const errors = diagnostics(files)

  it('the README marks its three uses and its gateway snippets', () => {
    const readme = snippetsOf('README.md')
    const names = readme.flatMap((snippet) => (snippet.name === undefined ? [] : [snippet.name]))
    expect(names).toEqual(expect.arrayContaining(['node-gateway', 'sdk-app', 'hono-gateway']))
    expect(readme.length).toBeGreaterThanOrEqual(5)
  })

  it.each(snippets.map((snippet) => [`${snippet.page}:${snippet.line}`, snippet] as const))(
    '%s compiles against the current API',
    (_where, snippet) => {
      expect(errors.filter((error) => error.startsWith(fileOf(snippet)))).toEqual([])
    },
  )

  it('a snippet with a wrong option name fails the check', () => {
    expect(files[broken]).not.toBe(gateway?.code)
    expect(errors.filter((error) => error.startsWith(broken)).length).toBeGreaterThan(0)
  })
})
