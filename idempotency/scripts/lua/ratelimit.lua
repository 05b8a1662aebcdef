-- Fixed-window rate limit, atomically (seed 2.1): count this request in its window.
--
-- KEYS[1]  the counter of one principal of one tenant (hash-tagged like every engine key)
-- ARGV[1]  window length in milliseconds
--
-- Returns {count, remaining_ms}: the window's count including this request, and how long until
-- the window ends (the caller's Retry-After). The caller compares count with the limit, so a
-- tenant's limit can change without touching the counters.
--
-- The expiry is set only when INCR created the counter: every later request of the window
-- leaves it alone, so the window never slides forward under steady traffic. A counter found
-- without an expiry (only possible if something outside this script wrote the key) would
-- block its principal for good, so it starts a new window instead.

local count = redis.call('INCR', KEYS[1])
local remaining
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  remaining = tonumber(ARGV[1])
else
  remaining = redis.call('PTTL', KEYS[1])
  if remaining < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    remaining = tonumber(ARGV[1])
  end
end
return {count, remaining}
