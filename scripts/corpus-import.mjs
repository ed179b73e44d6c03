#!/usr/bin/env node
/**
 * Imports the recorded provider streams of test/fixtures/recorded/ from git mirrors of public
 * repositories that keep them as test data: vercel/ai (Apache-2.0), whose provider packages
 * record real streams as `__fixtures__/*.chunks.txt` (one SSE data payload a line), and
 * pydantic/pydantic-ai (MIT), whose VCR cassettes (`tests/models/cassettes/**.yaml`) keep each
 * response body as it came, SSE bytes included.
 *
 *   node scripts/corpus-import.mjs --mirror vercel/ai=<git dir> \
 *     --mirror pydantic/pydantic-ai=<git dir> --discover   # choose files, pin commits
 *   node scripts/corpus-import.mjs --mirror …              # rebuild the .sse files
 *
 * `--discover` scans every `*.chunks.txt` the mirror's history ever held, keeps those whose
 * payloads are one of the four wire protocols, drops byte-identical copies and the ones listed
 * in `excluded` below (hand-written, not recorded), pins each to the newest commit that holds
 * it and writes sources.json. Without it, sources.json is read as is, so a rebuild makes the
 * same bytes. Only data is read from the mirror (`git show <commit>:<path>`), never code.
 *
 * Framing (test/fixtures/README.md): Chat and Gemini `data: <json>\n\n` a payload; Anthropic
 * and Responses also `event: <type>` first, the payload's own `type`, as those APIs send it.
 * A recording kept in SSE form already (`event:` / `data:` lines) is kept byte for byte,
 * ended by a blank line. The recordings hold no `data: [DONE]`, so none is added.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', 'test', 'fixtures', 'recorded')
const sourcesFile = join(root, 'sources.json')
const repo = 'vercel/ai'
const licence = 'Apache-2.0'
const cassettes = { repo: 'pydantic/pydantic-ai', licence: 'MIT' }
/** A recording larger than this (as the source keeps it) is left out: the corpus stays a few MB. */
const maxBytes = 160_000

/**
 * Files of the mirror that are not whole recordings of a provider: written or edited by hand
 * for a unit test (ids such as `fc_weather`, `chatcmpl-123`, `resp_test_failed_001`,
 * `msg_prepopulated_content`, a model `claude-fable-5`), splices of two recordings made to
 * reproduce a client bug, or a recording cut down to two events.
 */
const excluded = [
  /issue-18872-/,
  /\/baidu-/,
  /duplicate-message-start/,
  /spliced-/,
  /sequential-messages/,
  /tiny-chunks/,
  /anthropic-advisor-stop-reasons/,
  /empty-first-delta/,
  /anthropic-fallback/,
  /prepopulated-content/,
  /anthropic-refusal/,
  /anthropic-web-search-with-tool/,
  /mistral-empty-choices/,
  /\/moonshot/,
  /openai-custom-tool\.1/,
  /issue-19067-parallel-tool-call-wrapper/,
  /openai-response-failed-only/,
  /issue-10660-image-thought-signature/,
  /issue-17326-(anthropic|xai)-stream/,
  /issue-18970-programmatic-approval/,
  /openai-shell-container\.1/,
]

/** A git command's output; a mirror missing an old object still answers what it has. */
function git(gitDir, ...args) {
  try {
    return execFileSync('git', ['--git-dir', gitDir, ...args], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
      stdio: ['ignore', 'pipe', 'ignore'],
    })
  } catch (error) {
    if (typeof error.stdout === 'string' && error.stdout !== '') return error.stdout
    throw error
  }
}

/** `git show` of one blob, or `undefined` when the mirror lacks it. */
function show(gitDir, commit, path) {
  try {
    return execFileSync('git', ['--git-dir', gitDir, 'show', `${commit}:${path}`], {
      maxBuffer: 1 << 28,
      stdio: ['ignore', 'pipe', 'ignore'],
    })
  } catch {
    return undefined
  }
}

const anthropicTypes = new Set([
  'message_start',
  'content_block_start',
  'content_block_delta',
  'content_block_stop',
  'message_delta',
  'message_stop',
  'ping',
])

/** The wire protocol the payloads are in, or `undefined` for anything else. */
function protocolOf(payloads) {
  const votes = { 'openai-chat': 0, 'openai-responses': 0, 'anthropic-messages': 0, gemini: 0 }
  for (const value of payloads) {
    if (typeof value !== 'object' || value === null) continue
    const type = value.type
    if (typeof type === 'string' && type.startsWith('response.')) votes['openai-responses']++
    else if (anthropicTypes.has(type)) votes['anthropic-messages']++
    else if (value.object === 'chat.completion.chunk' || Array.isArray(value.choices)) {
      if (value.object !== 'text_completion') votes['openai-chat']++
    } else if ('candidates' in value || 'usageMetadata' in value) votes.gemini++
  }
  const [best, count] = Object.entries(votes).sort((a, b) => b[1] - a[1])[0]
  return count > 0 && count >= payloads.length / 2 ? best : undefined
}

/** The provider family a recording came from, by its package and name (and model). */
function familyOf(path, payloads) {
  const pkg = path.split('/')[1]
  const base = path
    .split('/')
    .at(-1)
    .replace(/\.chunks\.txt$/, '')
  const model = JSON.stringify(payloads.slice(0, 3))
  if (base.startsWith('azure-')) return 'azure'
  if (base.startsWith('github-copilot')) return 'github-copilot'
  if (base.startsWith('lmstudio-')) return 'lmstudio'
  if (base.startsWith('google-vertex')) return 'google-vertex'
  if (base.startsWith('xai-')) return 'xai'
  if (base.includes('mistral')) return 'mistral'
  if (pkg === 'gateway') return 'vercel-gateway'
  if (pkg === 'openai-compatible') return /grok/.test(model) ? 'xai' : 'openai-compatible'
  if (pkg === 'open-responses') return 'openai'
  if (pkg === 'moonshotai') return 'moonshot'
  if (pkg === 'spacexai') return 'xai'
  if (pkg === 'google') return 'google'
  return pkg
}

/** The recording's payloads (parsed), or its bytes as they are when it is SSE already. */
function parse(text) {
  const lines = text.split('\n').filter((line) => line.trim() !== '')
  if (lines.some((line) => /^(event|data):/.test(line))) {
    const payloads = lines
      .filter((line) => line.startsWith('data:'))
      .map((line) => JSON.parse(line.slice(5).trim()))
    return { payloads, sse: text.endsWith('\n\n') ? text : `${text.trimEnd()}\n\n` }
  }
  return { payloads: lines.map((line) => JSON.parse(line)), lines }
}

/** Whether a payload begins a new response: the protocol's first event, or a new id. */
function startsResponse(protocol, payload, previous) {
  if (previous === undefined) return false
  if (protocol === 'anthropic-messages') return payload.type === 'message_start'
  if (protocol === 'openai-responses') return payload.type === 'response.created'
  const finished = (p) =>
    protocol === 'gemini'
      ? p.candidates?.some((c) => c.finishReason) === true
      : p.choices?.some((c) => c.finish_reason) === true
  const id = (p) => (protocol === 'gemini' ? p.responseId : p.id)
  return finished(previous.last) && id(payload) !== undefined && id(payload) !== id(previous.last)
}

/**
 * A recording of several calls in a row (a multi-step test keeps them in one file) as one
 * stream per HTTP response: line numbers, grouped.
 */
function responses(protocol, payloads) {
  const groups = []
  payloads.forEach((payload, i) => {
    const current = groups.at(-1)
    if (current === undefined || startsResponse(protocol, payload, current)) {
      groups.push({ lines: [i], last: payload })
    } else {
      current.lines.push(i)
      // A usage chunk after the finish has no choices: it still belongs to this response.
      if (payload.id !== undefined || payload.responseId !== undefined) current.last = payload
    }
  })
  return groups.map((group) => group.lines)
}

/** The SSE body of each response in the recording. */
function toSse(protocol, parsed) {
  if (parsed.sse !== undefined) return [parsed.sse]
  const named = protocol === 'anthropic-messages' || protocol === 'openai-responses'
  return responses(protocol, parsed.payloads).map((lines) =>
    lines
      .map((i) => {
        const data = `data: ${parsed.lines[i]}\n\n`
        return named ? `event: ${parsed.payloads[i].type}\n${data}` : data
      })
      .join(''),
  )
}

/**
 * The response bodies of a VCR cassette: each `string: |` block scalar, unindented, chomped as
 * its indicator says (`|+` keeps every final line break, `|` one, `|-` none).
 */
function cassetteBodies(yaml) {
  const lines = yaml.split('\n')
  const bodies = []
  for (let i = 0; i < lines.length; i++) {
    const head = /^(\s*)string: \|([+-]?)\s*$/.exec(lines[i])
    if (head === null) continue
    const keyIndent = head[1].length
    const body = []
    let indent
    let j = i + 1
    for (; j < lines.length; j++) {
      const line = lines[j]
      if (line.trim() === '') {
        body.push('')
        continue
      }
      const own = line.length - line.trimStart().length
      indent ??= own
      if (own <= keyIndent || own < indent) break
      body.push(line.slice(indent))
    }
    // Every line of the block ends with a line break; the file's own last one ends the split.
    if (j === lines.length && body.at(-1) === '') body.pop()
    let text = body.map((line) => `${line}\n`).join('')
    const content = text.replace(/\n+$/, '')
    if (head[2] === '-') text = content
    else if (head[2] === '') text = `${content}\n`
    bodies.push(text)
    i = j - 1
  }
  return bodies
}

/** The SSE bodies of a cassette with their parsed data payloads. */
function cassetteStreams(yaml) {
  return cassetteBodies(yaml).flatMap((body, index) => {
    if (!/^data: /m.test(body)) return []
    try {
      const payloads = body
        .split('\n')
        .filter((line) => line.startsWith('data:') && line.slice(5).trim() !== '[DONE]')
        .map((line) => JSON.parse(line.slice(5).trim()))
      return [{ body, index, payloads }]
    } catch {
      return []
    }
  })
}

const cassetteFamilies = {
  test_openai_responses: 'openai',
  test_deepseek_responses: 'deepseek',
  test_stream_close: 'huggingface',
  test_bedrock_mantle: 'bedrock-mantle',
}

function discoverCassettes(gitDir, sources) {
  const commit = git(gitDir, 'rev-parse', 'HEAD').trim()
  const paths = git(
    gitDir,
    'grep',
    '-l',
    '-E',
    '^\\s+data: \\{',
    commit,
    '--',
    'tests/models/cassettes',
  )
    .split('\n')
    .filter(Boolean)
    .map((line) => line.slice(commit.length + 1))
  for (const path of paths) {
    const bytes = show(gitDir, commit, path)
    if (bytes === undefined) continue
    const streams = cassetteStreams(bytes.toString('utf8'))
    const dir = path.split('/').at(-2)
    const family = path.includes('openrouter')
      ? 'openrouter'
      : (cassetteFamilies[dir] ?? dir.replace(/^test_/, ''))
    const base = path
      .split('/')
      .at(-1)
      .replace(/\.yaml$/, '')
      .replace(/^test_/, '')
      .replace(new RegExp(`^${family}_`), '')
      .replace(/[[\]]/g, '-')
      .replace(/-$/, '')
    streams.forEach(({ body, index, payloads }, n) => {
      const protocol = protocolOf(payloads)
      if (protocol === undefined || Buffer.byteLength(body) > maxBytes) return
      const stem = `${protocol}/${family}-${base.replace(/_/g, '-')}`
      const file = streams.length === 1 ? `${stem}.sse` : `${stem}.response-${n + 1}.sse`
      sources.push({
        file,
        protocol,
        family,
        source: { repo: cassettes.repo, path, commit, body: index },
        licence: cassettes.licence,
      })
    })
  }
}

function discover(mirrors) {
  const gitDir = mirrors[repo]
  // Every commit that touched a recording, newest first: path -> commits.
  const history = new Map()
  let current
  for (const line of git(
    gitDir,
    'log',
    '--all',
    '--format=C%H',
    '--name-only',
    '--',
    '*.chunks.txt',
  ).split('\n')) {
    if (line.startsWith('C')) current = line.slice(1)
    else if (line.endsWith('.chunks.txt')) {
      if (!history.has(line)) history.set(line, [])
      history.get(line).push(current)
    }
  }
  const paths = [...history.keys()].sort()
  const seen = new Map()
  const sources = []
  for (const path of paths) {
    if (excluded.some((pattern) => pattern.test(path))) continue
    let commit
    let bytes
    for (const candidate of history.get(path)) {
      bytes = show(gitDir, candidate, path)
      if (bytes !== undefined) {
        commit = candidate
        break
      }
    }
    if (bytes === undefined || bytes.length > maxBytes) continue
    let parsed
    try {
      parsed = parse(bytes.toString('utf8'))
    } catch {
      continue
    }
    const protocol = protocolOf(parsed.payloads)
    if (protocol === undefined) continue
    const hash = createHash('sha256').update(bytes).digest('hex')
    if (seen.has(hash)) continue
    seen.set(hash, path)
    const family = familyOf(path, parsed.payloads)
    const base = path
      .split('/')
      .at(-1)
      .replace(/\.chunks\.txt$/, '')
    const pkg = path.split('/')[1]
    const name = [family, pkg].reduce(
      (n, prefix) => (n.startsWith(`${prefix}-`) ? n.slice(prefix.length + 1) : n),
      base,
    )
    let stem = `${protocol}/${family}-${name}`
    // Two packages can keep a recording under one name (openai's and azure's copies).
    if (sources.some((s) => s.file === `${stem}.sse` || s.file.startsWith(`${stem}.response-`)))
      stem = `${protocol}/${family}-${pkg}-${name}`
    const count = toSse(protocol, parsed).length
    for (let response = 0; response < count; response++) {
      const file = count === 1 ? `${stem}.sse` : `${stem}.response-${response + 1}.sse`
      const at = count === 1 ? {} : { response: response + 1, of: count }
      sources.push({ file, protocol, family, source: { repo, path, commit, ...at }, licence })
    }
  }
  if (mirrors[cassettes.repo] !== undefined) discoverCassettes(mirrors[cassettes.repo], sources)
  writeFileSync(sourcesFile, `${JSON.stringify(sources, null, 2)}\n`)
  return sources
}

function build(mirrors, sources) {
  for (const protocol of ['openai-chat', 'openai-responses', 'anthropic-messages', 'gemini'])
    rmSync(join(root, protocol), { recursive: true, force: true })
  let total = 0
  for (const { file, protocol, source } of sources) {
    const gitDir = mirrors[source.repo]
    if (gitDir === undefined) throw new Error(`no --mirror ${source.repo}=<git dir>`)
    const bytes = show(gitDir, source.commit, source.path)
    if (bytes === undefined) throw new Error(`${source.path}@${source.commit} is not in the mirror`)
    const text = bytes.toString('utf8')
    const sse =
      source.body !== undefined
        ? cassetteBodies(text)[source.body]
        : toSse(protocol, parse(text))[(source.response ?? 1) - 1]
    mkdirSync(dirname(join(root, file)), { recursive: true })
    writeFileSync(join(root, file), sse)
    total += Buffer.byteLength(sse)
  }
  writeFileSync(join(root, 'SOURCES.md'), sourcesTable(sources))
  console.log(`${sources.length} streams, ${(total / 1e6).toFixed(2)} MB`)
}

/** SOURCES.md: every file's origin (repository, path, commit) and licence. */
function sourcesTable(sources) {
  const rows = sources.map(({ file, family, source, licence: spdx }) => {
    const at =
      source.response !== undefined
        ? ` (response ${source.response} of ${source.of})`
        : source.body !== undefined
          ? ` (response body ${source.body + 1})`
          : ''
    const url = `https://github.com/${source.repo}/blob/${source.commit}/${source.path}`
    return `| \`${file}\` | ${family} | [${source.repo} \`${source.path}\`](${url})${at} | \`${source.commit.slice(0, 12)}\` | ${spdx} |`
  })
  return [
    '# Sources of the recorded corpus',
    '',
    'Written by `node scripts/corpus-import.mjs` from `sources.json`; do not edit by hand.',
    'Every file is data recorded from a provider by the test suite of the repository named,',
    "under that repository's licence (vercel/ai: Apache License 2.0, Copyright 2023 Vercel, Inc.;",
    'https://github.com/vercel/ai/blob/main/LICENSE). The bytes are the recorded payloads, framed',
    'as SSE (see README.md); a recording of several calls is split into one file per response.',
    '',
    '| file | family | origin | commit | licence |',
    '| --- | --- | --- | --- | --- |',
    ...rows,
    '',
  ].join('\n')
}

const args = process.argv.slice(2)
const mirrors = {}
args.forEach((arg, i) => {
  if (arg !== '--mirror') return
  const [name, dir] = String(args[i + 1]).split('=')
  mirrors[name] = dir
})
if (mirrors[repo] === undefined) {
  console.error(
    'usage: node scripts/corpus-import.mjs --mirror vercel/ai=<git dir> [--mirror pydantic/pydantic-ai=<git dir>] [--discover]',
  )
  process.exit(2)
}
mkdirSync(root, { recursive: true })
const sources = args.includes('--discover')
  ? discover(mirrors)
  : JSON.parse(readFileSync(sourcesFile, 'utf8'))
build(mirrors, sources)
