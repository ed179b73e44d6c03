/**
 * The bodies of the `acquire` and `index` scripts (`scripts.ts` puts its prelude before them).
 * An acquire reads the keys whose time came (`wake`, `exp`), picks from the free set by the
 * selection, and leases: its Redis work grows with the keys it touches, not with the pool.
 *
 * @module
 */

/**
 * KEYS: the index's meta, free, wake, exp and cursor keys (`index-lua.ts`).
 * ARGV: now (-1: Redis TIME), leaseTtlMs, lease id, selection, config (JSON), tokens needed,
 * the `{prefix}` tag, the index fingerprint, excluded members (JSON), the change feed's
 * `epoch:version` this replica saw last.
 * Returns `[['index']]` when the index must be (re)built first, else
 * `[[verdict, ...detail], now, [[index, row], ...] changed since, events, epoch:version]`:
 * `['leased', index, generation, probe, requests spent, tokens spent]`,
 * `['busy', retryInMs or -1]` (headroom: until the first refill when every free key is predicted out), `['cooling', retryInMs, rateLimited]` or
 * `['unavailable', reason, rejected indexes]`.
 */
export const acquireBody = `
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local leaseId = ARGV[3]
local cfg = cjson.decode(ARGV[5])
local need = tonumber(ARGV[6])
TAG = ARGV[7]
local M = meta(ARGV[5], cfg)
if M == nil or M.fp ~= ARGV[8] then return cjson.encode({{'index'}}) end
-- The meta's fields this acquire sets (\`looked\`: its time; weighted/headroom: \`G\`), in one
-- HSET at its end (no other script runs meanwhile).
local metaSet = {'looked', num(now)}
M.defer = true
local sel = M.sel
local excluded = {}
for _, m in ipairs(cjson.decode(ARGV[9])) do excluded[m] = true end
local events, touched = {}, {}
local fk = rk('free')

-- Leases that expired, and keys whose time came: only these are read.
local due, order = {}, {}
for _, e in ipairs(redis.call('ZRANGEBYSCORE', rk('exp'), '-inf', num(now))) do
  due[leaseOf(e)] = true
end
redis.call('ZREMRANGEBYSCORE', rk('exp'), '-inf', num(now))
for _, m in ipairs(redis.call('ZRANGEBYSCORE', rk('wake'), '-inf', num(now))) do due[m] = true end
for m in pairs(due) do order[#order + 1] = m end
table.sort(order)
local function touch(m)
  local s = touched[m]
  if s == nil then
    s = evaluate(indexOf(m), idOf(m), now, cfg, events, not excluded[m])
    touched[m] = s
  end
  return s
end
for _, m in ipairs(order) do place(touch(m), now, cfg, M) end

-- The first free member not excluded with a score in [lo, hi).
local function firstIn(lo, hi)
  local offset = 0
  while true do
    local got = redis.call('ZRANGEBYSCORE', fk, lo, '(' .. hi, 'LIMIT', offset, 8)
    for _, m in ipairs(got) do
      if not excluded[m] then return m end
    end
    if #got < 8 then return nil end
    offset = offset + 8
  end
end

local chosen, refillAtChosen
if sel == 'round-robin' or sel == 'least-inflight' then
  -- Round-robin order from the cursor; least-inflight takes the least busy in that order.
  local cursor = tonumber(redis.call('GET', rk('cursor'))) or 0
  local base = 0
  if sel == 'least-inflight' then
    local first = firstIn('-inf', 'inf')
    if first then base = math.floor(tonumber(redis.call('ZSCORE', fk, first)) / B) * B end
  end
  chosen = firstIn(num(base + cursor + 1), num(base + B)) or firstIn(num(base), num(base + cursor + 1))
  if chosen then redis.call('SET', rk('cursor'), indexOf(chosen) % M.n) end
elseif sel == 'fastest' then
  local ranks = {}
  for m in pairs(excluded) do
    local r = redis.call('ZRANK', fk, m)
    if r then ranks[#ranks + 1] = r end
  end
  table.sort(ranks)
  local candidates = redis.call('ZCARD', fk) - #ranks
  local function nth(r)
    for _, e in ipairs(ranks) do
      if e <= r then r = r + 1 end
    end
    return redis.call('ZRANGE', fk, r, r)[1]
  end
  if candidates == 1 then
    chosen = nth(0)
  elseif candidates > 1 then
    local picks = fastestDraw(candidates, rk('cursor'))
    local a, b = nth(picks[1]), nth(picks[2])
    if fasterThan(touch(b), touch(a), now, cfg) then chosen = b else chosen = a end
  end
else
  -- weighted, headroom: smooth weighted round-robin over the weight classes (index-lua.ts).
  local G = M.G + 1
  local classes = redis.call('HKEYS', rk('cn'))
  -- headroom: candidates short of the tokens this request needs are passed over (out).
  local skipped = {}
  if sel == 'headroom' then
    local short = redis.call('ZRANGEBYSCORE', rk('tk'), '-inf', '(' .. num(math.max(need, 1)))
    for _, m in ipairs(short) do
      if not excluded[m] then skipped[m] = true end
    end
  end
  local best, bestWeight, bestValue
  for _, w in ipairs(classes) do
    local wk = rk('wc:' .. w)
    local offset = 0
    local found = nil
    while found == nil do
      local got = redis.call('ZRANGE', wk, offset, offset + 7, 'WITHSCORES')
      for j = 1, #got, 2 do
        if not excluded[got[j]] and not skipped[got[j]] then
          found = { got[j], tonumber(got[j + 1]) }
          break
        end
      end
      if #got < 16 then break end
      offset = offset + 8
    end
    if found then
      local value = -found[2] + tonumber(w) * G
      if best == nil or value > bestValue or (value == bestValue and found[1] < best) then
        best, bestValue, bestWeight = found[1], value, w
      end
    end
  end
  if best then
    local total = M.W
    local function pass(m)
      local w = tonumber(redis.call('HGET', rk('hw'), m))
      if w then
        redis.call('ZINCRBY', rk('wc:' .. num(w)), num(w), m)
        total = total - w
      end
    end
    for m in pairs(excluded) do pass(m) end
    for m in pairs(skipped) do pass(m) end
    redis.call('ZINCRBY', rk('wc:' .. bestWeight), num(total), best)
    metaSet[3], metaSet[4] = 'G', num(G)
    M.G = G
    chosen = best
  elseif sel == 'headroom' then
    -- Every free key is predicted out: the one that refills first serves (or is waited for).
    local at = math.huge
    local function consider(m, refill)
      if chosen == nil or refill < at or (refill == at and m < chosen) then
        chosen, at = m, refill
      end
    end
    for m in pairs(skipped) do consider(m, refillAt(touch(m))) end
    local offset = 0
    while true do
      local got = redis.call('ZRANGE', rk('out'), offset, offset + 7, 'WITHSCORES')
      local found = false
      for j = 1, #got, 2 do
        if not excluded[got[j]] then
          consider(got[j], tonumber(got[j + 1]))
          found = true
          break
        end
      end
      if found or #got < 16 then break end
      offset = offset + 8
    end
    if chosen then refillAtChosen = at end
  end
end

-- Why no key can be leased now, from every key not excluded (this reads the whole pool).
local function notFree()
  local why = { busy = false, cooling = false, rateLimited = true, all = true, rejected = {} }
  for _, m in ipairs(redis.call('ZRANGE', rk('all'), 0, -1)) do
    local s = touch(m)
    place(s, now, cfg, M)
    if not s.disabled then why.all = false end
    if s.disabled and s.disabledUntil > 0 then why.rejected[#why.rejected + 1] = s.idx end
    if not excluded[m] and not (s.disabled and s.disabledUntil == 0) then
      local wait = nil
      local cooldown = math.max(0, s.cooldownUntil - now)
      local open = 0
      if s.circuit == 'open' then open = math.max(0, s.circuitUntil - now) end
      if s.disabled and s.disabledUntil > now then
        wait = s.disabledUntil - now
        why.rateLimited = false
      elseif cooldown > 0 or open > 0 then
        wait = math.max(cooldown, open)
        why.cooling = true
        if open > 0 then why.rateLimited = false end
      else
        why.busy = true
      end
      if wait ~= nil and (why.earliest == nil or wait < why.earliest) then why.earliest = wait end
    end
  end
  return why
end

local verdict
if refillAtChosen ~= nil and refillAtChosen > now then
  -- headroom, every free key predicted out: busy until the first refill, never sent to.
  verdict = {'busy', num(refillAtChosen - now)}
  chosen = nil
end
if chosen then
  local s = touch(chosen)
  redis.call('ZADD', s.leasesKey, num(now + ttl), leaseId)
  redis.call('ZADD', rk('exp'), num(now + ttl), chosen .. '|' .. leaseId)
  s.inflight = s.inflight + 1
  s.leases = s.leases + 1
  s.sr = s.sr + 1
  s.st = s.st + need
  count(s, now, cfg.breakerWindowMs, 2)
  local probe = 0
  if s.circuit == 'half-open' then
    s.trial = leaseId
    probe = 1
  end
  if s.disabled then
    s.atrial = leaseId
    probe = 1
  end
  save(s.stateKey, s)
  place(s, now, cfg, M)
  verdict = {'leased', s.idx, s.gen, probe, num(s.sr), num(s.st)}
elseif verdict == nil then
  local why = notFree()
  if why.busy then
    verdict = {'busy', why.earliest and num(why.earliest) or -1}
  elseif why.cooling then
    verdict = {'cooling', num(why.earliest), why.rateLimited and 1 or 0}
  elseif why.all then
    verdict = {'unavailable', 'all-disabled', why.rejected}
  else
    verdict = {'unavailable', 'all-excluded'}
  end
end

if M.dirtyW then
  metaSet[#metaSet + 1] = 'W'
  metaSet[#metaSet + 1] = num(M.W)
end
redis.call('HSET', rk('m'), unpack(metaSet))
return withFeed(cjson.encode(verdict) .. ',"' .. num(now) .. '"', ARGV[10], cjson.encode(events))
`

/**
 * (Re)builds the index from the keys' states: run when an acquire finds no index (a fresh or
 * restarted Redis, after a resync) or one built for other keys, limits or selection.
 * KEYS: the index's meta key. ARGV: now, the `{prefix}` tag, the fingerprint, selection,
 * config (JSON), keys (JSON `[[id, maxInflight (-1: none), weight], ...]`), 1 to build only
 * when Redis has no index for this fingerprint.
 * Returns `[now, events]` (the rows come with the next acquire's change feed).
 */
export const indexBody = `
local now = clock(ARGV[1])
TAG = ARGV[2]
local cfg = cjson.decode(ARGV[5])
local list = cjson.decode(ARGV[6])
local old = meta()
if ARGV[7] == '1' and old ~= nil and old.fp == ARGV[3] then return cjson.encode({num(now), {}}) end
local G = 0
if old ~= nil then G = old.G end
-- Running weights held as offsets go back into their keys' hashes.
local drop = {rk('free'), rk('wake'), rk('exp'), rk('all'), rk('c'), rk('chg'), rk('rows'),
  rk('hw'), rk('cn'), rk('out'), rk('tk')}
for _, w in ipairs(redis.call('HKEYS', rk('cn'))) do drop[#drop + 1] = rk('wc:' .. w) end
local held = redis.call('HGETALL', rk('hw'))
for j = 1, #held, 2 do
  local m, w = held[j], tonumber(held[j + 1])
  local score = redis.call('ZSCORE', rk('wc:' .. num(w)), m)
  if score then
    redis.call('HSET', TAG .. ':s:' .. idOf(m), 'cw', num(-tonumber(score) + w * G))
  end
end
redis.call('DEL', unpack(drop))
for i, k in ipairs(list) do
  local m = member(i, k[1])
  redis.call('ZADD', rk('all'), i, m)
  redis.call('HSET', rk('c'), m, num(k[2]) .. ',' .. num(k[3]))
  local leases = redis.call('ZRANGE', TAG .. ':l:' .. k[1], 0, -1, 'WITHSCORES')
  for j = 1, #leases, 2 do redis.call('ZADD', rk('exp'), leases[j + 1], m .. '|' .. leases[j]) end
end
local t = redis.call('TIME')
redis.call('HSET', rk('m'), 'epoch', t[1] .. '.' .. t[2], 'V', 0, 'fp', ARGV[3], 'sel', ARGV[4], 'G', num(G), 'W', '0', 'n', #list,
  'cfg', ARGV[5])
local M = meta()
M.defer = true
local events = {}
for i, k in ipairs(list) do place(evaluate(i, k[1], now, cfg, events, false), now, cfg, M) end
if M.dirtyW then redis.call('HSET', rk('m'), 'W', num(M.W)) end
return cjson.encode({num(now), events})
`
