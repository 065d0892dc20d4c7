-- The server's "boot": its run id and its replication id (INFO server, replication).
-- The run id changes when the server restarts, the replication id when a replica is
-- promoted or a master resyncs from another (a failover, and a failback to the same
-- process). Either way the data may be an older copy (an RDB snapshot, the AOF, a
-- lagging replica) that lacks writes since its save, so a hash stamped with another
-- boot may hold entries and a generation those writes had dropped or changed.
-- Every script that creates a hash stamps it (begin, fence, drop); the scripts that
-- read entries (begin, index, extend) call booted() first.
-- Every script also takes KEYS[2], the thread's record: a plain key (same hash tag,
-- so the same cluster slot) holding the hash's current generation, written by every
-- script that replaces the generation (record()). A hash whose generation differs
-- from its record (or that has none) is an older copy brought back without a restart
-- (RESTORE ... REPLACE, DEBUG RELOAD): writes since its save may have dropped its
-- entries, and its generation may match a token taken before them, so booted()
-- deletes it as it does a hash of another boot.
local function record(rec, gen, ttl)
  if ttl > 0 then redis.call('SET', rec, gen, 'PX', ttl) else redis.call('SET', rec, gen) end
end
local function server_boot()
  local info = redis.pcall('INFO', 'server', 'replication')
  if type(info) ~= 'string' then  -- before Redis 7 INFO takes one section
    info = redis.call('INFO', 'server') .. redis.call('INFO', 'replication')
  end
  return (string.match(info, 'run_id:(%x+)') or '?') .. ':'
    .. (string.match(info, 'master_replid:(%x+)') or '?')
end
-- drop(key, rec, fresh, ttl): deletes every entry of the hash but its fences ('fence' and
-- the 'f:' fields); a new epoch and generation, stamped with this boot. The field
-- scan runs only when a fence stands (rare), otherwise a drop is one DEL.
local function drop(key, rec, fresh, ttl)
  local kept = {}
  if redis.call('HEXISTS', key, 'fence') == 1 then
    local fields = redis.call('HKEYS', key)
    for i = 1, #fields do
      local f = fields[i]
      if f == 'fence' or string.sub(f, 1, 2) == 'f:' then
        kept[#kept + 1] = f
        kept[#kept + 1] = redis.call('HGET', key, f)
      end
    end
  end
  redis.call('DEL', key)
  if #kept > 0 then redis.call('HSET', key, unpack(kept)) end
  redis.call('HSET', key, 'epoch', fresh, 'gen', fresh, 'boot', server_boot())
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  record(rec, fresh, ttl)
end
-- booted(key, rec) -> this boot. A hash of another boot, or an older copy of one of
-- this boot (its generation is not its record's), is deleted whole (its fences
-- too: they may be restored ones; a writer whose fence went this way drops the
-- thread when it unfences). A hash with no boot (an earlier version wrote it, or
-- it was restored from one) keeps only its fences, under a new epoch and generation
-- made from the server's clock, so no entry or token of its past survives.
local function booted(key, rec)
  local boot = server_boot()
  local was = redis.call('HGET', key, 'boot')
  if was == boot and redis.call('HGET', key, 'gen') == redis.call('GET', rec) then
    return boot
  end
  if was then
    redis.call('DEL', key)
  elseif redis.call('EXISTS', key) == 1 then
    local now = redis.call('TIME')
    drop(key, rec, 'b' .. now[1] .. '.' .. now[2], redis.call('PTTL', key))
  end
  return boot
end
