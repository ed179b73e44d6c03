import { acquireBody, indexBody } from './acquire-script.js'
import { indexLua } from './index-lua.js'
import { selectionLua } from './selection-scripts.js'

/**
 * The Lua scripts of the Redis key pool. Each one runs atomically inside Redis, so replicas
 * never lease a key past its `maxInflight` or lose a cooldown to a race. They mirror
 * `refresh`, `availability`, `learn`, `provenGood` and `pick` of the memory pool, and its
 * breaker window (`key-pool/window.ts`), line for line.
 *
 * Layout of one key's state (all keys of a pool share the `{prefix}` hash tag, so a
 * script's keys live in one Redis Cluster slot):
 * - `{prefix}:s:<id>` hash: `disabled`, `disabledUntil` (0: operator hold), `cooldownUntil`,
 *   `failures`, `circuit`, `circuitUntil`, `trial` (lease id of the half-open probe),
 *   `atrial` (lease id of the auth-hold probe), `gen` (bumped when the circuit opens or
 *   closes), `win` (the breaker window's buckets), `cw` (weighted selection), `leases`, the
 *   selection fields of `selection-scripts.ts`, and one `o:<outcome>` counter per outcome kind.
 * - `{prefix}:l:<id>` sorted set: open lease ids scored by their expiry (the inflight count).
 * - `{prefix}:d:<id>` sorted set: reported lease ids, so a report replayed after an outage
 *   is applied once.
 *
 * Numbers cross into and out of Lua as `%.17g` strings, because Redis truncates Lua numbers
 * in replies and epoch milliseconds lose digits in `tostring`.
 *
 * @module
 */

const prelude = `
local function clock(arg)
  local now = tonumber(arg)
  if now == nil or now < 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

local function num(x)
  return string.format('%.17g', x)
end

${selectionLua}
local OUTCOMES = {'success', 'rate-limited', 'auth-failed', 'server-error', 'overloaded',
  'protocol-fault', 'client-gone', 'rejected', 'cancelled'}
local COUNTERS = {}
for j, kind in ipairs(OUTCOMES) do COUNTERS[j] = 'o:' .. kind end

-- The breaker window: "start,leases,failures;..." (%.17g, so no digit is lost).
local function decodeWindow(text)
  local win = {}
  for bucket in string.gmatch(text or '', '[^;]+') do
    local b = {}
    for field in string.gmatch(bucket, '[^,]+') do b[#b + 1] = tonumber(field) end
    win[#win + 1] = b
  end
  return win
end

local function encodeWindow(win)
  local parts = {}
  for j, b in ipairs(win) do parts[j] = num(b[1]) .. ',' .. num(b[2]) .. ',' .. num(b[3]) end
  return table.concat(parts, ';')
end

local function load(key)
  local v = redis.call('HMGET', key, 'disabled', 'disabledUntil', 'cooldownUntil', 'failures',
    'circuit', 'circuitUntil', 'trial', 'atrial', 'gen', 'win', 'cw', 'leases', 'rb', 'tb', 'sr',
    'st', 'lat', 'latAt', 'strikes', 'rp', 'rpu')
  return {
    rp = tonumber(v[20]),
    rpu = tonumber(v[21]) or 0,
    rb = decodeBudget(v[13]),
    tb = decodeBudget(v[14]),
    sr = tonumber(v[15]) or 0,
    st = tonumber(v[16]) or 0,
    lat = tonumber(v[17]),
    latAt = tonumber(v[18]) or 0,
    strikes = tonumber(v[19]) or 0,
    disabled = v[1] == '1',
    disabledUntil = tonumber(v[2]) or 0,
    cooldownUntil = tonumber(v[3]) or 0,
    failures = tonumber(v[4]) or 0,
    circuit = v[5] or 'closed',
    circuitUntil = tonumber(v[6]) or 0,
    trial = v[7] or '',
    atrial = v[8] or '',
    gen = tonumber(v[9]) or 0,
    win = decodeWindow(v[10]),
    cw = tonumber(v[11]) or 0,
    leases = tonumber(v[12]) or 0,
  }
end

local function save(key, s)
  redis.call('HSET', key, 'disabled', s.disabled and '1' or '0',
    'disabledUntil', num(s.disabledUntil), 'cooldownUntil', num(s.cooldownUntil),
    'failures', num(s.failures), 'circuit', s.circuit, 'circuitUntil', num(s.circuitUntil),
    'trial', s.trial, 'atrial', s.atrial, 'gen', num(s.gen), 'win', encodeWindow(s.win),
    'cw', num(s.cw), 'leases', num(s.leases), 'rb', encodeBudget(s.rb), 'tb', encodeBudget(s.tb),
    'sr', num(s.sr), 'st', num(s.st), 'latAt', num(s.latAt), 'strikes', num(s.strikes),
    'rp', s.rp == nil and '' or num(s.rp), 'rpu', num(s.rpu or 0))
  if s.lat ~= nil then redis.call('HSET', key, 'lat', num(s.lat)) end
end

local function live(leasesKey, now)
  return redis.call('ZCOUNT', leasesKey, '(' .. num(now), '+inf')
end

-- One key as the client caches it; with its outcome counters when stateKey is given.
local function view(s, inflight, stateKey)
  local row = {s.disabled and 1 or 0, num(s.cooldownUntil), s.failures, s.circuit,
    num(s.circuitUntil), inflight, s.leases, num(s.disabledUntil)}
  if stateKey then
    local counts = redis.call('HMGET', stateKey, unpack(COUNTERS))
    local out = {}
    for j = 1, #COUNTERS do out[j] = tonumber(counts[j]) or 0 end
    row[9] = out
  end
  return row
end

local function tell(events, i, state, reason, untilMs)
  events[#events + 1] = {i, state, reason, untilMs and num(untilMs) or ''}
end

-- The memory pool's window.ts: pruneWindow, countInWindow, windowTotals.
local function totals(win)
  local leases, failures = 0, 0
  for _, b in ipairs(win) do
    leases = leases + b[2]
    failures = failures + b[3]
  end
  return leases, failures
end

local function prune(s, now, windowMs)
  local size = windowMs / 10
  local drop = 0
  while drop < #s.win and s.win[drop + 1][1] + size <= now - windowMs do drop = drop + 1 end
  if drop == 0 then return false end
  local kept = {}
  for j = drop + 1, #s.win do kept[#kept + 1] = s.win[j] end
  s.win = kept
  local _, failures = totals(kept)
  s.failures = failures
  return true
end

local function count(s, now, windowMs, field)
  local size = windowMs / 10
  local start = math.floor(now / size) * size
  local last = s.win[#s.win]
  if last == nil or last[1] < start then
    last = {start, 0, 0}
    s.win[#s.win + 1] = last
    if #s.win > 11 then table.remove(s.win, 1) end
  end
  last[field] = last[field] + 1
end

-- The memory pool's refresh(): the window slides; an open circuit whose time is up half-opens.
local function refresh(s, now, cfg, events, i)
  local changed = prune(s, now, cfg.breakerWindowMs)
  if s.circuit == 'open' and s.circuitUntil <= now then
    s.circuit = 'half-open'
    s.trial = ''
    tell(events, i, 'circuit-half-open', 'timer')
    changed = true
  end
  return changed
end

-- The memory pool's provenGood(): a probe's first output closes or re-enables.
local function provenGood(s, leaseId, events, i)
  local changed = false
  if s.trial ~= '' and s.trial == leaseId then
    s.trial = ''
    s.circuit = 'closed'
    s.gen = s.gen + 1
    s.win = {}
    s.failures = 0
    tell(events, i, 'circuit-closed', 'probe-succeeded')
    changed = true
  end
  if s.atrial ~= '' and s.atrial == leaseId then
    s.atrial = ''
    s.disabled = false
    s.disabledUntil = 0
    tell(events, i, 'enabled', 'probe-succeeded')
    changed = true
  end
  return changed
end

local function openCircuit(s, now, cfg, reason, events, i)
  s.circuit = 'open'
  s.circuitUntil = now + cfg.circuitOpenMs
  s.gen = s.gen + 1
  s.win = {}
  s.failures = 0
  tell(events, i, 'circuit-open', reason, s.circuitUntil)
end

-- The memory pool's learn(): what an outcome does to its key.
-- headroom: what the response's headers stated, with the lease's spent counters (sr, st).
local function record(stateKey, s, leaseId, gen, kind, retryAfterMs, headroom, now, cfg, events, i)
  redis.call('HINCRBY', stateKey, 'o:' .. kind, 1)
  refresh(s, now, cfg, events, i)
  if kind == 'success' or kind == 'rate-limited' then learnHeadroom(s, headroom, now, cfg) end
  if kind == 'success' then s.strikes = 0 end
  if kind == 'success' or kind == 'rejected' then provenGood(s, leaseId, events, i) end
  local probe = s.trial ~= '' and s.trial == leaseId
  if probe then s.trial = '' end
  if s.atrial ~= '' and s.atrial == leaseId then s.atrial = '' end
  if kind == 'rate-limited' then
    local untilMs = now + rateLimitCooldown(s, retryAfterMs, headroom, cfg)
    if untilMs > s.cooldownUntil then
      s.cooldownUntil = untilMs
      tell(events, i, 'cooling', 'rate-limited', untilMs)
    end
  elseif kind == 'auth-failed' then
    if not s.disabled or s.disabledUntil > 0 then
      s.disabled = true
      s.disabledUntil = now + cfg.authDisableMs
      tell(events, i, 'disabled', 'auth-failed', s.disabledUntil)
    end
  elseif kind == 'server-error' then
    if probe then
      openCircuit(s, now, cfg, 'probe-failed', events, i)
    elseif s.circuit == 'closed' and gen == s.gen then
      count(s, now, cfg.breakerWindowMs, 3)
      local leases, failures = totals(s.win)
      s.failures = failures
      if failures >= cfg.failureThreshold and failures >= cfg.breakerFailureRatio * leases then
        openCircuit(s, now, cfg, 'failure-rate', events, i)
      end
    end
  end
  save(stateKey, s)
end
${indexLua}
`

const acquire = `${prelude}${acquireBody}`

const index = `${prelude}${indexBody}`

/**
 * KEYS: state, leases, done of the leased key.
 * ARGV: now, leaseTtlMs, lease id, outcome kind, retryAfterMs ('' when none), config (JSON),
 * the lease's generation, headroom ('' or JSON: the stated numbers, and `sr`/`st`, the key's
 * spent counters after the lease), the `{prefix}` tag, the key's 1-based index and id, the
 * key's spent requests after the lease.
 * Returns `[applied (1/0), now, row, events]`.
 */
const report = `${prelude}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local leaseId = ARGV[3]
local applied = 0
local events = {}
TAG = ARGV[9]
local i, id = tonumber(ARGV[10]), ARGV[11]
local s = load(KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', num(now))
if not redis.call('ZSCORE', KEYS[3], leaseId) then
  redis.call('ZREM', KEYS[2], leaseId)
  redis.call('ZREM', rk('exp'), member(i, id) .. '|' .. leaseId)
  redis.call('ZADD', KEYS[3], num(now + ttl), leaseId)
  local headroom = nil
  if ARGV[8] ~= '' then headroom = cjson.decode(ARGV[8]) end
  -- As the memory pool: budgets past the last acquire's time are forgotten first, and the
  -- refill probe's report ends the probe.
  local cfg = cjson.decode(ARGV[6])
  local looked = tonumber(redis.call('HGET', rk('m'), 'looked')) or now
  forgetPastBudgets(s, looked, cfg.headroomHorizonMs)
  probeReturned(s, tonumber(ARGV[12]))
  record(KEYS[1], s, leaseId, tonumber(ARGV[7]), ARGV[4], tonumber(ARGV[5]), headroom, now,
    cfg, events, 1)
  applied = 1
  reindex(i, id, now, ARGV[6], cfg, s)
end
return cjson.encode({applied, num(now), view(s, live(KEYS[2], now), KEYS[1]), events})
`

/**
 * A lease's first output: a probe's closes or re-enables, and under `fastest` its time since
 * the acquire joins the key's average. KEYS: state, leases of the key. ARGV: now, lease id,
 * the acquire's now ('' when the latency is not wanted), the `{prefix}` tag, the key's 1-based
 * index and id. Returns `[row, events]`.
 */
const commit = `${prelude}
local now = clock(ARGV[1])
TAG = ARGV[4]
local events = {}
local s = load(KEYS[1])
local changed = false
if ARGV[3] ~= '' then
  learnLatency(s, now - tonumber(ARGV[3]), now)
  changed = true
end
if provenGood(s, ARGV[2], events, 1) then changed = true end
if changed then
  save(KEYS[1], s)
  reindex(tonumber(ARGV[5]), ARGV[6], now, nil, nil, s)
end
return cjson.encode({view(s, live(KEYS[2], now)), events})
`

/**
 * An operator's `disable`/`enable`. KEYS: state, leases of the key. ARGV: now, 1 to disable
 * or 0 to enable, the `{prefix}` tag, the key's 1-based index and id. Returns `[row, events]`.
 */
const toggle = `${prelude}
local now = clock(ARGV[1])
TAG = ARGV[3]
local events = {}
local s = load(KEYS[1])
local operatorHold = s.disabled and s.disabledUntil == 0
local disable = ARGV[2] == '1'
if (disable and not operatorHold) or (not disable and s.disabled) then
  s.disabled = disable
  s.disabledUntil = 0
  s.atrial = ''
  save(KEYS[1], s)
  reindex(tonumber(ARGV[4]), ARGV[5], now, nil, nil, s)
  tell(events, 1, disable and 'disabled' or 'enabled', 'operator')
end
return cjson.encode({view(s, live(KEYS[2], now)), events})
`

/**
 * Pushes a replica's local state back after an outage (or seeds `initialState`).
 * KEYS: this generation's bookkeeping hash, then state, leases, done of every key.
 * ARGV: now, leaseTtlMs, payload (JSON, see `SyncPayload`), the index's meta key.
 * Returns `[now, rows, events]` (rows with outcome counters).
 */
const sync = `${prelude}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local p = cjson.decode(ARGV[3])
local n = (#KEYS - 1) / 3
local function K(i, j) return KEYS[1 + 3 * (i - 1) + j] end
local RANK = { closed = 0, ['half-open'] = 1, open = 2 }
local events = {}

-- Seed keys Redis does not know (a fresh or restarted Redis, or initialState).
for i = 1, n do
  local seed = p.keys[i].seed
  if seed and redis.call('EXISTS', K(i, 1)) == 0 then
    -- Restored failures count in this bucket, with no lease to dilute them (as in memory).
    local win = {}
    if seed[3] > 0 then win = {{now, 0, seed[3]}} end
    save(K(i, 1), { disabled = seed[1] == 1, disabledUntil = seed[6] or 0,
      cooldownUntil = seed[2], failures = seed[3], circuit = seed[4], circuitUntil = seed[5],
      trial = '', atrial = '', gen = 0, win = win, cw = 0, leases = 0, sr = 0, st = 0,
      latAt = 0, strikes = 0 })
  end
end

-- Leases whose outcome was already folded into the local state, and leases of acquires
-- that timed out: free their slots.
for _, id in ipairs(p.release) do
  for i = 1, n do
    redis.call('ZREM', K(i, 2), id)
    if redis.call('HGET', K(i, 1), 'trial') == id then redis.call('HSET', K(i, 1), 'trial', '') end
    if redis.call('HGET', K(i, 1), 'atrial') == id then redis.call('HSET', K(i, 1), 'atrial', '') end
  end
end

-- Outcomes of Redis leases reported during the outage, at the time they happened.
for _, r in ipairs(p.replay) do
  if not redis.call('ZSCORE', K(r.key, 3), r.lease) then
    redis.call('ZREM', K(r.key, 2), r.lease)
    redis.call('ZADD', K(r.key, 3), num(now + ttl), r.lease)
    record(K(r.key, 1), load(K(r.key, 1)), r.lease, r.gen, r.kind, r.retryAfterMs, nil, r.at,
      p.config, events, r.key)
  end
end

-- Merge toward caution: a disable/enable done during the outage wins, an auth failure
-- during it holds the key as a report would, cooldowns take the later end, circuits the
-- more open state and the larger failure count.
for i = 1, n do
  local k = p.keys[i]
  local s = load(K(i, 1))
  local dirty = false
  if k.authHold then
    -- As record() takes an auth failure: an operator hold (0) placed meanwhile stays, and of
    -- two auth holds the later end wins.
    if not (s.disabled and s.disabledUntil == 0) then
      local held = s.disabled and s.disabledUntil or 0
      s.disabled = true
      s.disabledUntil = math.max(held, k.authHold)
      dirty = true
    end
  elseif k.disabled ~= nil then
    s.disabled = k.disabled
    s.disabledUntil = k.disabledUntil or 0
    dirty = true
  end
  if k.cooldownUntil and k.cooldownUntil > s.cooldownUntil then
    s.cooldownUntil = k.cooldownUntil
    dirty = true
  end
  if k.circuit then
    local failures, circuit, circuitUntil = k.circuit[1], k.circuit[2], k.circuit[3]
    if RANK[circuit] > RANK[s.circuit] then
      s.circuit = circuit
      s.circuitUntil = circuitUntil
    elseif circuit == 'open' and s.circuit == 'open' and circuitUntil > s.circuitUntil then
      s.circuitUntil = circuitUntil
    end
    -- Failures seen locally and not yet in Redis's window join its newest bucket.
    for _ = s.failures + 1, failures do count(s, now, p.config.breakerWindowMs, 3) end
    local _, windowed = totals(s.win)
    s.failures = windowed
    dirty = true
  end
  -- Counters are cumulative per generation, so a sync that is retried adds nothing twice.
  for j, total in ipairs(k.counts) do
    local field = i .. ':' .. j
    local delta = total - (tonumber(redis.call('HGET', KEYS[1], field)) or 0)
    if delta ~= 0 then
      redis.call('HSET', KEYS[1], field, num(total))
      if j == 1 then
        s.leases = s.leases + delta
        dirty = true
      else
        redis.call('HINCRBY', K(i, 1), COUNTERS[j - 1], delta)
      end
    end
  end
  if dirty then save(K(i, 1), s) end
end
redis.call('PEXPIRE', KEYS[1], 86400000)
-- The index is rebuilt from these states by the next acquire.
redis.call('HDEL', ARGV[4], 'fp')

-- Leases still open on this replica count toward maxInflight again.
for _, a in ipairs(p.adopt) do
  if not redis.call('ZSCORE', K(a[1], 3), a[2]) then
    redis.call('ZADD', K(a[1], 2), num(now + ttl), a[2])
  end
end

local rows = {}
for i = 1, n do rows[i] = view(load(K(i, 1)), live(K(i, 2), now), K(i, 1)) end
return cjson.encode({num(now), rows, events})
`

/**
 * KEYS: state, leases, done of every key. ARGV: now. Returns `[now, rows]`.
 */
const stats = `${prelude}
local now = clock(ARGV[1])
local rows = {}
for i = 1, #KEYS / 3 do
  rows[i] = view(load(KEYS[3 * i - 2]), live(KEYS[3 * i - 1], now), KEYS[3 * i - 2])
end
return cjson.encode({num(now), rows})
`

/**
 * Extends this replica's open leases, and puts back any Redis lost (a restart between two
 * renewals) unless it was reported already. KEYS: the index's meta key.
 * ARGV: now, leaseTtlMs, the `{prefix}` tag, JSON `[[key index, key id, lease id], ...]`.
 * Returns `[now]`.
 */
const renew = `${prelude}
local now = clock(ARGV[1])
TAG = ARGV[3]
local expiry = num(now + tonumber(ARGV[2]))
for _, a in ipairs(cjson.decode(ARGV[4])) do
  if not redis.call('ZSCORE', TAG .. ':d:' .. a[2], a[3]) then
    redis.call('ZADD', TAG .. ':l:' .. a[2], expiry, a[3])
    redis.call('ZADD', rk('exp'), expiry, member(a[1], a[2]) .. '|' .. a[3])
  end
end
return cjson.encode({num(now)})
`

/** The scripts, by the name the pool gives them. */
export const luaScripts: Readonly<
  Record<'acquire' | 'index' | 'report' | 'commit' | 'toggle' | 'sync' | 'stats' | 'renew', string>
> = Object.freeze({ acquire, index, report, commit, toggle, sync, stats, renew })
