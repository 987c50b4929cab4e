-- The history's write (estimator/history/redis.go): compare-and-set of a
-- batch of statistics, atomic as one script, and the eviction bound.
--
-- KEYS[1]    the eviction index: ZSET key -> the sequence number of its last update
-- KEYS[2]    the sequence (a counter: exact update order across replicas)
-- KEYS[2+i]  the i-th statistic (Stats.MarshalBinary, 56 bytes)
-- ARGV[1]    the bound (0: none)
-- ARGV[2i]   the i-th key's value as the replica read it ("" when absent)
-- ARGV[2i+1] its new value, computed from that one
--
-- A key whose value changed since it was read (another replica wrote it)
-- is left alone and its index i returned, for the replica to read and
-- apply again. Answer: {keys held after eviction, i...}.
local lru = KEYS[1]
local seq = redis.call('INCRBY', KEYS[2], #KEYS - 2) - (#KEYS - 2)
local again = {}
for i = 1, #KEYS - 2 do
  local k = KEYS[2 + i]
  local cur = redis.call('GET', k)
  if (cur or '') == ARGV[2 * i] then
    redis.call('SET', k, ARGV[2 * i + 1])
    redis.call('ZADD', lru, seq + i, k)
  else
    again[#again + 1] = i
  end
end
local n = redis.call('ZCARD', lru)
local bound = tonumber(ARGV[1])
if bound > 0 and n > bound then
  local gone = redis.call('ZPOPMIN', lru, n - bound)
  for j = 1, #gone, 2 do
    redis.call('DEL', gone[j])
  end
  n = bound
end
local out = {n}
for _, i in ipairs(again) do out[#out + 1] = i end
return out
