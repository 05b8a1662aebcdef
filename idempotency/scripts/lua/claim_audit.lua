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
-- Returns the wrapped claim's reply. A HIT whose stored reply names its resource (the
-- "SL\1" prefix of RedisIdempotencyStore's packed replies, written by finish) is appended to
-- the stream with that resource as "r", and the reply gets a last element "AUDITED". A HIT
-- stored without the prefix (a reply finished before it existed) is not appended: the caller
-- appends it as before, resource included.

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
if reply[1] == 'HIT' and string.sub(reply[2], 1, 3) == 'SL\1' then
  local resource = string.sub(reply[2], 5, 4 + string.byte(reply[2], 4))
  redis.call('XADD', audit_stream, 'MAXLEN', '~', audit[1], '*', 'r', resource,
    unpack(audit, 2))
  reply[#reply + 1] = 'AUDITED'
end
return reply
