-- Shared admission (proxy/admission_redis.go): budgets, slots and the fair
-- queue of every replica, in one Redis. Each script is this prelude plus
-- one command body; Redis runs a script atomically, so a command sees and
-- leaves the budgets consistent. Times are Redis' own clock (TIME), so the
-- replicas' clocks do not matter.
--
-- KEYS[1] is the key prefix P. ARGV[1..13] are the limits and times below,
-- ARGV[14..] the command's own arguments. Keys:
--   P.."slots"      ZSET admitted id -> lease expiry (ms)
--   P.."slot"       HASH admitted id -> cjson {u, g, cpu, mem, c} (what to
--                   uncharge; a slot written before memory budgets has no
--                   mem and no class: 0 and none)
--   P.."use"        HASH n, cpu, mem, un:U, uc:U, um:U, gn:G, gc:G, gm:G,
--                   cn:C, cc:C, cm:C (in-flight usage, C the cost class;
--                   an absent mem field is 0)
--   P.."t:"..id     HASH u g cpu mem c cm st enq poll why req up (c the
--                   class, cm its memory budget; st: q queued,
--                   a admitted, x taken, f failed), with a TTL
--   P.."users"      LIST users with queued queries, round-robin order
--   P.."uq:"..U     LIST the user's queued ids, FIFO
--   P.."nq"         STRING number of queued ids
--   P.."up:"..up    STRING upstream (Trino) id -> id
--   channel P.."admitted"  the ids admitted (long polls wake on them)
local P = KEYS[1]
local L = {
  n = tonumber(ARGV[1]), cpu = tonumber(ARGV[2]), un = tonumber(ARGV[3]), uc = tonumber(ARGV[4]),
  gn = tonumber(ARGV[5]), gc = tonumber(ARGV[6]), qsize = tonumber(ARGV[7]), lease = tonumber(ARGV[8]),
  ttl = tonumber(ARGV[9]), maxwait = tonumber(ARGV[10]),
  mem = tonumber(ARGV[11]), um = tonumber(ARGV[12]), gm = tonumber(ARGV[13]),
}
local A = 13 -- ARGV[A+i] is the command's i-th argument
local ABANDON = 300000 -- a queued query nobody polled for 5 minutes fails

local function num(v) return tonumber(v) or 0 end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function charge(u, g, cpu, mem, c, sign)
  local use = P .. 'use'
  local function add(nf, cf, mf)
    local n = redis.call('HINCRBY', use, nf, sign)
    if n <= 0 then
      redis.call('HDEL', use, nf, cf, mf)
    else
      redis.call('HINCRBYFLOAT', use, cf, sign * cpu)
      if n == 1 and sign > 0 then
        -- The one query in flight: its memory is the scope's (this also
        -- clears what a replica that predates memory budgets left).
        if mem > 0 then redis.call('HSET', use, mf, mem) else redis.call('HDEL', use, mf) end
      elseif mem ~= 0 then
        redis.call('HINCRBYFLOAT', use, mf, sign * mem)
      end
    end
  end
  add('n', 'cpu', 'mem')
  add('un:' .. u, 'uc:' .. u, 'um:' .. u)
  add('gn:' .. g, 'gc:' .. g, 'gm:' .. g)
  if c and c ~= '' then add('cn:' .. c, 'cc:' .. c, 'cm:' .. c) end
end

-- A scope with nothing in flight always admits one query, so a query larger
-- than its budget still runs.
local function ok(nf, cf, mf, maxn, maxc, maxm, cpu, mem)
  local v = redis.call('HMGET', P .. 'use', nf, cf, mf)
  local n, c, m = num(v[1]), num(v[2]), num(v[3])
  if n == 0 then return true end
  return (maxn == 0 or n + 1 <= maxn) and (maxc == 0 or c + cpu <= maxc) and (maxm == 0 or m + mem <= maxm)
end

-- c is the query's cost class ('' for none) and cm the class's memory
-- budget (0: unlimited).
local function fits(u, g, cpu, mem, c, cm)
  return ok('n', 'cpu', 'mem', L.n, L.cpu, L.mem, cpu, mem)
    and ok('un:' .. u, 'uc:' .. u, 'um:' .. u, L.un, L.uc, L.um, cpu, mem)
    and ok('gn:' .. g, 'gc:' .. g, 'gm:' .. g, L.gn, L.gc, L.gm, cpu, mem)
    and (c == '' or ok('cn:' .. c, 'cc:' .. c, 'cm:' .. c, 0, 0, cm, cpu, mem))
end

-- start charges id's slot, held until now + lease.
local function start(id, u, g, cpu, mem, c, now, st)
  charge(u, g, cpu, mem, c, 1)
  redis.call('ZADD', P .. 'slots', now + L.lease, id)
  redis.call('HSET', P .. 'slot', id, cjson.encode({u, g, cpu, mem, c}))
  local t = P .. 't:' .. id
  redis.call('HSET', t, 'u', u, 'g', g, 'cpu', cpu, 'mem', mem, 'c', c, 'st', st)
  redis.call('PEXPIRE', t, L.ttl)
end

-- release frees id's slot; 1 when it held one.
local function release(id)
  if redis.call('ZREM', P .. 'slots', id) == 0 then return 0 end
  local s = redis.call('HGET', P .. 'slot', id)
  redis.call('HDEL', P .. 'slot', id)
  if s then
    local v = cjson.decode(s)
    charge(v[1], v[2], tonumber(v[3]) or 0, tonumber(v[4]) or 0, v[5] or '', -1)
  end
  local t = P .. 't:' .. id
  local up = redis.call('HGET', t, 'up')
  if up then redis.call('DEL', P .. 'up:' .. up) end
  if redis.call('HGET', t, 'st') == 'a' then
    -- Admitted but never picked up within the lease: its client is gone.
    redis.call('HSET', t, 'st', 'f', 'why', 'admitted, but no poll picked it up within the lease (the client went away)')
    redis.call('HDEL', t, 'req')
    redis.call('PEXPIRE', t, ABANDON)
  else
    redis.call('DEL', t)
  end
  return 1
end

-- purge frees the slots whose lease ran out (their replica stopped renewing).
local function purge(now)
  local ids = redis.call('ZRANGEBYSCORE', P .. 'slots', '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(ids) do release(id) end
  return #ids
end

-- unqueue removes id from user u's queue.
local function unqueue(id, u)
  local q = P .. 'uq:' .. u
  if redis.call('LREM', q, 1, id) == 0 then return false end
  redis.call('DECR', P .. 'nq')
  if redis.call('LLEN', q) == 0 then redis.call('LREM', P .. 'users', 1, u) end
  return true
end

-- pump admits queued queries, taking users in round-robin order, as long as
-- the head query of some user fits. It returns how many it admitted.
local function pump(now)
  local admitted = 0
  local users = P .. 'users'
  local progress = true
  while progress do
    progress = false
    local n = redis.call('LLEN', users)
    for i = 0, n - 1 do
      local u = redis.call('LINDEX', users, i)
      local q = P .. 'uq:' .. u
      local id = redis.call('LINDEX', q, 0)
      local v = id and redis.call('HMGET', P .. 't:' .. id, 'g', 'cpu', 'st', 'mem', 'c', 'cm') or {}
      if not id then
        redis.call('LREM', users, 1, u)
        progress = true
        break
      elseif v[3] ~= 'q' then
        -- Expired or no longer waiting: drop it from the queue.
        unqueue(id, u)
        progress = true
        break
      elseif fits(u, v[1], num(v[2]), num(v[4]), v[5] or '', num(v[6])) then
        unqueue(id, u)
        start(id, u, v[1], num(v[2]), num(v[4]), v[5] or '', now, 'a')
        redis.call('PUBLISH', P .. 'admitted', id)
        -- Rotate: this user goes to the back of the order.
        if redis.call('LREM', users, 1, u) > 0 then redis.call('RPUSH', users, u) end
        admitted = admitted + 1
        progress = true
        break
      end
    end
  end
  return admitted
end
