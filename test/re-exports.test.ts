/**
 * Only the entry files re-export (docs/architecture.md): every other module of src/ exports
 * only names it declares, so an import line always names the module that declares the name.
 * The entries are what tsup.config.ts builds, and a module an entry exposes as a namespace
 * (`export * as arbitraries from …`).
 */

import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const root = resolve(import.meta.dirname, '..')

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return path.endsWith('.ts') ? [relative(root, path).split(sep).join('/')] : []
  })
}

/** The entry files: tsup.config.ts's `entry`, and the modules they expose as namespaces. */
function entryFiles(): Set<string> {
  const config = readFileSync(join(root, 'tsup.config.ts'), 'utf8')
  const block = /entry:\s*\{([^}]*)\}/.exec(config)?.[1] ?? ''
  const files = [...block.matchAll(/'(src\/[^']+\.ts)'/g)].map((match) => match[1] ?? '')
  for (const file of [...files]) {
    const text = readFileSync(join(root, file), 'utf8')
    for (const match of text.matchAll(/export\s+\*\s+as\s+\w+\s+from\s+'([^']+)'/g)) {
      const target = join(dirname(file), (match[1] ?? '').replace(/\.js$/, '.ts'))
      files.push(target.split(sep).join('/'))
    }
  }
  return new Set(files)
}

/** A module's re-exports: `export … from`, and `export { x }` of a binding it imports. */
function reExports(file: string): string[] {
  const source = ts.createSourceFile(
    file,
    readFileSync(join(root, file), 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  )
  const imported = new Set<string>()
  for (const statement of source.statements) {
    const bindings = ts.isImportDeclaration(statement)
      ? statement.importClause?.namedBindings
      : undefined
    if (bindings && ts.isNamedImports(bindings))
      for (const element of bindings.elements) imported.add(element.name.text)
  }
  const found: string[] = []
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement)) continue
    const clause = statement.exportClause
    if (statement.moduleSpecifier !== undefined) {
      found.push(statement.getText(source).replace(/\s+/g, ' '))
    } else if (clause !== undefined && ts.isNamedExports(clause)) {
      for (const element of clause.elements) {
        const local = (element.propertyName ?? element.name).text
        if (imported.has(local)) found.push(`export { ${local} } (imported)`)
      }
    }
  }
  return found
}

describe('re-exports', () => {
  const entries = entryFiles()

  it('the entries are the files tsup builds', () => {
    expect(entries).toContain('src/index.ts')
    expect(entries).toContain('src/advanced.ts')
    expect(entries).toContain('src/testing/arbitraries.ts')
  })

  it('no module of src/ but an entry re-exports a name it does not declare', () => {
    const offenders = sourceFiles(join(root, 'src'))
      .filter((file) => !entries.has(file))
      .flatMap((file) => reExports(file).map((found) => `${file}: ${found}`))
    expect(offenders).toEqual([])
  })

  it('sees a re-export when there is one (the check itself can fail)', () => {
    expect(reExports('src/index.ts').length).toBeGreaterThan(0)
  })
})
