-- Fixed-window rate limit of one principal under its tenant's ceiling, atomically, in one call.
--
-- KEYS[1]  the principal's counter    (both keys carry the same hash tag: one slot, one node)
-- KEYS[2]  the tenant-wide counter
-- ARGV[1]  window length in milliseconds
-- ARGV[2]  the principal's limit per window
-- ARGV[3]  the tenant's ceiling per window
--
-- Returns {refused_by, count, remaining_ms}: refused_by is 0 (allowed), 1 (the principal's
-- limit) or 2 (the tenant's ceiling); count and remaining_ms are those of the deciding counter
-- (for an allowed request, the principal's).
--
-- A request refused by its principal's limit never reaches the tenant counter: one client in a
-- retry loop spends its own budget, not its neighbours'. Windows behave as in ratelimit.lua:
-- the expiry is set when INCR creates a counter and never slides.

local function count(key, window_ms)
  local n = redis.call('INCR', key)
  if n == 1 then
    redis.call('PEXPIRE', key, window_ms)
    return n, window_ms
  end
  local remaining = redis.call('PTTL', key)
  if remaining < 0 then
    redis.call('PEXPIRE', key, window_ms)
    remaining = window_ms
  end
  return n, remaining
end

local window_ms = tonumber(ARGV[1])
local n, remaining = count(KEYS[1], window_ms)
if n > tonumber(ARGV[2]) then
  return {1, n, remaining}
end
local m, tenant_remaining = count(KEYS[2], window_ms)
if m > tonumber(ARGV[3]) then
  return {2, m, tenant_remaining}
end
return {0, n, remaining}
