-- release(kind, key): frees a slot by the proxy's id (kind "t") or by
-- Trino's (kind "u"), then admits what now fits.
local kind, key = ARGV[A + 1], ARGV[A + 2]
local id = key
if kind == 'u' then
  id = redis.call('GET', P .. 'up:' .. key)
  if not id then return 0 end
end
local r = release(id)
if r > 0 then pump(now_ms()) end
return r
