-- KEYS[1], KEYS[2] the record; ARGV[1] ttl ms, ARGV[2] the reader's generation, ARGV[3] the m: field,
-- ARGV[4] the newest child id of the steps, ARGV[5] R, the number of entries to read
-- back after the steps, then R groups of 3 (pointer, hint segment, hint known; see
-- index), then one group of 10 per step, oldest first: child pointer, parent pointer
-- ('' with a seed), chunk field, chunk bytes, seed field ('' for none), seed bytes,
-- a fresh segment id, the seed list field of the step's namespace and channel, the
-- child's tag (see the module docstring: it binds the child's n and chunk list, and
-- only the caller can make it), and the first 16 hex digits of the SHA-1 of the tag
-- the caller took the parent's makeup from ('' with a seed).
-- A pointer is 'segment,n,tag'. A step is refused (as when its parent is gone) when
-- the parent's tag is no longer the one the caller extended: the child's tag would
-- not match the chunk list this script gives it.
-- -> 0 when nothing was applied (the generation changed or a write is fenced) or a
-- step's parent history is gone (earlier steps stay: each is a correct entry on its
-- own, under the TTL); else {epoch, index block of each read} ({epoch} alone when a
-- read-back entry is incomplete).
-- Positions of a segment ('q:{segment}:{i}' -> chunk field) are written once: a
-- step appends at n + 1 when that position is free or already holds its chunk; a
-- fork (another chunk there) copies positions 1..n into a new segment (O(n), only
-- on forks), so a turn's extension is O(1) in the thread's length.
-- Seed values (snapshots) are the large fields: a channel snapshotting every F
-- updates would keep one per F updates, each the whole state, quadratic in the
-- thread. At most MAX_SEEDS are kept per namespace and channel (the memory cache
-- keeps as many seeded segments), oldest stored first out; the segments of a
-- dropped seed read as misses (held_seed), so a reader falls back to the saver.
local MAX_SEEDS = 4
local key, rec = KEYS[1], KEYS[2]
booted(key, rec)
local ttl = tonumber(ARGV[1])
if redis.call('HGET', key, 'gen') ~= ARGV[2] or redis.call('HEXISTS', key, 'fence') == 1 then
  return 0
end
local function keep_seed(sf, zf)
  local seeds = {}
  local listed = redis.call('HGET', key, zf)
  if listed then
    -- only seed fields: whatever else a corrupt list names (a fence, the
    -- generation) is never deleted
    for name in string.gmatch(listed, '[^,]+') do
      if name ~= sf and string.sub(name, 1, 2) == 'e:' then seeds[#seeds + 1] = name end
    end
  end
  seeds[#seeds + 1] = sf
  while #seeds > MAX_SEEDS do
    redis.call('HDEL', key, table.remove(seeds, 1))
  end
  redis.call('HSET', key, zf, table.concat(seeds, ','))
end
local function extend(child, parent, cf, chunk, sf, seed, newseg, zf, ctag, pcheck)
  if parent == '' then
    redis.call('HSETNX', key, 'epoch', newseg)
    local seedref = '-'
    if sf ~= '' then
      redis.call('HSET', key, sf, seed)
      keep_seed(sf, zf)
      seedref = sf
    end
    redis.call('HSET', key, cf, chunk, 's:' .. newseg, seedref, 'q:' .. newseg .. ':1', cf,
               child, newseg .. ',1,' .. ctag)
    return true
  end
  local p = redis.call('HGET', key, parent)
  if not p then return false end
  local seg, n, ptag = string.match(p, '^(%x+),(%d+),(.*)$')
  if not seg or string.sub(redis.sha1hex(ptag), 1, 16) ~= pcheck then return false end
  n = tonumber(n)
  local made = seg .. ',' .. (n + 1) .. ',' .. ctag
  local seedref = held_seed(key, seg)
  if not seedref then return false end
  if n > 0 and redis.call('HEXISTS', key, 'q:' .. seg .. ':' .. n) == 0 then return false end
  local nxt = 'q:' .. seg .. ':' .. (n + 1)
  local at = redis.call('HGET', key, nxt)
  if not at then
    redis.call('HSET', key, cf, chunk, nxt, cf, child, made)
    return true
  end
  if at == cf then
    redis.call('HSET', key, cf, chunk, child, made)
    return true
  end
  redis.call('HSET', key, 's:' .. newseg, seedref)
  for i = 1, n, 500 do
    local last = math.min(i + 499, n)
    local names = {}
    for j = i, last do names[#names + 1] = 'q:' .. seg .. ':' .. j end
    local got = redis.call('HMGET', key, unpack(names))
    local copy = {}
    for j = 1, #got do
      if not got[j] then return false end
      copy[#copy + 1] = 'q:' .. newseg .. ':' .. (i + j - 1)
      copy[#copy + 1] = got[j]
    end
    redis.call('HSET', key, unpack(copy))
  end
  redis.call('HSET', key, cf, chunk, 'q:' .. newseg .. ':' .. (n + 1), cf,
             child, newseg .. ',' .. (n + 1) .. ',' .. ctag)
  return true
end
local reads = tonumber(ARGV[5])
local first = 6 + 3 * reads
local applied = 0
for i = first, #ARGV, 10 do
  if not extend(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5],
                ARGV[i + 6], ARGV[i + 7], ARGV[i + 8], ARGV[i + 9]) then
    break
  end
  applied = applied + 1
end
if applied > 0 then
  if newer(ARGV[4], redis.call('HGET', key, ARGV[3])) then
    redis.call('HSET', key, ARGV[3], ARGV[4])
  end
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
    redis.call('PEXPIRE', rec, ttl)
  end
end
if applied * 10 < #ARGV - first + 1 then return 0 end
local out = {redis.call('HGET', key, 'epoch')}
for r = 0, reads - 1 do
  local a = 6 + 3 * r
  if not index(key, ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), out) then
    return {out[1]}
  end
end
return out
