-- RUN: this server run's id. booted(key), called first by every script: a hash that
-- another run wrote (restored from an RDB snapshot or the AOF after a restart, or
-- found on a promoted replica) may hold entries, a generation and fences that
-- writes since its save had dropped or changed, so it is deleted whole; a hash
-- without a 'boot' field (written before the field existed) is adopted. Every
-- script that may create a hash stamps it with RUN.
local RUN = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or '?'
local function booted(key)
  local was = redis.call('HGET', key, 'boot')
  if was == RUN then return end
  if was then
    redis.call('DEL', key)
  elseif redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'boot', RUN)
  end
end
