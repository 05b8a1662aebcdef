-- wrk script for bench/http_load.py: POST /api/v1/orders/ with Idempotency-Keys.
--
--   wrk -t2 -c16 -d15s -s bench/wrk/orders.lua http://127.0.0.1:PORT -- MODE PREFIX CONFIG OUT [KEYS] [PATH]
--
-- MODE   create  every request a new key: PREFIX-<thread>-<counter>
--        replay  cycle over the keys in KEYS (created beforehand): every answer should be a HIT
--        mixed   per 10 requests of a thread: 8 new keys, 1 concurrent duplicate (the key just
--                sent goes out again at once on the thread's next free connection) and 1 retry
--                of an earlier key of this thread
--        plain   POST PATH (a benchmark endpoint, bench/plain/) with a 3-field body and a new
--                key per request, no credentials
-- CONFIG one tenant per line: "<dish id>,<dish id>,... <session token of d0> <of d1> ..."
-- KEYS   one key per line: "<key> <tenant index> <diner> <dish id>" (1-based tenant index)
-- OUT    done() writes a JSON summary there, and for mixed mode OUT .. ".acks": one line
--        "<key> <order id> <status> <result>" per 2xx answer the client saw
--
-- The request's "note" is its key, so a 2xx body (first execution or byte-for-byte replay)
-- says which key it answers, whichever connection it came back on.

local threads = {}

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

local function read_lines(path)
   local lines = {}
   for line in io.lines(path) do
      if line ~= "" then table.insert(lines, line) end
   end
   return lines
end

local function split(s, sep)
   local out = {}
   for part in string.gmatch(s, "([^" .. sep .. "]+)") do table.insert(out, part) end
   return out
end

function init(args)
   mode, prefix, config_path, out_path, keys_path = args[1], args[2], args[3], args[4], args[5]
   plain_path = args[6]
   tenants = {}
   for _, line in ipairs(read_lines(config_path)) do
      local f = split(line, " ")
      -- "<dish ids> <token of d0> <token of d1> ...": diner dN acts with its own session
      local tokens = {}
      for i = 2, #f do table.insert(tokens, f[i]) end
      table.insert(tenants, { dishes = split(f[1], ","), tokens = tokens })
   end
   replay_keys = {}
   if mode == "replay" then
      for _, line in ipairs(read_lines(keys_path)) do
         local f = split(line, " ")
         table.insert(replay_keys, { key = f[1], tenant = tonumber(f[2]), diner = f[3], dish = f[4] })
      end
   end
   math.randomseed(1000 + id)
   counter = 0
   -- per-thread counts, collected by done()
   statuses = {}     -- "201" -> n
   results = {}      -- X-Idempotent-Result value ("-" when absent) -> n
   non2xx = 0
   sent_new, sent_twin, sent_retry, twin_in_flight = 0, 0, 0, 0
   acks = {}         -- mixed: "<key> <id> <status> <result>" per 2xx
   acked = {}        -- mixed: key -> true once a 2xx for it came back
   sent = {}         -- mixed: keys of this thread, oldest first
   pending_twin = nil
end

local function order(key, tenant_index, diner, dish)
   local t = tenants[tenant_index]
   local body = '{"items":[{"dish_id":' .. dish .. ',"quantity":1}],'
      .. '"payment_method":"card","note":"' .. key .. '"}'
   return wrk.format("POST", "/api/v1/orders/", {
      ["Authorization"] = "Bearer " .. t.tokens[tonumber(diner:sub(2)) + 1],
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
   }, body)
end

-- A new key and the tenant, diner and dish that go with it: tenants in turn, a random dish of
-- the tenant's menu. (Picking dishes in lockstep would make the two wrk threads update the
-- same stock rows at the same moment: lock waits that measure the load pattern, not the app.)
local function new_op()
   counter = counter + 1
   local ti = ((counter + id) % #tenants) + 1
   local dishes = tenants[ti].dishes
   return {
      key = prefix .. "-" .. id .. "-" .. counter,
      tenant = ti,
      diner = "d" .. ((2 * counter + id) % 32),
      dish = dishes[math.random(1, #dishes)],
   }
end

local function send(op) return order(op.key, op.tenant, op.diner, op.dish) end

local function plain()
   counter = counter + 1
   local key = prefix .. "-" .. id .. "-" .. counter
   local body = '{"name":"' .. key .. '","quantity":' .. (counter % 100 + 1) .. ',"note":"bench"}'
   return wrk.format("POST", plain_path, {
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
   }, body)
end

function request()
   if mode == "plain" then
      sent_new = sent_new + 1
      return plain()
   end
   if mode == "replay" then
      counter = counter + 1
      local op = replay_keys[((id * 7919 + counter) % #replay_keys) + 1]
      return send(op)
   end
   if mode == "create" then
      sent_new = sent_new + 1
      return send(new_op())
   end
   -- mixed
   if pending_twin ~= nil then
      local op = pending_twin
      pending_twin = nil
      sent_twin = sent_twin + 1
      if not acked[op.key] then twin_in_flight = twin_in_flight + 1 end
      return send(op)
   end
   local slot = (sent_new + sent_twin + sent_retry) % 10
   if slot == 9 and #sent > 16 then
      sent_retry = sent_retry + 1
      return send(sent[math.random(1, #sent - 8)])
   end
   local op = new_op()
   sent_new = sent_new + 1
   table.insert(sent, op)
   if slot == 0 then pending_twin = op end
   return send(op)
end

function response(status, headers, body)
   local s = tostring(status)
   statuses[s] = (statuses[s] or 0) + 1
   local result = headers["X-Idempotent-Result"] or headers["x-idempotent-result"] or "-"
   results[result] = (results[result] or 0) + 1
   if status < 200 or status > 299 then
      non2xx = non2xx + 1
      return
   end
   if mode == "mixed" then
      local key = string.match(body, '"note":"([^"]*)"')
      local order_id = string.match(body, '"id":"(%d+)"')
      if key ~= nil then
         acked[key] = true
         table.insert(acks, key .. " " .. (order_id or "-") .. " " .. s .. " " .. result)
      end
   end
end

local function json_counts(t)
   local parts = {}
   for k, v in pairs(t) do table.insert(parts, string.format('"%s":%d', k, v)) end
   return "{" .. table.concat(parts, ",") .. "}"
end

local function add_into(total, t)
   for k, v in pairs(t) do total[k] = (total[k] or 0) + v end
end

-- Percentiles (microseconds) at 1..99, 99.5 and 99.9: enough to merge several runs of a case.
local GRID = {}
for p = 1, 99 do table.insert(GRID, p) end
table.insert(GRID, 99.5)
table.insert(GRID, 99.9)

function done(summary, latency, requests)
   local all_statuses, all_results = {}, {}
   local counts = { non2xx = 0, sent_new = 0, sent_twin = 0, sent_retry = 0, twin_in_flight = 0 }
   local ack_lines = {}
   for _, t in ipairs(threads) do
      add_into(all_statuses, t:get("statuses"))
      add_into(all_results, t:get("results"))
      for k, _ in pairs(counts) do counts[k] = counts[k] + t:get(k) end
      for _, line in ipairs(t:get("acks")) do table.insert(ack_lines, line) end
   end
   local grid = {}
   for _, p in ipairs(GRID) do
      table.insert(grid, string.format("[%s,%d]", tostring(p), latency:percentile(p)))
   end
   local e = summary.errors
   -- init() (and so its args) ran in the threads' Lua states, not in this one
   local out_path = threads[1]:get("out_path")
   local out = io.open(out_path, "w")
   out:write(string.format(
      '{"duration_us":%d,"requests":%d,"bytes":%d,'
         .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
         .. '"latency":{"min":%d,"max":%d,"mean":%f,"grid":[%s]},'
         .. '"statuses":%s,"results":%s,"counts":%s}\n',
      summary.duration, summary.requests, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.min, latency.max, latency.mean, table.concat(grid, ","),
      json_counts(all_statuses), json_counts(all_results), json_counts(counts)))
   out:close()
   if #ack_lines > 0 then
      local f = io.open(out_path .. ".acks", "w")
      f:write(table.concat(ack_lines, "\n"), "\n")
      f:close()
   end
end
