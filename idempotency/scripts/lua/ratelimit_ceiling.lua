-- Fixed-window rate limit of one principal under its tenant's ceiling, atomically, in one call.
--
-- KEYS[1]  the principal's counter    (both keys carry the same hash tag: one slot, one node)
-- KEYS[2]  the tenant-wide counter
-- ARGV[1]  window length in milliseconds
-- ARGV[2]  the principal's limit per window
-- ARGV[3]  this request's ceiling per window on the tenant counter (the tenant's ceiling, or
--          the share of it the caller may fill: requests with different ceilings share one
--          counter, so a smaller one is reached first)
--
-- Returns {refused_by, count, remaining_ms}: refused_by is 0 (allowed), 1 (the principal's
-- limit) or 2 (the tenant's ceiling); count and remaining_ms are those of the deciding counter
-- (for an allowed request, the principal's; for a ceiling refusal, the tenant counter as it
-- stands, not incremented).
--
-- A request refused by its principal's limit never reaches the tenant counter: one client in a
-- retry loop spends its own budget, not its neighbours'. A request the ceiling refuses is not
-- counted on the tenant counter either (read before INCR, in this one script, so nothing runs
-- between the check and the count): refused requests never push the counter past the ceiling,
-- which a caller with a larger ceiling would otherwise find already spent. It still counts on
-- its principal's counter. Windows behave as in ratelimit.lua: the expiry is set when INCR
-- creates a counter and never slides.

local function remaining_of(key, window_ms)
  local remaining = redis.call('PTTL', key)
  if remaining < 0 then
    redis.call('PEXPIRE', key, window_ms)
    remaining = window_ms
  end
  return remaining
end

local function count(key, window_ms)
  local n = redis.call('INCR', key)
  if n == 1 then
    redis.call('PEXPIRE', key, window_ms)
    return n, window_ms
  end
  return n, remaining_of(key, window_ms)
end

local window_ms = tonumber(ARGV[1])
local n, remaining = count(KEYS[1], window_ms)
if n > tonumber(ARGV[2]) then
  return {1, n, remaining}
end
local spent = tonumber(redis.call('GET', KEYS[2]) or '0')
if spent >= tonumber(ARGV[3]) then
  return {2, spent, remaining_of(KEYS[2], window_ms)}
end
count(KEYS[2], window_ms)
return {0, n, remaining}
