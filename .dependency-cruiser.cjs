/**
 * The import rules of src/ (run: `npx depcruise src --config .dependency-cruiser.cjs`).
 *
 * - No cycle anywhere, type-only imports included (`tsPreCompilationDeps`): there is an order
 *   in which every file can be read knowing only the files before it.
 * - Layers: a file imports only from its own layer or the layers below it. The layers are
 *   declared once, bottom to top, in `layers` (the top-level folders of src/) and in
 *   `retryLayers` (the sub-folders of src/retry/, in the order of a request's story); the rules
 *   below are generated from those lists. docs/architecture.md ("Layers") shows them.
 *
 * dependency-cruiser rather than madge: it reads TypeScript's type-only imports, checks
 * layer rules as well as cycles, and fails with the offending import named.
 *
 * @type {import('dependency-cruiser').IConfiguration}
 */

/** The top-level layers of src/, bottom to top: each entry is one layer (its paths, regexes). */
const layers = [
  {
    name: 'basics',
    paths: ['src/(options|stop|errors|call-safely|guard-methods|follow-signals)\\.ts$'],
  },
  { name: 'sse', paths: ['src/sse/'] },
  { name: 'protocols', paths: ['src/protocols/'] },
  { name: 'classify', paths: ['src/classify/'] },
  { name: 'peek', paths: ['src/peek/'] },
  { name: 'commit-and-key-pool', paths: ['src/commit/', 'src/key-pool/'] },
  { name: 'retry', paths: ['src/retry/'] },
  {
    name: 'entries',
    paths: [
      'src/(index|advanced|node|redis)\\.ts$',
      'src/node/',
      'src/redis/',
      'src/otel/',
      'src/testing/',
      'src/cli/',
    ],
  },
]

/** The layers of src/retry/, bottom to top: what a request meets, helpers and types first. */
const retryLayers = [
  { name: 'retry/shared', paths: ['src/retry/shared/'] },
  { name: 'retry/request', paths: ['src/retry/request/'] },
  { name: 'retry/decisions', paths: ['src/retry/decisions/'] },
  { name: 'retry/attempt', paths: ['src/retry/attempt/'] },
  { name: 'retry/continuation', paths: ['src/retry/continuation/'] },
  { name: 'retry/route', paths: ['src/retry/route/'] },
  { name: 'retry/relay', paths: ['src/retry/relay/'] },
]

/** `^(a|b|…)`: a path in any of these layers. */
function anyOf(someLayers) {
  return `^(${someLayers.flatMap((layer) => layer.paths).join('|')})`
}

/** One rule per layer: nothing in it imports from a layer above it. */
function oneWay(ordered) {
  return ordered.slice(0, -1).map((layer, index) => ({
    name: `layer:${layer.name}`,
    comment: `${layer.name} imports only from itself and the layers below it, never from ${ordered
      .slice(index + 1)
      .map((above) => above.name)
      .join(', ')}`,
    severity: 'error',
    from: { path: anyOf([layer]) },
    to: { path: anyOf(ordered.slice(index + 1)) },
  }))
}

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No import cycle, type-only imports included.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    ...oneWay(layers),
    ...oneWay(retryLayers),
  ],
  options: {
    includeOnly: '^src/',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
}
