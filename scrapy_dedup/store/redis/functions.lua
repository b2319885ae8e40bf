#!lua name=scrapy_dedup
-- The atomic decisions of the Redis store, run inside the server (Redis 7+ Functions).
--
-- Every function touches the keys of one hash slot only (its KEYS share one {hash tag}),
-- so none is CROSSSLOT on a cluster; the slot layout is in scrapy_dedup/store/redis/keys.py.
-- Binary arguments are fixed-width big-endian strings built by the client.
--
-- LIBRARY_VERSION changes whenever a function's arguments, replies or stored bytes change;
-- the client compares it with its own and reloads the library (FUNCTION LOAD REPLACE).

local LIBRARY_VERSION = 14

local function fail(message)
  return redis.error_reply('ERR scrapy_dedup: ' .. message)
end

local function now_ms()
  local t = redis.call('TIME')
  local usec = tonumber(t[2])
  return tonumber(t[1]) * 1000 + (usec - usec % 1000) / 1000
end

local LEASE_ERROR = 'the lease is a positive number of ms'

-- A lease argument as a positive number of milliseconds, or nil.
local function lease_ms(value)
  local lease = tonumber(value)
  if lease == nil or lease <= 0 then return nil end
  return lease
end

-- Position (1-based) of the first record of `width` bytes that starts with `needle`, or nil.
-- string.find with plain=true is a C scan; a hit that does not start a record is skipped.
local function find_record(blob, needle, width)
  local init = 1
  while true do
    local pos = string.find(blob, needle, init, true)
    if pos == nil then return nil end
    if (pos - 1) % width == 0 then return pos end
    init = pos + 1
  end
end

local function without_record(blob, pos, width)
  return string.sub(blob, 1, pos - 1) .. string.sub(blob, pos + width)
end

local function version()
  return LIBRARY_VERSION
end

-- Frontier -------------------------------------------------------------------------------
-- KEYS[1] a frontier bucket: 8-byte records, a URL key's 6-byte digest remainder then the
-- run (uint16) it was last scheduled in.  ARGV: run, then one or more 6-byte digests of
-- URL keys in this bucket.  Marks each in `run`; replies with the run each was last
-- scheduled in before, 0 for never.  Read and write are one step: two processes that
-- schedule the same URL at once get 0 exactly once.
local FRONTIER_WIDTH = 8

local function frontier_mark(keys, args)
  local run = tonumber(args[1])
  if run == nil or run < 1 or run > 65535 or run % 1 ~= 0 then
    return fail('run must be an integer in 1..65535')
  end
  local packed_run = struct.pack('>I2', run)
  local blob = redis.call('GET', keys[1]) or ''
  local appended = {}
  local seen_now = {}
  local replies = {}
  for i = 2, #args do
    local digest = args[i]
    if #digest ~= 6 then return fail('a frontier digest is 6 bytes') end
    local pos = find_record(blob, digest, FRONTIER_WIDTH)
    if pos ~= nil then
      local previous = struct.unpack('>I2', blob, pos + 6)
      if previous ~= run then
        redis.call('SETRANGE', keys[1], pos - 1 + 6, packed_run)
      end
      replies[#replies + 1] = previous
    elseif seen_now[digest] then
      replies[#replies + 1] = run  -- the same URL twice in one call
    else
      seen_now[digest] = true
      appended[#appended + 1] = digest .. packed_run
      replies[#replies + 1] = 0
    end
  end
  if #appended > 0 then
    redis.call('APPEND', keys[1], table.concat(appended))
  end
  return replies
end

-- KEYS[1] a frontier bucket, KEYS[2] the same bucket's first URLs (hash: digest -> URL) of
-- keys scheduled and not yet recorded.  ARGV: run, digest, URL.  Replies {previous run or
-- 0, the first URL or nil}; a key never seen keeps this URL as its first.
local function frontier_mark_url(keys, args)
  local previous = frontier_mark({keys[1]}, {args[1], args[2]})
  if previous.err then return previous end  -- an error reply (a table with its message)
  if previous[1] == 0 then
    redis.call('HSET', keys[2], args[2], args[3])
    return {0, false}
  end
  return {previous[1], redis.call('HGET', keys[2], args[2])}
end

-- KEYS[1] a frontier bucket, KEYS[2] its first URLs.  ARGV: 6-byte digests of URL keys in this
-- bucket.  Replies, per digest, {the run it was last scheduled in or 0, its first URL or nil}
-- without marking anything: a crawl reads ahead what it will check, and marks with
-- frontier_mark_url only the keys it then schedules.
local function frontier_peek(keys, args)
  local blob = redis.call('GET', keys[1]) or ''
  local replies = {}
  for i = 1, #args do
    local digest = args[i]
    if #digest ~= 6 then return fail('a frontier digest is 6 bytes') end
    local pos = find_record(blob, digest, FRONTIER_WIDTH)
    if pos == nil then
      replies[i] = {0, false}
    else
      replies[i] = {struct.unpack('>I2', blob, pos + 6), redis.call('HGET', keys[2], digest)}
    end
  end
  return replies
end

-- URL variants ------------------------------------------------------------------------------
-- KEYS[1] a shard of the variant table (hash: URL -> JSON record).  ARGV: the variant URL, then
-- the JSON texts of its URL key, of the time it was seen and of the reason it was dropped.
-- Counts one more sighting the way the store's put_variant does (first_seen kept, count + 1,
-- key, last_seen and reason replaced) in one step, so that two processes never lose a count.
-- The record is built from JSON texts the client encoded: no number loses precision.  Replies
-- the new count.
local function variant_count(keys, args)
  local url, key, seen, reason = args[1], args[2], args[3], args[4]
  local raw = redis.call('HGET', keys[1], url)
  local first, count = seen, 0
  if raw then
    -- a '":' cannot occur inside a JSON string (its quotes are escaped): these are the fields
    first = string.match(raw, '"first_seen":([^,}]+)') or seen
    count = tonumber(string.match(raw, '"count":(%d+)')) or 0
  end
  count = count + 1
  redis.call('HSET', keys[1], url, '{"key":' .. key .. ',"first_seen":' .. first .. ',"count":'
    .. string.format('%d', count) .. ',"last_seen":' .. seen .. ',"reason":' .. reason .. '}')
  return count
end

-- Exact-content claim ---------------------------------------------------------------------
-- KEYS[1] a shard of the exact index (hash: content digest -> cluster id) or any hash.  ARGV:
-- field, value.  Replies nil when this caller claimed the field for its value, else the value
-- that holds it: of two processes that find the same text at once, one founds, one joins.
local function exact_claim(keys, args)
  local current = redis.call('HGET', keys[1], args[1])
  if current then return current end
  redis.call('HSET', keys[1], args[1], args[2])
  return false
end

-- Packed records ----------------------------------------------------------------------------
-- KEYS[1] a shard of a packed table (hash), whose fields each hold several records end to end:
-- the record's 12-byte key digest, its value's length (uint16, big-endian), the value.  ARGV:
-- the field (1 byte), the digest, and for a put the value.  A field is rewritten whole by a
-- put or a delete: records too long for a listpack take less this way than one hash-table
-- entry each (MinHash signatures at 10^6 documents: 298 bytes a document against 386).
local PACKED_DIGEST = 12
local PACKED_HEAD = PACKED_DIGEST + 2
local PACKED_USAGE = 'a packed record is named by a 1-byte field and a 12-byte digest'

-- Start and end (exclusive) of the record of `digest` in `blob`, or nil.  string.find is a C
-- scan; a hit that does not start a record (the digest's bytes inside a value) is skipped.
local function packed_find(blob, digest)
  local pos, hit = 1, string.find(blob, digest, 1, true)
  while hit ~= nil and pos <= #blob do
    if pos > hit then
      hit = string.find(blob, digest, pos, true)
    else
      local after = pos + PACKED_HEAD + struct.unpack('>I2', blob, pos + PACKED_DIGEST)
      if pos == hit then return pos, after end
      pos = after
    end
  end
  return nil
end

local function packed_args(args)
  return #(args[1] or '') == 1 and #(args[2] or '') == PACKED_DIGEST
end

-- Replies the value of the record, or nil.
local function packed_get(keys, args)
  if not packed_args(args) then return fail(PACKED_USAGE) end
  local blob = redis.call('HGET', keys[1], args[1])
  if not blob then return nil end
  local pos, after = packed_find(blob, args[2])
  if pos == nil then return nil end
  return string.sub(blob, pos + PACKED_HEAD, after - 1)
end

-- Writes the record (in place of the one it replaces); replies 1.
local function packed_put(keys, args)
  local value = args[3]
  if not packed_args(args) or value == nil or #value > 65535 then
    return fail(PACKED_USAGE .. ', with a value of at most 65,535 bytes')
  end
  local blob = redis.call('HGET', keys[1], args[1]) or ''
  local record = args[2] .. struct.pack('>I2', #value) .. value
  local pos, after = packed_find(blob, args[2])
  if pos == nil then
    blob = blob .. record
  else
    blob = string.sub(blob, 1, pos - 1) .. record .. string.sub(blob, after)
  end
  redis.call('HSET', keys[1], args[1], blob)
  return 1
end

-- Takes the record out; replies 1, or 0 when there was none.
local function packed_delete(keys, args)
  if not packed_args(args) then return fail(PACKED_USAGE) end
  local blob = redis.call('HGET', keys[1], args[1])
  if not blob then return 0 end
  local pos, after = packed_find(blob, args[2])
  if pos == nil then return 0 end
  blob = string.sub(blob, 1, pos - 1) .. string.sub(blob, after)
  if blob == '' then
    redis.call('HDEL', keys[1], args[1])
  else
    redis.call('HSET', keys[1], args[1], blob)
  end
  return 1
end

-- Near-duplicate tables -------------------------------------------------------------------
-- One (table, slot group, scope) is one hash of the representatives' entries: a field is one
-- bucket, named by its 16-bit block (2 bytes), the value its records.  Records are 16 bytes:
-- the 64-bit SimHash, then an 8-byte token (cluster id).  The table is the digit after '{n'
-- in the key's tag (a prefix holds no braces), so a record's bucket follows from its SimHash.
-- A decision reads the buckets with a plain HMGET and measures the Hamming distances in the
-- client (they cost Lua ~100 times what they cost numpy); two decisions at once may both keep
-- a near duplicate, which settling merges.
local NEAR_WIDTH = 16
local NEAR_TABLES = 4

local function check_entry(fp, token)
  if #fp ~= 8 or #token ~= 8 then return 'a near-duplicate entry is an 8-byte SimHash and an 8-byte token' end
  return nil
end

-- The table a group's hash belongs to (0-3), or nil.
local function near_table(key)
  return tonumber(string.match(key, '{n(%d)'))
end

-- Adds (enter) or takes out (not enter) `record` in its bucket of `key`; replies 1 if it changed.
local function near_change(key, record, enter)
  local table = near_table(key)
  local field = string.sub(record, 7 - 2 * table, 8 - 2 * table)  -- its block in that table
  local blob = redis.call('HGET', key, field) or ''
  local pos = find_record(blob, record, NEAR_WIDTH)
  if enter then
    if pos ~= nil then return 0 end
    redis.call('HSET', key, field, blob .. record)
  else
    if pos == nil then return 0 end
    blob = without_record(blob, pos, NEAR_WIDTH)
    if blob == '' then redis.call('HDEL', key, field) else redis.call('HSET', key, field, blob) end
  end
  return 1
end

local function check_table(key)
  local table = near_table(key)
  if table == nil or table >= NEAR_TABLES then return 'a near-duplicate call takes a hash of a table' end
  return nil
end

-- KEYS[1] a table's hash.  ARGV: simhash, token.  Enters (near_put) or removes (near_remove) a
-- representative's entry; replies 1 if it changed.
local function near_write(enter)
  return function(keys, args)
    local err = check_entry(args[1] or '', args[2] or '') or check_table(keys[1])
    if err then return fail(err) end
    return near_change(keys[1], args[1] .. args[2], enter)
  end
end
local near_put, near_remove = near_write(true), near_write(false)

-- LSH band buckets --------------------------------------------------------------------------
-- One (band group, scope) is one hash of the representatives' buckets.  A field is one bucket: the band (1 byte)
-- and the top bits of the band hash (2 bytes), which the client computes; the value is a
-- string of 12-byte records (the band hash's low 4 bytes, its tag, and an 8-byte cluster
-- token).  A document's entries in a group are one argument: per band, its 3-byte
-- field and its 4-byte tag, concatenated (each field once).  A call reads its buckets with one
-- HMGET per hash and writes them back with one HSET (and one HDEL of those emptied) per hash;
-- it replies what it found as one string (a reply element costs the server about as much as a
-- bucket's work).
local BAND_RECORD = 12
local BAND_FIELD = 3
local BAND_TAG = 4
local BAND_ENTRY = BAND_FIELD + BAND_TAG
local BAND_USAGE = 'a band call takes entries of a 3-byte field and a 4-byte band tag'

-- The fields of an entries argument, or nil when its length is wrong.  Entry i's tag is
-- string.sub(entries, i * BAND_ENTRY - BAND_TAG + 1, i * BAND_ENTRY).
local function band_fields(entries)
  if #entries % BAND_ENTRY ~= 0 or #entries == 0 then return nil end
  local fields = {}
  for pos = 1, #entries, BAND_ENTRY do fields[#fields + 1] = string.sub(entries, pos, pos + BAND_FIELD - 1) end
  return fields
end

local function band_tag(entries, i)
  return string.sub(entries, i * BAND_ENTRY - BAND_TAG + 1, i * BAND_ENTRY)
end

-- Appends to `out`, for each record under an entry's tag in its bucket (`values`: the HMGET
-- of the entries' fields), `kind` (1 byte) and the record's token.
local function band_matches(values, entries, kind, out)
  for i = 1, #values do
    local blob = values[i]
    if blob then
      local needle, init = band_tag(entries, i), 1
      while true do
        local pos = string.find(blob, needle, init, true)
        if pos == nil then break end
        if (pos - 1) % BAND_RECORD == 0 then
          out[#out + 1] = kind .. string.sub(blob, pos + BAND_TAG, pos + BAND_RECORD - 1)
          init = pos + BAND_RECORD
        else
          init = pos + 1
        end
      end
    end
  end
end

-- Enters (enter) or takes out (not enter) the record (tag, token) of each entry in its
-- bucket of hash `key`; replies how many changed.
local function band_change(key, entries, fields, token, enter)
  local values = redis.call('HMGET', key, unpack(fields))
  local set, gone, changed = {}, {}, 0
  for i = 1, #fields do
    local blob = values[i] or ''
    local record = band_tag(entries, i) .. token
    local pos = find_record(blob, record, BAND_RECORD)
    if enter and pos == nil then
      set[#set + 1] = fields[i]
      set[#set + 1] = blob .. record
      changed = changed + 1
    elseif not enter and pos ~= nil then
      blob = without_record(blob, pos, BAND_RECORD)
      if blob == '' then
        gone[#gone + 1] = fields[i]
      else
        set[#set + 1] = fields[i]
        set[#set + 1] = blob
      end
      changed = changed + 1
    end
  end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  return changed
end

-- KEYS[1] a band group's hash.  ARGV: an 8-byte token; entries.  Enters (bands_add) or takes
-- out (bands_remove) the record (tag, token) of each entry; replies how many changed.
local function bands_write(enter)
  return function(keys, args)
    local token, entries = args[1] or '', args[2] or ''
    local fields = band_fields(entries)
    if #keys ~= 1 or #token ~= 8 or fields == nil then return fail('a band write takes one hash, a token and entries') end
    return band_change(keys[1], entries, fields, token, enter)
  end
end
local bands_add, bands_remove = bands_write(true), bands_write(false)

-- KEYS: hashes of one band group (the representatives').  ARGV: entries.  Replies one string:
-- per record under an entry's tag, the hash's position among KEYS (1 byte, from 0) and
-- the record's token.
local function bands_find(keys, args)
  local entries = args[1] or ''
  local fields = band_fields(entries)
  if fields == nil then return fail(BAND_USAGE) end
  local out = {}
  for i = 1, #keys do band_matches(redis.call('HMGET', keys[i], unpack(fields)), entries, string.char(i - 1), out) end
  return table.concat(out)
end

-- One server --------------------------------------------------------------------------------
-- A server that is not a cluster has no slots, so one call may name keys of every group.
-- KEYS: the hash of each table holding the SimHash's buckets, then the settled band hashes.
-- ARGV: '1' to enter, '0' to take out; the 16-byte record (SimHash, token); per band hash the
-- entries of its group.  A representative entered in (near_put, bands_add) or taken out of
-- (near_remove, bands_remove) every table and band in one call.  Replies how many records
-- changed.  Never sent to a cluster, where it would be CROSSSLOT.
local function near_index(keys, args)
  local enter = args[1] == '1'
  local usage = 'near_index takes 1 or 0, a 16-byte record, and entries per band hash'
  if (args[1] ~= '1' and args[1] ~= '0') or #(args[2] or '') ~= NEAR_WIDTH or #keys < NEAR_TABLES
      or #args - 2 ~= #keys - NEAR_TABLES then
    return fail(usage)
  end
  for t = 1, NEAR_TABLES do
    local err = check_table(keys[t])
    if err then return fail(err) end
  end
  local band_of = {}
  for i = 3, #args do
    band_of[i - 2] = band_fields(args[i])
    if band_of[i - 2] == nil then return fail(BAND_USAGE) end
  end
  local changed = 0
  for t = 1, NEAR_TABLES do changed = changed + near_change(keys[t], args[2], enter) end
  local token = string.sub(args[2], 9, 16)
  for i, fields in ipairs(band_of) do
    changed = changed + band_change(keys[NEAR_TABLES + i], args[i + 2], fields, token, enter)
  end
  return changed
end

-- Crawl runs shared by processes ---------------------------------------------------------
-- KEYS[1] the store's metadata hash (field 'run' is the run number), KEYS[2] a sorted set of
-- the processes in the current run by lease deadline (ms).  Processes that start while
-- another one of the crawl is alive join its run; the first to start after all have
-- stopped (or died: their leases ran out) begins the next run.

-- ARGV: process id, lease ms.  Replies {run, 1 if this call began it}.
local function run_join(keys, args)
  local lease = lease_ms(args[2])
  if not lease then return fail(LEASE_ERROR) end
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', now)
  -- a process that begins again (a second crawl in one process) does not keep its own run alive
  redis.call('ZREM', keys[2], args[1])
  local began = 0
  local run = tonumber(redis.call('HGET', keys[1], 'run') or '0')
  if redis.call('ZCARD', keys[2]) == 0 or run == 0 then
    run = redis.call('HINCRBY', keys[1], 'run', 1)
    began = 1
  end
  redis.call('ZADD', keys[2], now + lease, args[1])
  return {run, began}
end

-- ARGV: process id, lease ms.  Replies 1 while the process is in the run, 0 if its lease
-- had run out (it is let in again: the run goes on if others kept it alive).
local function run_renew(keys, args)
  local lease = tonumber(args[2])
  local present = redis.call('ZSCORE', keys[2], args[1])
  redis.call('ZADD', keys[2], now_ms() + lease, args[1])
  if present then return 1 end
  return 0
end

-- ARGV: process id.  Replies how many processes are still in the run.
local function run_leave(keys, args)
  redis.call('ZREM', keys[2], args[1])
  redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', now_ms())
  return redis.call('ZCARD', keys[2])
end

-- The value of ``id`` in ``hash`` while ``holder_of(value)`` is ``holder``, else nil: a request
-- its process still owns.
local function held_by(hash, id, holder, holder_of)
  local value = redis.call('HGET', hash, id)
  if value and holder_of(value) == holder then return value end
  return nil
end

-- Deletes ``id`` from ``hash`` if ``holder`` still holds it; replies 1, or 0 when it did not.
local function delete_if_held(hash, id, holder, holder_of)
  if not held_by(hash, id, holder, holder_of) then return 0 end
  redis.call('HDEL', hash, id)
  return 1
end

-- The owner of a request's "owner\npayload".
local function owner_of(value)
  return string.match(value, '^([^\n]*)\n')
end

-- Requests taken by a process (crash safety) ----------------------------------------------
-- KEYS[1] hash: request id -> owner .. '\n' .. payload, KEYS[2] sorted set: request id by
-- lease deadline (ms), KEYS[3] (where named) hash: owner -> the owner's own lease deadline in
-- this shard.  A process takes a request before fetching it and settles it when its outcome is
-- written; a request whose lease ran out is reclaimed by another process.  An owner renews
-- its own lease (one call per shard, however many requests it holds) rather than each
-- request's: a request whose deadline passed while its owner's lease runs is its owner's still.

-- ARGV: request id, owner, lease ms, payload.  This owner holds the request now (owed
-- again, or owed for the first time), whoever held it before.  Replies 1.
local function pending_hold(keys, args)
  local lease = lease_ms(args[3])
  if not lease then return fail(LEASE_ERROR) end
  redis.call('HSET', keys[1], args[1], args[2] .. '\n' .. args[4])
  redis.call('ZADD', keys[2], now_ms() + lease, args[1])
  return 1
end

-- ARGV: request id, owner, lease ms, payload.  Replies 1 if taken now, 0 if already taken.
local function pending_take(keys, args)
  if not lease_ms(args[3]) then return fail(LEASE_ERROR) end
  if redis.call('HEXISTS', keys[1], args[1]) == 1 then return 0 end
  return pending_hold(keys, args)
end

-- ARGV: request id, owner, lease ms.  The request, still owed, is held by this owner now (a
-- shared queue handed it to the process that fetches it).  Replies 1, or 0 when not owed.
local function pending_adopt(keys, args)
  local lease = lease_ms(args[3])
  if not lease then return fail(LEASE_ERROR) end
  local value = redis.call('HGET', keys[1], args[1])
  if not value then return 0 end
  redis.call('HSET', keys[1], args[1], args[2] .. '\n' .. string.sub(value, #owner_of(value) + 2))
  redis.call('ZADD', keys[2], now_ms() + lease, args[1])
  return 1
end

-- One server only (its keys are in several slots): frontier_mark_url, and for a key never seen
-- pending_hold of its request in the same atomic step, so that no process can die between
-- marking a key and owing its request.  KEYS: the frontier bucket and its first URLs, the
-- request's hash and lease deadlines, the URL records' shard of the key.  ARGV: run, digest,
-- URL, request id, owner, lease ms, payload, URL key.  Replies {previous run or 0, the first
-- URL or nil, 1 when owed now or 0, 1 when a key never seen has a URL record all the same
-- (written by an ingest, say) or 0}.
local function frontier_mark_owe(keys, args)
  if not lease_ms(args[6]) then return fail(LEASE_ERROR) end
  local marked = frontier_mark_url({keys[1], keys[2]}, {args[1], args[2], args[3]})
  if marked.err then return marked end  -- an error reply
  if marked[1] ~= 0 then
    return {marked[1], marked[2], 0, 0}
  end
  pending_hold({keys[3], keys[4]}, {args[4], args[5], args[6], args[7]})
  return {0, false, 1, redis.call('HEXISTS', keys[5], args[8])}
end

-- ARGV: request id, owner.  Replies 1 when settled, 0 when another process owns it now.
local function pending_settle(keys, args)
  local settled = delete_if_held(keys[1], args[1], args[2], owner_of)
  if settled == 1 then redis.call('ZREM', keys[2], args[1]) end
  return settled
end

-- ARGV: owner, lease ms, request ids.  Extends the leases this owner still holds; replies
-- how many.  A lease of 0 hands them over: they have run out, for the next claim to take.
local function pending_renew(keys, args)
  local deadline = 0
  if tonumber(args[2]) ~= 0 then
    local lease = lease_ms(args[2])
    if not lease then return fail(LEASE_ERROR) end
    deadline = now_ms() + lease
  end
  local renewed = 0
  for i = 3, #args do
    if held_by(keys[1], args[i], args[1], owner_of) then
      redis.call('ZADD', keys[2], deadline, args[i])
      renewed = renewed + 1
    end
  end
  return renewed
end

-- KEYS[1] a shard's hash of owners' leases.  ARGV: owner, lease ms (0: the owner is gone).
-- Every request the owner holds in this shard lives while its lease does.  Replies 1.
local function pending_owner_renew(keys, args)
  if tonumber(args[2]) == 0 then
    redis.call('HDEL', keys[1], args[1])
    return 1
  end
  local lease = lease_ms(args[2])
  if not lease then return fail(LEASE_ERROR) end
  redis.call('HSET', keys[1], args[1], now_ms() + lease)
  return 1
end

-- ARGV: new owner, lease ms, at most how many.  Hands requests whose lease ran out, and whose
-- owner's lease (KEYS[3]) ran out too, to the new owner.  A request whose owner still lives
-- gets its owner's deadline instead.  At most 1000 + limit requests are looked at per call;
-- replies {more, request id, payload, ...}: more is 1 when some were left to look at.
local function pending_reclaim(keys, args)
  local lease, limit = tonumber(args[2]), tonumber(args[3])
  if lease == nil or lease <= 0 or limit == nil then return fail('pending_reclaim takes an owner, a lease and a count') end
  local now = now_ms()
  local replies = {0}
  local taken, budget = 0, 1000 + limit
  while taken < limit and budget > 0 do
    local expired = redis.call('ZRANGEBYSCORE', keys[2], '-inf', now, 'LIMIT', 0, math.min(budget, 100))
    if #expired == 0 then return replies end
    for _, id in ipairs(expired) do
      budget = budget - 1
      local value = redis.call('HGET', keys[1], id)
      if not value then
        redis.call('ZREM', keys[2], id)
      else
        local alive = tonumber(redis.call('HGET', keys[3], owner_of(value)))
        if alive and alive > now then
          redis.call('ZADD', keys[2], alive, id)  -- its owner lives: so does its lease
        else
          local payload = string.sub(value, #owner_of(value) + 2)
          redis.call('HSET', keys[1], id, args[1] .. '\n' .. payload)
          redis.call('ZADD', keys[2], now + lease, id)
          replies[#replies + 1] = id
          replies[#replies + 1] = payload
          taken = taken + 1
          if taken >= limit then break end
        end
      end
    end
  end
  replies[1] = 1
  return replies
end

-- A document being decided ---------------------------------------------------------------
-- KEYS[1] a URL key's decision lock (a string: its holder, with an expiry set when taken by
-- SET NX PX).  ARGV: holder.  Deletes the lock if this holder still has it; replies 1, or 0.
local function lock_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('DEL', keys[1])
    return 1
  end
  return 0
end

-- Registration ----------------------------------------------------------------------------
-- Every function is registered as 'sdd_' .. its name; the readers with the no-writes flag, so
-- that they may run on replicas and in read-only scripts.  (The loading sandbox has no pairs().)
-- A server whose memory is full (maxmemory, noeviction) refuses the writers, and the crawl
-- stops; the releasers, which only take out or rewrite in place what a process holds (its run,
-- its leases, its decisions' locks), have the allow-oom flag: a process stopping on
-- a full server still leaves its run and hands its requests over at once.
local WRITERS = {
  {'near_index', near_index},
  {'frontier_mark', frontier_mark}, {'frontier_mark_url', frontier_mark_url}, {'variant_count', variant_count},
  {'bands_add', bands_add}, {'bands_remove', bands_remove},
  {'exact_claim', exact_claim}, {'packed_put', packed_put}, {'packed_delete', packed_delete},
  {'near_remove', near_remove}, {'near_put', near_put},
  {'run_join', run_join},
  {'pending_take', pending_take}, {'pending_settle', pending_settle},
  {'pending_reclaim', pending_reclaim}, {'pending_hold', pending_hold}, {'pending_adopt', pending_adopt},
  {'frontier_mark_owe', frontier_mark_owe},
}
local RELEASERS = {
  {'run_renew', run_renew}, {'run_leave', run_leave},
  {'pending_renew', pending_renew}, {'pending_owner_renew', pending_owner_renew},
  {'lock_release', lock_release},
}
local READERS = {
  {'frontier_peek', frontier_peek},
  {'version', version}, {'bands_find', bands_find}, {'packed_get', packed_get},
}
for i = 1, #WRITERS do
  redis.register_function('sdd_' .. WRITERS[i][1], WRITERS[i][2])
end
for i = 1, #RELEASERS do
  redis.register_function{function_name = 'sdd_' .. RELEASERS[i][1], callback = RELEASERS[i][2], flags = {'allow-oom'}}
end
for i = 1, #READERS do
  redis.register_function{function_name = 'sdd_' .. READERS[i][1], callback = READERS[i][2], flags = {'no-writes'}}
end
