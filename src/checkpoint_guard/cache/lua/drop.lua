-- KEYS[1]; ARGV[1] a fresh id, ARGV[2] ttl ms: drop every entry (fences stay).
booted(KEYS[1])
drop(KEYS[1], ARGV[1], tonumber(ARGV[2]))
return 1
