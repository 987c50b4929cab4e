-- Token buckets of the rate limits (proxy/ratelimit.go). KEYS[1] is the key
-- prefix; ARGV holds triples (bucket, rate per second, burst). A request is
-- allowed when every bucket holds a token, and only then takes one from
-- each. Returns {allowed, retry after ms, index of the refusing triple}.
local P = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state, wait, which = {}, 0, 0
for i = 1, #ARGV / 3 do
  local key = P .. 'rl:' .. ARGV[3 * i - 2]
  local rate, burst = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local v = redis.call('HMGET', key, 'tok', 'ts')
  local tok = tonumber(v[1]) or burst
  local ts = tonumber(v[2]) or now
  tok = math.min(burst, tok + math.max(0, now - ts) * rate / 1000)
  state[i] = {key, tok, rate, burst}
  if tok < 1 then
    local w = math.ceil((1 - tok) * 1000 / rate)
    if w > wait then wait, which = w, i end
  end
end
if wait > 0 then return {0, wait, which} end
for i = 1, #state do
  local s = state[i]
  redis.call('HSET', s[1], 'tok', tostring(s[2] - 1), 'ts', now)
  -- A bucket left alone refills in burst/rate seconds; then it may go.
  redis.call('PEXPIRE', s[1], math.ceil(s[4] / s[3] * 1000) + 1000)
end
return {1, 0, 0}
