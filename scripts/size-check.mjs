// Bundle size budget of the root entry, as an app bundler would ship it: dist/index.js with
// everything it imports bundled in (eventsource-parser), minified, gzipped. The
// subpath entries are printed too, without a budget: each one adds its own code only, as it
// imports the core from the root (`stream-boundary`, external here).
// Run after `npm run build`: node scripts/size-check.mjs (npm run size)

import { builtinModules } from 'node:module'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import { build } from 'esbuild'

/**
 * Bytes, gzipped: 25,631 B when set, plus about 15 %. Raise it on purpose, in the change that
 * needs it. 37,000 → 39,500 with hedged attempts (+2.2 KB: the race, the budget, the adaptive
 * delay) and the Node-streams attempt path (`iterableResponse`, raw frame reads): 38,442 B.
 * 39,500 → 40,000 with the library's own stops in place of per-request `AbortController`s
 * (`Stop`, signals made on demand; +0.5 KB, a quarter less CPU per request): 39,463 B.
 * 40,000 → 44,000 with one engine for non-streaming requests (whole answers judged and
 * relayed), redaction by value, guards around user code, a cut told, the strict option
 * tables (every option name of every options object) and Anthropic's error-type tables
 * (+3.5 KB): 42,952 B.
 * 44,000 → 47,000 with whole-stream translators (the frame queue and the three shapes),
 * token usage read in every protocol, the answer's id and model, the reference retry rules
 * (route fallback on waits, the stop after repeated overloads, nested errors) and
 * `giveUpResponse` (+3.1 KB): 46,028 B. OpenTelemetry is in its own entry, not here.
 * 47,000 → 50,500 with continuation after a cut (`continueAfterCut`: the relay's continuation
 * attempts, the pump's splice loop, Anthropic's and the Chat dialects' request builders and
 * splices, `openaiChatWith`; +3.3 KB over 46,554 B): 49,808 B.
 * 50,500 → 55,000 with the code users copy and the last silent defects (+3.9 KB over
 * 49,808 B): the ready attempt and the request reader (`fetchAttempt`, `readClientRequest`,
 * the body checks), redaction at every exit (headers, frames after commit, the answer's id),
 * a continuation's restart held and refused and prefill refusals remembered, the silence
 * bound before output, write stalls measured by progress, the end at `[DONE]`, unreadable
 * error frames rendered, thrown responses read as responses, the missing-translator check and
 * the finished-answer rule: 53,752 B.
 * 55,000 → 58,500 with keys chosen before they fail and the per-request cuts (+3.3 KB over
 * 53,815 B): rate-limit headroom read from every response and the request's cost, a 429's
 * free pass to an untried key, `headroom` and `fastest` selection with the cooldown floor and
 * bare-429 backoff in the memory pool, the spread wake, continuation on the next route,
 * `keepClientBytes`, one clock per attempt and the head as a plain record: 57,095 B.
 * 58,500 → 59,500 with unknown content as output (+1.6 KB over 57,095 B): the tables of what
 * each protocol counts as output, Chat's typed content parts, the openai 7.x readings (a named
 * `event: error`, `[DONE]x`), the held block close of a continuation: 58,661 B.
 * 59,500 → 64,500 with real traffic judged right, hostile inputs bounded and the gateway seams
 * (+6.6 KB over 57,095 B, each part measured on its own branch): usage by the later report
 * (+0.7), unknown content as output (+1.6), the readers' depth scan, time bound and parsed
 * bodies (+1.0), every duration checked, redaction of every JSON escaping and the stall clock
 * (+0.8), `RequestNotSentError`, other libraries' thrown errors and the raced attempt (+1.5),
 * the answer deciding a stream, whole-answer translators and `outcome.result` (+1.1): 63,742 B.
 * 64,500 → 68,500 with relays checked once, a lean request path and pools at fleet scale
 * (+4.1 KB over 63,742 B, each merge measured in turn): the memory pool's free-key index,
 * due-heap, weighted turns and wait queue (+2.0), `createRelay` and each feature's check of its
 * own (+1.1), the bare-429 sweep's pauses and the keys-back `retry-after` (+0.3), the light
 * `node:http` answer, fewer promises and one timer per request (+0.6): 67,892 B.
 */
const budgetGzipBytes = 68_500

const kib = (n) => `${(n / 1024).toFixed(1)} KiB`

async function measure(entryName, external) {
  const entry = fileURLToPath(new URL(`../dist/${entryName}.js`, import.meta.url))
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    mainFields: ['module', 'main'],
    external: [...builtinModules, 'node:*', ...external],
    write: false,
    metafile: true,
    logLevel: 'warning',
  })
  const code = result.outputFiles[0]?.contents
  if (code === undefined) throw new Error(`esbuild produced no output for ${entryName}`)
  const inputs = Object.keys(result.metafile.inputs)
  const dependencies = [
    ...new Set(
      inputs.flatMap((path) => path.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/)?.[1] ?? []),
    ),
  ]
  return { min: code.length, gzip: gzipSync(code, { level: 9 }).length, dependencies }
}

const root = await measure('index', [])
console.log(
  `stream-boundary (root entry, minified, dependencies bundled: ${root.dependencies.join(', ') || 'none'}): ` +
    `${kib(root.min)} min, ${kib(root.gzip)} gzip (${root.gzip} B; budget ${budgetGzipBytes} B)`,
)
for (const entry of ['node', 'otel', 'redis', 'testing']) {
  const { min, gzip } = await measure(entry, [
    'stream-boundary',
    'fast-check',
    'ioredis',
    '@opentelemetry/api',
  ])
  console.log(
    `stream-boundary/${entry} (its own code, minified): ${kib(min)} min, ${kib(gzip)} gzip`,
  )
}
if (root.gzip > budgetGzipBytes) {
  console.error(`over budget by ${root.gzip - budgetGzipBytes} B`)
  process.exit(1)
}
