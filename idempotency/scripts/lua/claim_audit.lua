-- A claim that appends its own audit when it answers HIT: a replay served by Redis costs one
-- round trip instead of two (the claim, then the XADD of issue 14's durable audit).
--
-- RedisIdempotencyStore wraps the claim it runs (claim.lua, claim_token.lua + claim.lua, or a
-- stored version of either) in this file: the line "--[[CLAIM]]" below becomes its source.
-- Only on a single node or a shard, never on a Cluster: the node's audit stream is not in the
-- claim key's slot.
--
-- KEYS[1..n-1]   the wrapped claim's keys
-- KEYS[n]        the node's audit stream (idempotency/stores/audit_stream.py)
-- ARGV[1..m-c-1] the wrapped claim's arguments
-- ARGV[m-c]      the stream's approximate cap (XADD MAXLEN ~)
-- ARGV[m-c+1..m-1]  the audit event's fields and values, without the resource ("r")
-- ARGV[m]        c, the count of the audit arguments before it
--
-- Returns the wrapped claim's reply. On a HIT whose entry names its resource (the 'loc'
-- field finish.lua keeps: the answer's Location, "" for none) the event is appended to the
-- stream with that resource as "r", and the reply gets a last element "AUDITED". An entry
-- without 'loc' (finished before it was kept, or by a finish version that does not keep it) is
-- not appended: the caller appends it as before, resource included.

local audit_stream = KEYS[#KEYS]
local KEYS = {unpack(KEYS, 1, #KEYS - 1)}
local m = #ARGV
local c = tonumber(ARGV[m])
local audit = {unpack(ARGV, m - c, m - 1)}
local ARGV = {unpack(ARGV, 1, m - c - 1)}

local function claim(...)
--[[CLAIM]]
end

local reply = claim()
if reply[1] == 'HIT' then
  local resource = redis.call('HGET', KEYS[1], 'loc')
  if resource then
    redis.call('XADD', audit_stream, 'MAXLEN', '~', audit[1], '*', 'r', resource,
      unpack(audit, 2))
    reply[#reply + 1] = 'AUDITED'
  end
end
return reply
