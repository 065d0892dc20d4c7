-- booted(key) -> this server run's id (INFO server's run_id). Called first by the
-- scripts that read entries (begin, index, values, extend): a hash that another run
-- wrote (restored from an RDB snapshot or the AOF after a restart, or found on a
-- promoted replica) may hold entries and a generation that writes since its save had
-- dropped or changed, so it is deleted whole. A hash without a 'boot' field (made by
-- a fence, an unfence or a drop, which do not ask the server's run, or by an earlier
-- version) is adopted: stamped with this run. A fence restored with a stale hash is
-- deleted with it; its writer's unfence then finds it gone and drops the thread.
local function booted(key)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or '?'
  local was = redis.call('HGET', key, 'boot')
  if was == run then return run end
  if was then
    redis.call('DEL', key)
  elseif redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'boot', run)
  end
  return run
end
