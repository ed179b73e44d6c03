/**
 * The Lua of the pool's index, included in every script (`scripts.ts`): what lets an acquire
 * touch only the keys it needs instead of reading every key's hash.
 *
 * Redis keys of the index (all under the pool's `{prefix}` hash tag, so one Cluster slot):
 * - `{prefix}:m` hash: `fp` (the fingerprint of the keys, their limits and weights, and the
 *   selection the index was built for; an acquire that sends another one rebuilds it),
 *   `sel`, `n` (the key count), `G` (weighted picks so far), `W` (the weights of the free
 *   keys), `classes` (the distinct weights, JSON).
 * - `{prefix}:c` hash: per member, `maxInflight,weight` (-1: no cap).
 * - `{prefix}:all` sorted set: every key's member, scored by its 1-based index.
 * - `{prefix}:free` sorted set: the keys an acquire may lease now (not held, cooling, open,
 *   at their cap or waiting on a probe), scored by index, or by
 *   `inflight * 2^20 + index` under least-inflight.
 * - `{prefix}:wake` sorted set: when each key's state next changes with time (a cooldown, an
 *   open circuit or an auth hold ends, a breaker bucket leaves the window, a stated budget
 *   resets). An acquire re-reads only the keys whose time came.
 * - `{prefix}:exp` sorted set: every open lease (`member|lease id`) by its expiry.
 * - `{prefix}:wc:<weight>` sorted sets (weighted): the free keys of one weight, scored by
 *   minus their running weight's offset: a key's running weight is `offset + weight * G`, so
 *   a pick updates two entries instead of every key's.
 *
 * A member is the key's 1-based index, zero-padded to 6 digits, `:`, and its id: members
 * sort by index.
 *
 * @module
 */

import { headroomClassMax } from '../key-pool/selection.js'

/** Lua functions, defined after `load`, `save` and `refresh`. */
export const indexLua = `
local TAG = ''
local B = 1048576
local function rk(suffix) return TAG .. ':' .. suffix end
local function member(i, id) return string.format('%06d', i) .. ':' .. id end
local function idOf(m) return string.sub(m, 8) end
local function indexOf(m) return tonumber(string.sub(m, 1, 6)) end
local function leaseOf(e) return string.match(e, '^(.*)|[^|]*$') end

-- The index's meta; \`text\` and \`decoded\`: a config the script already decoded, reused when
-- it is the one the index holds (one JSON decode less).
local function meta(text, decoded)
  local v = redis.call('HMGET', rk('m'), 'fp', 'sel', 'G', 'W', 'n', 'cfg')
  if not v[1] then return nil end
  local cfg = decoded
  if text == nil or v[6] ~= text then cfg = cjson.decode(v[6]) end
  return { fp = v[1], sel = v[2], G = tonumber(v[3]) or 0, W = tonumber(v[4]) or 0,
    n = tonumber(v[5]) or 0, cfg = cfg }
end

-- One key's state, its open leases (the expired ones dropped), its cap and weight.
-- \`s\`: the key's state as the script just saved it (not read again).
local function loadKey(i, id, now, s)
  local sk, lk = TAG .. ':s:' .. id, TAG .. ':l:' .. id
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', num(now))
  if s == nil then s = load(sk) end
  s.id, s.idx, s.stateKey, s.leasesKey = id, i, sk, lk
  s.inflight = redis.call('ZCARD', lk)
  local limits = redis.call('HGET', rk('c'), member(i, id))
  s.max, s.weight = -1, 1
  if limits then
    local comma = string.find(limits, ',', 1, true)
    s.max = tonumber(string.sub(limits, 1, comma - 1))
    s.weight = tonumber(string.sub(limits, comma + 1))
  end
  return s
end

-- Whether an acquire (excluding nothing) may lease the key now.
local function isFree(s, now)
  if s.disabled and (s.disabledUntil == 0 or s.disabledUntil > now) then return false end
  if s.cooldownUntil > now then return false end
  if s.circuit == 'open' and s.circuitUntil > now then return false end
  if s.max >= 0 and s.inflight >= s.max then return false end
  if s.circuit == 'half-open' and s.trial ~= '' then return false end
  if s.disabled and s.atrial ~= '' then return false end
  return true
end

-- One key's state, brought up to now: expired leases gone, an expired probe's slot freed,
-- the breaker window slid, an open circuit half-opened, past budgets forgotten.
local function evaluate(i, id, now, cfg, events, forget)
  local s = loadKey(i, id, now)
  local sk, lk = s.stateKey, s.leasesKey
  local changed = false
  if s.trial ~= '' and not redis.call('ZSCORE', lk, s.trial) then
    s.trial = ''
    changed = true
  end
  if s.atrial ~= '' and not redis.call('ZSCORE', lk, s.atrial) then
    s.atrial = ''
    changed = true
  end
  if refresh(s, now, cfg, events, i) then changed = true end
  -- As the memory pool: a free key's past budgets are forgotten when an acquire that does
  -- not exclude it looks at it (\`forget\`).
  if forget and isFree(s, now) and forgetPastBudgets(s, now, cfg.headroomHorizonMs) then
    changed = true
  end
  if changed then save(sk, s) end
  return s
end

-- When the key's state next changes with time alone (math.huge: never). A change already
-- due (an open circuit past its time, seen by a report) wakes the key at the next acquire.
local function wakeAt(s, now, cfg)
  local t = math.huge
  local function consider(x)
    if x ~= nil and x < t then t = x end
  end
  if s.cooldownUntil > now then consider(s.cooldownUntil) end
  if s.circuit == 'open' then consider(s.circuitUntil) end
  if s.disabled and s.disabledUntil > now then consider(s.disabledUntil) end
  if #s.win > 0 then
    consider(s.win[1][1] + cfg.breakerWindowMs / 10 + cfg.breakerWindowMs)
  end
  -- Budgets are forgotten (and refill probes end) only while the key is free.
  if isFree(s, now) then
    if s.rb ~= nil then consider(s.rb.untilMs) end
    if s.tb ~= nil then consider(s.tb.untilMs) end
    if s.rp ~= nil then consider(s.rpu) end
  end
  return t
end

-- When an out key's budgets refill: the later of their resets.
local function refillAt(s)
  if probing(s) then return s.rpu end
  return math.max(s.rb and s.rb.untilMs or 0, s.tb and s.tb.untilMs or 0)
end

-- headroom: the weight class of a free key (a power of two at or below its predicted
-- requests, or its predicted tokens / 1000 when it stated only tokens; 2^20 when it stated
-- nothing), or nil when it is predicted out for any request.
local function headroomClass(s)
  if probing(s) then return nil end
  local requests = predicted(s.rb, s.sr)
  local tokens = predicted(s.tb, s.st)
  if (requests ~= nil and requests < 1) or (tokens ~= nil and tokens < 1) then return nil end
  local score = requests
  if score == nil and tokens ~= nil then score = tokens / 1000 end
  if score == nil then return ${headroomClassMax} end
  local w = 1
  while w < ${headroomClassMax} and w * 2 <= score do w = w * 2 end
  return w
end

-- Puts an evaluated key where its state says: in or out of the free set, and its wake time.
local function place(s, now, cfg, M)
  if M == nil then return end
  local m = member(s.idx, s.id)
  local fk = rk('free')
  local was = redis.call('ZSCORE', fk, m) ~= false
  local free = isFree(s, now)
  if free then
    local score = s.idx
    if M.sel == 'least-inflight' then score = s.inflight * B + s.idx end
    redis.call('ZADD', fk, score, m)
  elseif was then
    redis.call('ZREM', fk, m)
  end
  if M.sel == 'weighted' or M.sel == 'headroom' then
    local w = nil
    if free then
      if M.sel == 'weighted' then w = s.weight else w = headroomClass(s) end
    end
    local old = tonumber(redis.call('HGET', rk('hw'), m))
    if w ~= old then
      if old ~= nil then
        local wk = rk('wc:' .. num(old))
        s.cw = -tonumber(redis.call('ZSCORE', wk, m)) + old * M.G
        redis.call('ZREM', wk, m)
        M.W = M.W - old
        if redis.call('HINCRBY', rk('cn'), num(old), -1) <= 0 then
          redis.call('HDEL', rk('cn'), num(old))
        end
      end
      if w ~= nil then
        redis.call('ZADD', rk('wc:' .. num(w)), num(w * M.G - s.cw), m)
        redis.call('HSET', rk('hw'), m, num(w))
        redis.call('HINCRBY', rk('cn'), num(w), 1)
        M.W = M.W + w
      else
        redis.call('HDEL', rk('hw'), m)
        redis.call('HSET', s.stateKey, 'cw', num(s.cw))
      end
      -- An acquire or a rebuild (\`M.defer\`) writes W once, at its end.
      if M.defer then M.dirtyW = true else redis.call('HSET', rk('m'), 'W', num(M.W)) end
    end
    -- headroom: \`out\` holds the free keys without a class, \`tk\` some of those with one, so
    -- a key was in \`out\` only if it was free without a class, in \`tk\` only with a class.
    if M.sel == 'headroom' and free and w == nil then
      redis.call('ZADD', rk('out'), num(refillAt(s)), m)
    elseif M.sel == 'headroom' and was and old == nil then
      redis.call('ZREM', rk('out'), m)
    end
    -- headroom: the candidates' predicted tokens, so a pick finds those short of its need.
    local tokens = predicted(s.tb, s.st)
    if M.sel == 'headroom' and w ~= nil and tokens ~= nil then
      redis.call('ZADD', rk('tk'), num(tokens), m)
    elseif M.sel == 'headroom' and old ~= nil then
      redis.call('ZREM', rk('tk'), m)
    end
  end
  local t = wakeAt(s, now, cfg)
  if t == math.huge then
    redis.call('ZREM', rk('wake'), m)
  else
    redis.call('ZADD', rk('wake'), num(t), m)
  end
  -- The change feed: other replicas learn the key's health (not its lease counts, which
  -- stats() reads) on their next acquire.
  local health = view(s, 0)
  health[7] = 0
  local row = cjson.encode(health)
  if redis.call('HGET', rk('rows'), m) ~= row then
    local v = redis.call('HINCRBY', rk('m'), 'V', 1)
    redis.call('ZADD', rk('chg'), v, m)
    redis.call('HSET', rk('rows'), m, row)
  end
end

-- The rows whose health changed after version \`since\` of epoch \`epoch\` (all rows from the
-- start when the index was rebuilt since), at most 128, oldest first: JSON texts
-- \`[index,row]\` (lease counts 0: not part of the feed), and the \`epoch:version\` to ask from
-- next.
local function feed(sinceArg)
  local v = redis.call('HMGET', rk('m'), 'epoch', 'V')
  local epoch = v[1] or ''
  local since = 0
  local colon = string.find(sinceArg, ':', 1, true)
  if colon and string.sub(sinceArg, 1, colon - 1) == epoch then
    since = tonumber(string.sub(sinceArg, colon + 1)) or 0
  end
  local got = redis.call('ZRANGEBYSCORE', rk('chg'), '(' .. since, '+inf', 'WITHSCORES',
    'LIMIT', 0, 128)
  if #got == 0 then return {}, epoch .. ':' .. since end
  local ms = {}
  for j = 1, #got, 2 do ms[#ms + 1] = got[j] end
  local rows = redis.call('HMGET', rk('rows'), unpack(ms))
  local out = {}
  for j, m in ipairs(ms) do
    if rows[j] then out[#out + 1] = '[' .. indexOf(m) .. ',' .. rows[j] .. ']' end
  end
  return out, epoch .. ':' .. got[#got]
end

-- A reply with the change feed's rows (already JSON) spliced in.
local function withFeed(head, sinceArg, tail)
  local rows, next = feed(sinceArg)
  return '[' .. head .. ',[' .. table.concat(rows, ',') .. '],' .. tail .. ',"' .. next .. '"]'
end

-- After a report, commit or toggle changed key i: its place in the index. Time's changes
-- (a circuit half-opening, the window sliding) wait for the next acquire, as in memory.
-- \`saved\`: the key's state the script just saved (\`save\`), so it is not read back.
local function reindex(i, id, now, cfgText, cfg, saved)
  local M = meta(cfgText, cfg)
  if M == nil then return end
  place(loadKey(i, id, now, saved), now, M.cfg, M)
end
`
