/**
 * The import rules of src/ (docs/architecture.md, "Layers"), checked in `npm test` with the
 * compiler's own import scanner: no cycle, type-only imports included, and no import that
 * runs up a layer. The layers are the ones `.dependency-cruiser.cjs` declares (its
 * `layer:` rules are read here), so they are declared once; `depcruise` reports the same
 * rules with the offending import named.
 */

import { readdirSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative, resolve, sep } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const root = resolve(import.meta.dirname, '..')

type Graph = Map<string, readonly string[]>

interface LayerRule {
  readonly name: string
  readonly from: RegExp
  readonly to: RegExp
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return path.endsWith('.ts') ? [relative(root, path).split(sep).join('/')] : []
  })
}

/** Every relative import of every file of src/: `import`, `import type`, `export … from`, `import()`. */
function importGraph(): Graph {
  const files = sourceFiles(join(root, 'src'))
  const known = new Set(files)
  const graph: Graph = new Map()
  for (const file of files) {
    const scanned = ts.preProcessFile(readFileSync(join(root, file), 'utf8'), true, true)
    const targets = scanned.importedFiles
      .map((imported) => imported.fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) => join(dirname(file), name.replace(/\.js$/, '.ts')).split(sep).join('/'))
    for (const target of targets) expect(known, `${file} imports ${target}`).toContain(target)
    graph.set(file, [...new Set(targets)])
  }
  return graph
}

/** The groups of files that import each other, round and round (Tarjan's components). */
function cycles(graph: Graph): string[][] {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const found: string[][] = []
  const visit = (file: string): void => {
    index.set(file, index.size)
    low.set(file, index.get(file) ?? 0)
    stack.push(file)
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) visit(target)
      if (stack.includes(target)) low.set(file, Math.min(low.get(file) ?? 0, low.get(target) ?? 0))
    }
    if (low.get(file) !== index.get(file)) return
    const component = stack.splice(stack.indexOf(file))
    if (component.length > 1 || graph.get(file)?.includes(file)) found.push(component.sort())
  }
  for (const file of graph.keys()) if (!index.has(file)) visit(file)
  return found
}

function layerRules(): LayerRule[] {
  const config = createRequire(import.meta.url)(join(root, '.dependency-cruiser.cjs')) as {
    forbidden: { name: string; from: { path?: string }; to: { path?: string } }[]
  }
  return config.forbidden
    .filter((rule) => rule.name.startsWith('layer:'))
    .map((rule) => ({
      name: rule.name,
      from: new RegExp(rule.from.path ?? '$^'),
      to: new RegExp(rule.to.path ?? '$^'),
    }))
}

/** `rule: from → to` for every import that runs up a layer. */
function upwardImports(graph: Graph, rules: readonly LayerRule[]): string[] {
  return [...graph].flatMap(([file, targets]) =>
    rules.flatMap((rule) =>
      rule.from.test(file)
        ? targets
            .filter((target) => rule.to.test(target))
            .map((t) => `${rule.name}: ${file} → ${t}`)
        : [],
    ),
  )
}

function withImport(graph: Graph, from: string, to: string): Graph {
  return new Map([...graph, [from, [...(graph.get(from) ?? []), to]]])
}

describe('the layers of src/', () => {
  const graph = importGraph()
  const rules = layerRules()

  it('no import cycle anywhere in src/, type-only imports included', () => {
    expect(graph.size).toBeGreaterThan(100)
    expect(cycles(graph)).toEqual([])
  })

  it('no import runs up a layer, in src/ and in retry/', () => {
    expect(rules.map((rule) => rule.name)).toEqual(
      expect.arrayContaining(['layer:sse', 'layer:retry/shared', 'layer:retry/route']),
    )
    expect(upwardImports(graph, rules)).toEqual([])
  })

  it('a planted import back up (a type-only one from retry/shared/ to retry/relay/) is caught by both checks', () => {
    const planted = withImport(graph, 'src/retry/shared/hooks.ts', 'src/retry/relay/relay.ts')
    expect(cycles(planted).flat()).toEqual(
      expect.arrayContaining(['src/retry/shared/hooks.ts', 'src/retry/relay/relay.ts']),
    )
    expect(upwardImports(planted, rules)).toEqual([
      'layer:retry/shared: src/retry/shared/hooks.ts → src/retry/relay/relay.ts',
    ])
  })
})
