-- queue(max): the waiting queries in the order pump visits them (users
-- round robin, each user's FIFO), at most max, each as strings
-- {id, user, group, cpu, enqueued ms, position in the user's queue,
--  n, cpu, un, uc, gn, gc, (the in-flight usage of the global, the user's
--  and the group's budgets), mem, mem, um, gm} (the query's predicted
--  memory, then the three budgets' in-flight memory).
local max = tonumber(ARGV[A + 1])
local use = P .. 'use'
local function s(v) return tostring(num(v)) end
local gl = redis.call('HMGET', use, 'n', 'cpu', 'mem')
local out = {}
for _, u in ipairs(redis.call('LRANGE', P .. 'users', 0, -1)) do
  local ul = redis.call('HMGET', use, 'un:' .. u, 'uc:' .. u, 'um:' .. u)
  for i, id in ipairs(redis.call('LRANGE', P .. 'uq:' .. u, 0, -1)) do
    if #out >= max then return out end
    local v = redis.call('HMGET', P .. 't:' .. id, 'g', 'cpu', 'enq', 'st', 'mem')
    if v[4] == 'q' then
      local g = v[1] or ''
      local gu = redis.call('HMGET', use, 'gn:' .. g, 'gc:' .. g, 'gm:' .. g)
      out[#out + 1] = {id, u, g, s(v[2]), s(v[3]), tostring(i - 1),
        s(gl[1]), s(gl[2]), s(ul[1]), s(ul[2]), s(gu[1]), s(gu[2]),
        s(v[5]), s(gl[3]), s(ul[3]), s(gu[3])}
    end
  end
end
return out
