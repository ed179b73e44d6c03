/**
 * The Lua scripts of the Redis key pool. Each one runs atomically inside Redis, so replicas
 * never lease a key past its `maxInflight` or lose a cooldown to a race. They mirror
 * `record`, `waitFor` and `pick` of the memory pool line for line.
 *
 * Layout of one key's state (all keys of a pool share the `{prefix}` hash tag, so a
 * script's keys live in one Redis Cluster slot):
 * - `{prefix}:s:<id>` hash: `disabled`, `cooldownUntil`, `failures`, `circuit`,
 *   `circuitUntil`, `trial` (lease id of a half-open trial), `cw` (weighted selection),
 *   `leases`, and one `o:<outcome>` counter per outcome kind.
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

local OUTCOMES = {'success', 'rate-limited', 'auth-failed', 'server-error', 'overloaded',
  'protocol-fault', 'client-gone', 'rejected'}
local COUNTERS = {}
for j, kind in ipairs(OUTCOMES) do COUNTERS[j] = 'o:' .. kind end

local function load(key)
  local v = redis.call('HMGET', key, 'disabled', 'cooldownUntil', 'failures', 'circuit',
    'circuitUntil', 'trial', 'cw', 'leases')
  return {
    disabled = v[1] == '1',
    cooldownUntil = tonumber(v[2]) or 0,
    failures = tonumber(v[3]) or 0,
    circuit = v[4] or 'closed',
    circuitUntil = tonumber(v[5]) or 0,
    trial = v[6] or '',
    cw = tonumber(v[7]) or 0,
    leases = tonumber(v[8]) or 0,
  }
end

local function save(key, s)
  redis.call('HSET', key, 'disabled', s.disabled and '1' or '0',
    'cooldownUntil', num(s.cooldownUntil), 'failures', num(s.failures), 'circuit', s.circuit,
    'circuitUntil', num(s.circuitUntil), 'trial', s.trial, 'cw', num(s.cw),
    'leases', num(s.leases))
end

local function live(leasesKey, now)
  return redis.call('ZCOUNT', leasesKey, '(' .. num(now), '+inf')
end

-- One key as the client caches it; with its outcome counters when stateKey is given.
local function view(s, inflight, stateKey)
  local row = {s.disabled and 1 or 0, num(s.cooldownUntil), s.failures, s.circuit,
    num(s.circuitUntil), inflight, s.leases}
  if stateKey then
    local counts = redis.call('HMGET', stateKey, unpack(COUNTERS))
    local out = {}
    for j = 1, #COUNTERS do out[j] = tonumber(counts[j]) or 0 end
    row[8] = out
  end
  return row
end

-- The memory pool's record(): what an outcome does to its key.
local function record(stateKey, s, kind, retryAfterMs, now, cfg)
  redis.call('HINCRBY', stateKey, 'o:' .. kind, 1)
  local trial = s.trial ~= ''
  s.trial = ''
  if kind == 'success' or kind == 'rejected' then
    s.failures = 0
    s.circuit = 'closed'
  elseif kind == 'rate-limited' then
    s.cooldownUntil = math.max(s.cooldownUntil, now + (retryAfterMs or cfg.defaultCooldownMs))
  elseif kind == 'auth-failed' then
    s.disabled = true
  elseif kind == 'server-error' then
    s.failures = s.failures + 1
    if trial or s.failures >= cfg.failureThreshold then
      s.circuit = 'open'
      s.circuitUntil = now + cfg.circuitOpenMs
    end
  end
  save(stateKey, s)
end
`

/**
 * KEYS: cursor, then state, leases, done of every key.
 * ARGV: now (-1: Redis TIME), leaseTtlMs, lease id, selection, then per key: excluded (1/0),
 * maxInflight (-1: none), weight.
 * Returns `[[verdict, detail], now, rows]`.
 */
const acquire = `${prelude}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local leaseId = ARGV[3]
local selection = ARGV[4]
local n = (#KEYS - 1) / 3
local keys = {}
local usable = {}
local candidates, enabled, earliest = 0, 0, nil
for i = 1, n do
  local sk, lk, dk = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', num(now))
  redis.call('ZREMRANGEBYSCORE', dk, '-inf', num(now))
  local s = load(sk)
  s.stateKey, s.leasesKey = sk, lk
  s.inflight = redis.call('ZCARD', lk)
  local changed = false
  -- A trial whose lease expired (its replica crashed) no longer holds the half-open slot.
  if s.trial ~= '' and not redis.call('ZSCORE', lk, s.trial) then
    s.trial = ''
    changed = true
  end
  if s.circuit == 'open' and s.circuitUntil <= now then
    s.circuit = 'half-open'
    changed = true
  end
  if changed then save(sk, s) end
  local a = 4 + 3 * (i - 1)
  s.max = tonumber(ARGV[a + 2])
  s.weight = tonumber(ARGV[a + 3])
  if not s.disabled then enabled = enabled + 1 end
  if ARGV[a + 1] ~= '1' and not s.disabled then
    local wait = math.max(0, s.cooldownUntil - now)
    if s.circuit == 'open' then wait = math.max(wait, s.circuitUntil - now) end
    if s.circuit == 'half-open' and s.trial ~= '' then wait = math.max(wait, 1) end
    if s.max >= 0 and s.inflight >= s.max then wait = math.max(wait, 1) end
    candidates = candidates + 1
    if wait == 0 then
      usable[#usable + 1] = i
    elseif earliest == nil or wait < earliest then
      earliest = wait
    end
  end
  keys[i] = s
end

local verdict
if #usable > 0 then
  local chosen = usable[1]
  if selection == 'weighted' then
    local total = 0
    for _, i in ipairs(usable) do
      local s = keys[i]
      s.cw = s.cw + s.weight
      total = total + s.weight
      if s.cw > keys[chosen].cw then chosen = i end
    end
    keys[chosen].cw = keys[chosen].cw - total
    for _, i in ipairs(usable) do
      if i ~= chosen then redis.call('HSET', keys[i].stateKey, 'cw', num(keys[i].cw)) end
    end
  else
    -- Round-robin order from the cursor; least-inflight takes the least busy in that order.
    local cursor = tonumber(redis.call('GET', KEYS[1])) or 0
    local best
    for _, i in ipairs(usable) do
      local order = (i - 1 - cursor) % n
      local busy = selection == 'least-inflight' and keys[i].inflight or 0
      if best == nil or busy < best.busy or (busy == best.busy and order < best.order) then
        best = { index = i, order = order, busy = busy }
      end
    end
    chosen = best.index
    redis.call('SET', KEYS[1], chosen % n)
  end
  local s = keys[chosen]
  redis.call('ZADD', s.leasesKey, num(now + ttl), leaseId)
  s.inflight = s.inflight + 1
  s.leases = s.leases + 1
  if s.circuit == 'half-open' then s.trial = leaseId end
  save(s.stateKey, s)
  verdict = {'leased', chosen}
elseif candidates > 0 then
  verdict = {'cooling', num(earliest)}
elseif enabled == 0 then
  verdict = {'unavailable', 'all-disabled'}
else
  verdict = {'unavailable', 'all-excluded'}
end

local rows = {}
for i = 1, n do rows[i] = view(keys[i], keys[i].inflight) end
return cjson.encode({verdict, num(now), rows})
`

/**
 * KEYS: state, leases, done of the leased key.
 * ARGV: now, leaseTtlMs, lease id, outcome kind, retryAfterMs ('' when none),
 * defaultCooldownMs, failureThreshold, circuitOpenMs.
 * Returns `[applied (1/0), now, row]`.
 */
const report = `${prelude}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local leaseId = ARGV[3]
local applied = 0
local s = load(KEYS[1])
if not redis.call('ZSCORE', KEYS[3], leaseId) then
  redis.call('ZREM', KEYS[2], leaseId)
  redis.call('ZADD', KEYS[3], num(now + ttl), leaseId)
  record(KEYS[1], s, ARGV[4], tonumber(ARGV[5]), now, {
    defaultCooldownMs = tonumber(ARGV[6]),
    failureThreshold = tonumber(ARGV[7]),
    circuitOpenMs = tonumber(ARGV[8]),
  })
  applied = 1
end
return cjson.encode({applied, num(now), view(s, live(KEYS[2], now), KEYS[1])})
`

/**
 * Pushes a replica's local state back after an outage (or seeds `initialState`).
 * KEYS: this generation's bookkeeping hash, then state, leases, done of every key.
 * ARGV: now, leaseTtlMs, payload (JSON, see `SyncPayload`).
 * Returns `[now, rows]` (rows with outcome counters).
 */
const sync = `${prelude}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local p = cjson.decode(ARGV[3])
local n = (#KEYS - 1) / 3
local function K(i, j) return KEYS[1 + 3 * (i - 1) + j] end
local RANK = { closed = 0, ['half-open'] = 1, open = 2 }

-- Seed keys Redis does not know (a fresh or restarted Redis, or initialState).
for i = 1, n do
  local seed = p.keys[i].seed
  if seed and redis.call('EXISTS', K(i, 1)) == 0 then
    save(K(i, 1), { disabled = seed[1] == 1, cooldownUntil = seed[2], failures = seed[3],
      circuit = seed[4], circuitUntil = seed[5], trial = '', cw = 0, leases = 0 })
  end
end

-- Leases whose outcome was already folded into the local state, and leases of acquires
-- that timed out: free their slots.
for _, id in ipairs(p.release) do
  for i = 1, n do
    redis.call('ZREM', K(i, 2), id)
    if redis.call('HGET', K(i, 1), 'trial') == id then redis.call('HSET', K(i, 1), 'trial', '') end
  end
end

-- Outcomes of Redis leases reported during the outage, at the time they happened.
for _, r in ipairs(p.replay) do
  if not redis.call('ZSCORE', K(r.key, 3), r.lease) then
    redis.call('ZREM', K(r.key, 2), r.lease)
    redis.call('ZADD', K(r.key, 3), num(now + ttl), r.lease)
    record(K(r.key, 1), load(K(r.key, 1)), r.kind, r.retryAfterMs, r.at, p.config)
  end
end

-- Merge toward caution: a disable/enable done during the outage wins, cooldowns take the
-- later end, circuits the more open state and the larger failure count.
for i = 1, n do
  local k = p.keys[i]
  local s = load(K(i, 1))
  local dirty = false
  if k.disabled ~= nil then
    s.disabled = k.disabled
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
    s.failures = math.max(s.failures, failures)
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

-- Leases still open on this replica count toward maxInflight again.
for _, a in ipairs(p.adopt) do
  if not redis.call('ZSCORE', K(a[1], 3), a[2]) then
    redis.call('ZADD', K(a[1], 2), num(now + ttl), a[2])
  end
end

local rows = {}
for i = 1, n do rows[i] = view(load(K(i, 1)), live(K(i, 2), now), K(i, 1)) end
return cjson.encode({num(now), rows})
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
 * renewals) unless it was reported already. KEYS: state, leases, done of every key.
 * ARGV: now, leaseTtlMs, JSON `[[key index, lease id], ...]`. Returns `[now]`.
 */
const renew = `${prelude}
local now = clock(ARGV[1])
local expiry = num(now + tonumber(ARGV[2]))
for _, a in ipairs(cjson.decode(ARGV[3])) do
  if not redis.call('ZSCORE', KEYS[3 * a[1]], a[2]) then
    redis.call('ZADD', KEYS[3 * a[1] - 1], expiry, a[2])
  end
end
return cjson.encode({num(now)})
`

/** The scripts, by the name the pool gives them. */
export const luaScripts: Readonly<
  Record<'acquire' | 'report' | 'sync' | 'stats' | 'renew', string>
> = Object.freeze({ acquire, report, sync, stats, renew })
