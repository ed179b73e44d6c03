/**
 * The Lua half of key selection, included in the pool's scripts (`scripts.ts`): the memory
 * pool's `key-pool/selection.ts` (headroom budgets, time to first output, the draws of
 * `fastest`, smooth weighted round-robin) and its rate-limit cooldown rule
 * (`rateLimitCooldown` of `key-pool/key-health.ts`), operation for operation, so both pools
 * pick the same key from the same state.
 *
 * Fields of a key's state hash used here: `rb` and `tb` (the request and token budgets the
 * headers last stated, `left,base,until`, removed once `until` passes), `sr` and `st` (the
 * requests and tokens leased so far), `lat` and `latAt` (the decaying time to first output
 * and when it was sampled), `strikes` (bare 429s since the last success).
 *
 * @module
 */

import {
  fastestInflightPenalty,
  latencyAlpha,
  latencyForgetHalfLives,
} from '../key-pool/selection.js'

/** Lua functions, defined after `num`, before `load` and `record`. */
export const selectionLua = `
local function decodeBudget(text)
  if not text or text == '' then return nil end
  local b = {}
  for field in string.gmatch(text, '[^,]+') do b[#b + 1] = tonumber(field) end
  return { left = b[1], base = b[2], untilMs = b[3] }
end

local function encodeBudget(b)
  if b == nil then return '' end
  return num(b.left) .. ',' .. num(b.base) .. ',' .. num(b.untilMs)
end

-- forgetPastBudgets(): a statement whose reset passed leaves the headroom unknown again, and
-- the key's next lease is a refill probe: out until it reports, at most horizonMs.
local function forgetPastBudgets(s, now, horizonMs)
  local changed = false
  if s.rp ~= nil and s.rpu <= now then
    s.rp = nil
    changed = true
  end
  local forgot = false
  if s.rb ~= nil and s.rb.untilMs <= now then
    s.rb = nil
    forgot = true
  end
  if s.tb ~= nil and s.tb.untilMs <= now then
    s.tb = nil
    forgot = true
  end
  if forgot then
    s.rp = s.sr
    s.rpu = now + horizonMs
    changed = true
  end
  return changed
end

-- probeReturned(): the refill probe reported; the key's headroom is as it states.
local function probeReturned(s, spentRequests)
  if s.rp ~= nil and spentRequests ~= nil and spentRequests > s.rp then s.rp = nil end
end

-- Whether the key's refill probe is out (the key waits for its report).
local function probing(s)
  return s.rp ~= nil and s.sr > s.rp
end

local function predicted(b, spent)
  if b == nil then return nil end
  return b.left - (spent - b.base)
end

-- headroomOf(): the key's score for a request of need tokens, and whether it is out.
local function headroomOf(s, need)
  if probing(s) then return 0, true end
  local requests = predicted(s.rb, s.sr)
  local tokens = predicted(s.tb, s.st)
  local out = (requests ~= nil and requests < 1) or (tokens ~= nil and tokens < math.max(need, 1))
  local score = math.huge
  if requests ~= nil then score = requests end
  if tokens ~= nil then score = math.min(score, tokens / math.max(need, 1)) end
  return score, out
end

local function nextDraw(seed)
  return math.fmod(seed * 48271, 2147483647)
end

-- fastest(): the two draws (0-based positions among count usable keys), power of two choices.
local function fastestDraw(count, cursorKey)
  local seed = nextDraw(tonumber(redis.call('GET', cursorKey)) or 1)
  local first = math.fmod(seed, count)
  seed = nextDraw(seed)
  local second = math.fmod(first + 1 + math.fmod(seed, count - 1), count)
  redis.call('SET', cursorKey, num(seed))
  return {first, second}
end

-- fastest(): whether b's expected latency times (1 + open leases / 8) is below a's, or
-- equal with fewer open leases.
local function fasterThan(b, a, now, cfg)
  local function cost(s)
    local expected = 0
    local age = math.max(0, now - s.latAt)
    if s.lat ~= nil and age < ${latencyForgetHalfLives} * cfg.latencyHalfLifeMs then
      expected = (s.lat * cfg.latencyHalfLifeMs) / (cfg.latencyHalfLifeMs + age)
    end
    return expected * (1 + s.inflight * ${fastestInflightPenalty})
  end
  local cb, ca = cost(b), cost(a)
  return cb < ca or (cb == ca and b.inflight < a.inflight)
end

local function given(x)
  if x ~= nil and x == x and x >= 0 and x ~= math.huge then return x end
  return nil
end

-- learnHeadroom(): a statement counted from its lease's spent counter; older ones lose.
local function budgetFrom(current, left, resetMs, base, now, horizonMs)
  if given(left) == nil then return current end
  if current ~= nil and current.base > base then return current end
  local reset = horizonMs
  if given(resetMs) ~= nil then reset = math.min(resetMs, horizonMs) end
  return { left = left, base = base, untilMs = now + reset }
end

local function learnHeadroom(s, h, now, cfg)
  if h == nil then return end
  s.rb = budgetFrom(s.rb, h.requestsRemaining, h.requestsResetMs, h.sr, now, cfg.headroomHorizonMs)
  s.tb = budgetFrom(s.tb, h.tokensRemaining, h.tokensResetMs, h.st, now, cfg.headroomHorizonMs)
end

-- learnLatency(): a committed lease's time to first output joins the decaying average.
local function learnLatency(s, sampleMs, now)
  local sample = math.max(0, sampleMs)
  if s.lat == nil then s.lat = sample else s.lat = s.lat + ${latencyAlpha} * (sample - s.lat) end
  s.latAt = now
end

-- rateLimitCooldown(): the wait given (or a spent budget's reset), floored; bare 429s back off.
local function rateLimitCooldown(s, retryAfterMs, h, cfg)
  local wait = given(retryAfterMs)
  if wait == nil and h ~= nil then
    local function take(remaining, resetMs)
      if given(resetMs) ~= nil and given(remaining) ~= nil and remaining < 1 then
        wait = math.max(wait or 0, resetMs)
      end
    end
    take(h.requestsRemaining, h.requestsResetMs)
    take(h.tokensRemaining, h.tokensResetMs)
  end
  if wait == nil then
    s.strikes = s.strikes + 1
    wait = math.min(cfg.minCooldownMs * 2 ^ math.min(s.strikes - 1, 30), cfg.defaultCooldownMs)
  else
    wait = math.max(wait, cfg.minCooldownMs)
  end
  return math.min(wait, cfg.maxCooldownMs)
end
`
