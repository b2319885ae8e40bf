#!lua name=scrapy_dedup
-- The atomic decisions of the Redis store, run inside the server (Redis 7+ Functions).
--
-- Every function but frontier_mark_owe (one server only) touches the keys of one hash slot (its
-- KEYS share one {hash tag}): none is CROSSSLOT on a cluster; the slots are in keys.py.
-- Binary arguments are fixed-width big-endian strings built by the client.
--
-- LIBRARY_VERSION changes whenever a function's arguments, replies or stored bytes change;
-- the client compares it with its own and reloads the library (FUNCTION LOAD REPLACE).

local LIBRARY_VERSION = 20

local function fail(message)
  return redis.error_reply('ERR scrapy_dedup: ' .. message)
end

local function now_ms()
  local t = redis.call('TIME')
  local usec = tonumber(t[2])
  return tonumber(t[1]) * 1000 + (usec - usec % 1000) / 1000
end

-- Position (1-based) of the first record of `width` bytes from `init` (default 1) that starts
-- with `needle`, or nil.  string.find with plain=true is a C scan; a hit that does not start a
-- record is skipped.
local function find_record(blob, needle, width, init)
  init = init or 1
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
-- KEYS[1] a frontier bucket: 8-byte records, a URL key's 6-byte digest remainder then the run
-- (uint16) it was last scheduled in; KEYS[2] the same bucket's first URLs (hash: digest -> URL)
-- of keys scheduled and not yet recorded.  ARGV: run, digest, URL.  Marks the key in `run` and
-- replies {the run it was last scheduled in before or 0, its first URL or nil}; a key never
-- seen keeps this URL as its first.  Read and write are one step: two processes that schedule
-- the same URL at once get 0 exactly once.
local FRONTIER_WIDTH = 8

local function frontier_mark_url(keys, args)
  local run, digest = tonumber(args[1]), args[2]
  if run == nil or run < 1 or run > 65535 or run % 1 ~= 0 then
    return fail('run must be an integer in 1..65535')
  end
  if #digest ~= 6 then return fail('a frontier digest is 6 bytes') end
  local packed_run = struct.pack('>I2', run)
  local blob = redis.call('GET', keys[1]) or ''
  local pos = find_record(blob, digest, FRONTIER_WIDTH)
  if pos == nil then
    redis.call('APPEND', keys[1], digest .. packed_run)
    redis.call('HSET', keys[2], digest, args[3])
    return {0, false}
  end
  local previous = struct.unpack('>I2', blob, pos + 6)
  if previous ~= run then redis.call('SETRANGE', keys[1], pos - 1 + 6, packed_run) end
  return {previous, redis.call('HGET', keys[2], digest)}
end

-- URL variants ------------------------------------------------------------------------------
-- KEYS[1] a shard of the variant table (hash: URL -> JSON record).  ARGV: the variant URL, then
-- the JSON texts of its URL key, of the time it was seen and of the reason it was dropped.
-- Counts one more sighting the way the store's count_variant does (first_seen kept, count + 1,
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
  local blob = redis.call('HGET', keys[1], args[1]) or ''
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
  local blob = redis.call('HGET', keys[1], args[1]) or ''
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
-- A decision reads its buckets with a plain HGET and measures the Hamming distances in the
-- client (they cost Lua ~100 times what they cost numpy); two decisions at once may both keep
-- a near duplicate, which settling merges.
local NEAR_WIDTH = 16
local NEAR_TABLES = 4

-- KEYS[1] a table's hash.  ARGV: simhash, token.  Enters (near_put) or takes out (near_remove)
-- a representative's record in its bucket; replies 1 if it changed.
local function near_write(enter)
  return function(keys, args)
    local fp, token, key = args[1] or '', args[2] or '', keys[1]
    if #fp ~= 8 or #token ~= 8 then
      return fail('a near-duplicate entry is an 8-byte SimHash and an 8-byte token')
    end
    local table = tonumber(string.match(key, '{n(%d)'))  -- the table of the group's hash
    if table == nil or table >= NEAR_TABLES then return fail('a near-duplicate call takes a hash of a table') end
    local record, field = fp .. token, string.sub(fp, 7 - 2 * table, 8 - 2 * table)  -- its block there
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
end
local near_put, near_remove = near_write(true), near_write(false)

-- LSH band buckets --------------------------------------------------------------------------
-- One (band group, scope) is one hash of the representatives' buckets.  A field is one bucket:
-- the band (1 byte) and the top bits of the band hash (2 bytes), which the client computes; the
-- value is a string of 12-byte records (the band hash's low 4 bytes, its tag, and an 8-byte
-- cluster token).  A document's entries in a group are one argument: per band, its 3-byte field
-- and its 4-byte tag, concatenated (each field once).  A call reads its buckets with one
-- HMGET and writes them back with one HSET (and one HDEL of those emptied); a lookup replies
-- what it found as one string (a reply element costs the server about as much as a bucket's work).
local BAND_RECORD = 12
local BAND_FIELD = 3
local BAND_TAG = 4
local BAND_ENTRY = BAND_FIELD + BAND_TAG

-- The fields of an entries argument, or nil when its length is wrong.
local function band_fields(entries)
  if #entries % BAND_ENTRY ~= 0 or #entries == 0 then return nil end
  local fields = {}
  for pos = 1, #entries, BAND_ENTRY do fields[#fields + 1] = string.sub(entries, pos, pos + BAND_FIELD - 1) end
  return fields
end

local function band_tag(entries, i)
  return string.sub(entries, i * BAND_ENTRY - BAND_TAG + 1, i * BAND_ENTRY)
end

-- KEYS[1] a band group's hash.  ARGV: an 8-byte token; entries.  Enters (bands_add) or takes
-- out (bands_remove) the record (tag, token) of each entry in its bucket; replies how many changed.
local function bands_write(enter)
  return function(keys, args)
    local token, entries, key = args[1] or '', args[2] or '', keys[1]
    local fields = band_fields(entries)
    if #keys ~= 1 or #token ~= 8 or fields == nil then return fail('a band write takes one hash, a token and entries') end
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
end
local bands_add, bands_remove = bands_write(true), bands_write(false)

-- KEYS[1] a band group's hash.  ARGV: entries.  Replies one string: the 8-byte token of each
-- record under an entry's tag.
local function bands_find(keys, args)
  local entries = args[1] or ''
  local fields = band_fields(entries)
  if fields == nil then return fail('a band call takes entries of a 3-byte field and a 4-byte band tag') end
  local values, out = redis.call('HMGET', keys[1], unpack(fields)), {}
  for i = 1, #values do
    local blob, needle = values[i] or '', band_tag(entries, i)
    local pos = find_record(blob, needle, BAND_RECORD)
    while pos ~= nil do
      out[#out + 1] = string.sub(blob, pos + BAND_TAG, pos + BAND_RECORD - 1)
      pos = find_record(blob, needle, BAND_RECORD, pos + BAND_RECORD)
    end
  end
  return table.concat(out)
end

-- Holders --------------------------------------------------------------------------------
-- Every process that opens the store is a holder, named by an id of its own.  Whatever it holds
-- is tagged with that id: an entry's value is the holder, a newline, then what it holds (an owed
-- request's payload, a decision lock's hold number, a cluster batch's commands).  KEYS[1] of the
-- holder calls is the holders' hash: id -> '<heartbeat deadline ms> <run>' (run 0: not crawling).
-- Its heartbeat pushes the deadline forward while the holder lives; once the deadline has passed
-- the holder is dead, for good (its heartbeat is refused), and what it held is recovered by one
-- path: ``claim`` of every entry tagged with it, then the holder is forgotten (HDEL).

-- The holder of a tagged value.
local function holder_of(value)
  return string.match(value, '^([^\n]*)\n')
end

-- {deadline, run} of a holder's entry, or nil.
local function holder_entry(holders, id)
  local value = redis.call('HGET', holders, id)
  if not value then return nil end
  local deadline, run = string.match(value, '^(%d+) (%d+)$')
  return {tonumber(deadline), tonumber(run)}
end

-- KEYS[1] the holders, KEYS[2] the store's metadata hash (field 'run': the run number).  ARGV:
-- holder, lease ms, run: 0 (not crawling), 'next' (join the run of the holders alive now, or
-- begin the next one when none is crawling), or a run number.  Replies {run, 1 if this call
-- began it}, or {-1, 0} when this holder is dead already (it takes a new id).
local function holder_enter(keys, args)
  local lease = tonumber(args[2])
  if lease == nil or lease <= 0 then return fail('the lease is a positive number of ms') end
  local now = now_ms()
  local mine = holder_entry(keys[1], args[1])
  if mine and mine[1] <= now then return {-1, 0} end
  local run, began = tonumber(args[3]), 0
  if args[3] == 'next' then
    run = tonumber(redis.call('HGET', keys[2], 'run') or '0')
    local crawling = false
    local flat = redis.call('HGETALL', keys[1])
    for i = 1, #flat, 2 do
      local deadline, their_run = string.match(flat[i + 1], '^(%d+) (%d+)$')
      if flat[i] ~= args[1] and tonumber(deadline) > now and tonumber(their_run) == run then crawling = true end
    end
    if run == 0 or not crawling then
      run = redis.call('HINCRBY', keys[2], 'run', 1)
      began = 1
    end
  end
  if run == nil then return fail('a run is 0, next or a number') end
  redis.call('HSET', keys[1], args[1], string.format('%d %d', now + lease, run))
  return {run, began}
end

-- ARGV: holder, lease ms.  Pushes a live holder's deadline forward (lease 0: it stops now, and
-- what it still holds is recovered like a dead holder's); replies 1, or 0 when it was dead.
local function holder_beat(keys, args)
  local now, lease = now_ms(), tonumber(args[2])
  local mine = holder_entry(keys[1], args[1])
  if lease == nil or not mine or mine[1] <= now then return 0 end
  redis.call('HSET', keys[1], args[1], string.format('%d %d', now + lease, mine[2]))
  return 1
end

-- KEYS[1] a hash of tagged values (owed requests, decision locks, the cluster journal).  ARGV:
-- an HSCAN cursor, the new holder ('' to drop the entries), then the dead holders.  Takes every
-- entry of a dead holder among those one HSCAN step returns: retagged with the new holder, or
-- deleted.  Replies {next cursor ('0': done), field, what it held, ...}.
local function claim(keys, args)
  local dead = {}
  for i = 3, #args do dead[args[i]] = true end
  local step = redis.call('HSCAN', keys[1], args[1], 'COUNT', 256)
  local replies, flat = {step[1]}, step[2]
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local holder = holder_of(value)
    if holder and dead[holder] then
      local held = string.sub(value, #holder + 2)
      if args[2] == '' then
        redis.call('HDEL', keys[1], field)
      else
        redis.call('HSET', keys[1], field, args[2] .. '\n' .. held)
      end
      replies[#replies + 1] = field
      replies[#replies + 1] = held
    end
  end
  return replies
end

-- KEYS[1] a hash of tagged values.  ARGV: field, value.  Deletes the field while it holds this
-- value (a decision lock released by its holder only); replies 1, or 0.
local function release(keys, args)
  if redis.call('HGET', keys[1], args[1]) == args[2] then
    redis.call('HDEL', keys[1], args[1])
    return 1
  end
  return 0
end

-- Owed requests ----------------------------------------------------------------------------
-- KEYS[1] a shard of the owed requests: request id -> holder .. '\n' .. the request.  A process
-- owes a request (HSET) when it schedules it, settles it (HDEL) when its outcome is written.

-- ARGV: request id, holder.  The request, still owed, is held by this holder now (a shared
-- queue handed it to the process that fetches it).  Replies 1, or 0 when not owed.
local function pending_adopt(keys, args)
  local value = redis.call('HGET', keys[1], args[1])
  if not value then return 0 end
  redis.call('HSET', keys[1], args[1], args[2] .. '\n' .. string.sub(value, #holder_of(value) + 2))
  return 1
end

-- One server only (its keys are in several slots): frontier_mark_url, and for a key never seen
-- its request owed in the same atomic step, so that no process can die between marking a key
-- and owing its request.  KEYS: the frontier bucket and its first URLs, the request's shard, the
-- URL records' shard of the key.  ARGV: run, digest, URL, request id, holder, payload, URL key.
-- Replies {previous run or 0, the first URL or nil, 1 when owed now or 0, 1 when a key never
-- seen has a URL record all the same (written by an ingest, say) or 0}.
local function frontier_mark_owe(keys, args)
  local marked = frontier_mark_url({keys[1], keys[2]}, {args[1], args[2], args[3]})
  if marked.err then return marked end  -- an error reply
  if marked[1] ~= 0 then return {marked[1], marked[2], 0, 0} end  -- seen before: nothing owed
  redis.call('HSET', keys[3], args[4], args[5] .. '\n' .. args[6])
  return {0, false, 1, redis.call('HEXISTS', keys[4], args[7])}
end

-- Registration ----------------------------------------------------------------------------
-- Every function is registered as 'sdd_' .. its name; the readers with the no-writes flag, so
-- that they may run on replicas and in read-only scripts.  (The loading sandbox has no pairs().)
-- A server whose memory is full (maxmemory, noeviction) refuses the writers, and the crawl
-- stops; the releasers, which only take out or rewrite in place what a process holds (its
-- heartbeat, its decisions' locks), have the allow-oom flag: a process stopping on a full server
-- still releases its locks and stops its heartbeat, so that the next run recovers what it owed.
local function register(flags, functions)
  for i = 1, #functions do
    redis.register_function{function_name = 'sdd_' .. functions[i][1], callback = functions[i][2], flags = flags}
  end
end
register({}, {  -- the writers
  {'frontier_mark_url', frontier_mark_url}, {'variant_count', variant_count},
  {'bands_add', bands_add}, {'bands_remove', bands_remove},
  {'exact_claim', exact_claim}, {'packed_put', packed_put}, {'packed_delete', packed_delete},
  {'near_remove', near_remove}, {'near_put', near_put},
  {'holder_enter', holder_enter}, {'claim', claim}, {'pending_adopt', pending_adopt},
  {'frontier_mark_owe', frontier_mark_owe},
})
register({'allow-oom'}, {{'holder_beat', holder_beat}, {'release', release}})
register({'no-writes'}, {{'version', version}, {'bands_find', bands_find}, {'packed_get', packed_get}})