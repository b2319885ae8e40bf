#!lua name=scrapy_dedup
-- The atomic decisions of the Redis store, run inside the server (Redis 7+ Functions).
--
-- Every function touches the keys of one hash slot only (its KEYS share one {hash tag}),
-- so none is CROSSSLOT on a cluster; the slot layout is in scrapy_dedup/store/redis_keys.py.
-- Binary arguments are fixed-width big-endian strings built by the client.
--
-- LIBRARY_VERSION changes whenever a function's arguments, replies or stored bytes change;
-- the client compares it with its own and reloads the library (FUNCTION LOAD REPLACE).

local LIBRARY_VERSION = 13

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
-- One (table, slot group, scope) is two hashes in one slot: KEYS[1] the entries of
-- representatives (settled), KEYS[2] the entries of documents still being decided
-- (pending); a field is one bucket, named by its 16-bit block (2 bytes), the value its
-- records.  Records are 16 bytes: the 64-bit SimHash, then an 8-byte token (cluster or
-- document id).  The table is the digit after '{n' in the key's tag (a prefix holds no
-- braces), so a record's bucket follows from its SimHash.  A decision inserts first, then
-- takes a global order number, then reads the buckets (near_pending, HMGET; the client measures the
-- Hamming distances, which cost Lua ~100 times what they cost numpy) --
-- scrapy_dedup/store/redis_near.py gives the argument why no two near duplicates are both
-- kept.  Every call is atomic on one slot, and a batch of decisions adds, reads and settles
-- all its entries of one group with one call each.
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

-- The bucket (2-byte field) of a record or SimHash in `table`: its block, big-endian.
local function near_field(fp, table)
  return string.sub(fp, 7 - 2 * table, 8 - 2 * table)
end

-- Records of one hash's buckets, read once and written back once: a batch's working copy.
local function near_buckets(key, table)
  return {key = key, table = table, blobs = {}, order = {}}
end

local function bucket_of(b, field)
  local blob = b.blobs[field]
  if blob == nil then
    blob = redis.call('HGET', b.key, field) or ''
    b.blobs[field] = blob
  end
  return blob
end

local function bucket_set(b, field, blob)
  if b.order[field] == nil then
    b.order[field] = true
    b.order[#b.order + 1] = field  -- first-changed order, so the writes are deterministic
  end
  b.blobs[field] = blob
end

-- Reads the buckets of `fields` not read yet with one HMGET (a call from Lua costs about as
-- much as the work on one bucket).
local function buckets_read(b, fields)
  local wanted, seen = {}, {}
  for _, field in ipairs(fields) do
    if b.blobs[field] == nil and not seen[field] then
      seen[field] = true
      wanted[#wanted + 1] = field
    end
  end
  for i = 1, #wanted, 1000 do  -- unpack() is bounded by Lua's stack
    local chunk = {unpack(wanted, i, math.min(i + 999, #wanted))}
    local values = redis.call('HMGET', b.key, unpack(chunk))
    for j, field in ipairs(chunk) do b.blobs[field] = values[j] or '' end
  end
end

local function buckets_write(b)
  local set, gone = {}, {}
  for _, field in ipairs(b.order) do
    local blob = b.blobs[field]
    if blob == '' then
      gone[#gone + 1] = field
    else
      set[#set + 1] = field
      set[#set + 1] = blob
    end
  end
  for i = 1, #set, 1000 do redis.call('HSET', b.key, unpack(set, i, math.min(i + 999, #set))) end
  for i = 1, #gone, 1000 do redis.call('HDEL', b.key, unpack(gone, i, math.min(i + 999, #gone))) end
end

-- Adds `record` to its bucket unless it is there; replies 1 if added.
local function add_record(b, record)
  local field = near_field(record, b.table)
  local blob = bucket_of(b, field)
  if find_record(blob, record, NEAR_WIDTH) ~= nil then return 0 end
  bucket_set(b, field, blob .. record)
  return 1
end

-- Takes `record` out of its bucket; replies 1, or 0 when it was not there.
local function remove_record(b, record)
  local field = near_field(record, b.table)
  local blob = bucket_of(b, field)
  local pos = find_record(blob, record, NEAR_WIDTH)
  if pos == nil then return 0 end
  bucket_set(b, field, without_record(blob, pos, NEAR_WIDTH))
  return 1
end

-- The (settled, pending) working copies of a call's two keys, or nil and an error.
local function near_pair(keys)
  local table = near_table(keys[1])
  if table == nil or table >= NEAR_TABLES or near_table(keys[2]) ~= table then
    return nil, 'a near-duplicate call takes a settled and a pending hash of one table'
  end
  return near_buckets(keys[1], table), near_buckets(keys[2], table)
end

-- A function of (keys, args) that checks the entry's arguments (simhash, token, ...), calls
-- action(settled, pending, record, args) and writes the buckets back.
local function on_entry(action)
  return function(keys, args)
    local err = check_entry(args[1], args[2])
    if err then return fail(err) end
    local settled, pending = near_pair(keys)
    if settled == nil then return fail(pending) end
    local reply = action(settled, pending, args[1] .. args[2], args)
    buckets_write(settled)
    buckets_write(pending)
    return reply
  end
end

-- The 16-byte records of a blob argument, or nil when its length is not a multiple of 16.
local function records_of(blob)
  if #blob % NEAR_WIDTH ~= 0 then return nil end
  local out = {}
  for pos = 1, #blob, NEAR_WIDTH do out[#out + 1] = string.sub(blob, pos, pos + NEAR_WIDTH - 1) end
  return out
end

local function fields_of(records, table)
  local fields = {}
  for i, record in ipairs(records) do fields[i] = near_field(record, table) end
  return fields
end

-- ARGV: simhash, token.  Adds a pending entry (once).
local near_add = on_entry(function(_, pending, record)
  add_record(pending, record)
  return 1
end)

-- ARGV: simhash, token, keep (1 or 0).  Takes the pending entry out and, with keep, enters it
-- among the settled ones.  Replies 1, or 0 when the pending entry was no longer there (a
-- caller whose lease expired and whose entries were reaped: it must decide again).
local near_settle = on_entry(function(settled, pending, record, args)
  if remove_record(pending, record) == 0 then return 0 end
  if args[3] == '1' then add_record(settled, record) end
  return 1
end)

-- ARGV: simhash, token.  Removes a settled entry (a representative replaced or gone).
local near_remove = on_entry(function(settled, _, record)
  return remove_record(settled, record)
end)

-- ARGV: simhash, token.  Enters a settled entry directly (a representative chosen without a
-- race, e.g. a member promoted when its representative left).
local near_put = on_entry(function(settled, _, record)
  add_record(settled, record)
  return 1
end)

-- ARGV: the records of a batch's entries in this group, concatenated.  Adds each as pending
-- (once); replies how many were added.
local function near_add_many(keys, args)
  local settled, pending = near_pair(keys)
  if settled == nil then return fail(pending) end
  local records = records_of(args[1] or '')
  if records == nil then return fail('near_add_many takes 16-byte records') end
  buckets_read(pending, fields_of(records, pending.table))
  local added = 0
  for _, record in ipairs(records) do added = added + add_record(pending, record) end
  buckets_write(pending)
  return added
end

-- ARGV: records, concatenated; keep flags, one '1' or '0' per record.  near_settle for each;
-- replies one '1' or '0' per record ('0': its pending entry was gone, reaped).
local function near_settle_many(keys, args)
  local settled, pending = near_pair(keys)
  if settled == nil then return fail(pending) end
  local records, keep = records_of(args[1] or ''), args[2] or ''
  if records == nil or #keep ~= #records then
    return fail('near_settle_many takes 16-byte records and one keep flag per record')
  end
  local fields, kept = fields_of(records, pending.table), {}
  for i, field in ipairs(fields) do
    if string.sub(keep, i, i) == '1' then kept[#kept + 1] = field end
  end
  buckets_read(pending, fields)
  buckets_read(settled, kept)
  local replies = {}
  for i, record in ipairs(records) do
    if remove_record(pending, record) == 0 then
      replies[i] = '0'
    else
      if string.sub(keep, i, i) == '1' then add_record(settled, record) end
      replies[i] = '1'
    end
  end
  buckets_write(settled)
  buckets_write(pending)
  return table.concat(replies)
end

-- KEYS[1] a pending hash.  ARGV: 2-byte bucket fields, concatenated.  Replies the pending
-- records of those buckets, concatenated: the client tells a record's bucket from its
-- SimHash, and parses one reply per group however many buckets it asked for.  The settled
-- buckets are read with a plain HMGET right after (Lua would copy their bytes three times:
-- at 10^7 documents that was 100 us per decision); pending first, so that a decision that
-- settles between the two reads is seen in one of them.
local function near_pending(keys, args)
  local blob = args[1] or ''
  if #blob % 2 ~= 0 then return fail('near_pending takes 2-byte bucket fields') end
  local fields = {}
  for pos = 1, #blob, 2 do fields[#fields + 1] = string.sub(blob, pos, pos + 1) end
  local pending = near_buckets(keys[1], 0)
  buckets_read(pending, fields)
  local out = {}
  for i, field in ipairs(fields) do out[i] = pending.blobs[field] end
  return table.concat(out)
end

-- LSH band buckets --------------------------------------------------------------------------
-- One (band group, scope) is two hashes in one slot: the buckets of representatives (settled)
-- and, on a cluster, of documents still being decided (pending; one server keeps a decision's
-- band entries as one record instead, see near_open).  A field is one bucket: the band (1 byte)
-- and the top bits of the band hash (2 bytes), which the client computes; the value is a
-- string of 12-byte records (the band hash's low 4 bytes, its tag, and an 8-byte cluster or
-- decision token).  A document's entries in a group are one argument: per band, its 3-byte
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

-- KEYS: hashes of one band group (settled, then pending).  ARGV: entries.  Replies one string:
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

-- Global order of pending decisions ---------------------------------------------------------
-- KEYS[1] the counter, KEYS[2] the hash token -> "order:deadline_ms" of decisions in flight,
-- KEYS[3] the hash token -> scope and band entries of those that have them (one server only,
-- written by near_open): a decision's band record goes when its order entry goes.
-- ARGV: token, lease in ms.  Replies the order number taken.
local function order_take(keys, args)
  local lease = lease_ms(args[2])
  if not lease then return fail(LEASE_ERROR) end
  local order = redis.call('INCR', keys[1])
  redis.call('HSET', keys[2], args[1], order .. ':' .. (now_ms() + lease))
  return order
end

-- ARGV: tokens.  Replies, per token, {order, ms left on its lease} or nil when not in flight.
local function order_get(keys, args)
  local now = now_ms()
  local replies = {}
  for i = 1, #args do
    local value = redis.call('HGET', keys[2], args[i])
    if value then
      local order, deadline = string.match(value, '^(%d+):(%d+)$')
      replies[i] = {tonumber(order), tonumber(deadline) - now}
    else
      replies[i] = false
    end
  end
  return replies
end

-- The value of ``id`` in ``hash`` while ``holder_of(value)`` is ``holder``, else nil: a decision
-- that still holds its order number, a request its process still owns.
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

-- Who holds an entry: the order number of a decision's "order:deadline_ms", the owner of a
-- request's "owner\npayload".
local function order_of(value)
  return string.match(value, '^(%d+):')
end

local function owner_of(value)
  return string.match(value, '^([^\n]*)\n')
end

-- Takes a decision's order entry out and, with it, its band record.
local function order_drop(keys, token)
  redis.call('HDEL', keys[2], token)
  redis.call('HDEL', keys[3], token)
end

-- Ends the decision `token` if it still holds `order`; replies 1, or 0 when it had been reaped.
local function order_end(keys, token, order)
  if not held_by(keys[2], token, order, order_of) then return 0 end
  order_drop(keys, token)
  return 1
end

-- ARGV: token, order.  Ends a decision in flight; replies 1, or 0 when it had been reaped.
local function order_release(keys, args)
  return order_end(keys, args[1], args[2])
end

-- ARGV: token, order, lease ms.  Extends the lease of a decision still in flight (one that
-- waits for an earlier one); replies 1, or 0 when it had been reaped.
local function order_renew(keys, args)
  local lease = lease_ms(args[3])
  if not lease then return fail(LEASE_ERROR) end
  if not held_by(keys[2], args[1], args[2], order_of) then return 0 end
  redis.call('HSET', keys[2], args[1], args[2] .. ':' .. (now_ms() + lease))
  return 1
end

-- ARGV: token, order.  Removes a decision whose lease has run out (its process died);
-- replies 1 if it was removed by this call.
local function order_reap(keys, args)
  local value = held_by(keys[2], args[1], args[2], order_of)
  if not value or tonumber(string.match(value, ':(%d+)$')) >= now_ms() then return 0 end
  order_drop(keys, args[1])
  return 1
end

-- ARGV: lease in ms, then the tokens of a batch.  Takes consecutive order numbers, one per
-- token in argument order, with one INCRBY and one HSET; replies the first number.
-- Takes consecutive order numbers for `tokens` (at least one) under a lease of `lease` ms;
-- returns the first.
local function take_orders(keys, lease, tokens)
  local n = #tokens
  local last = redis.call('INCRBY', keys[1], n)
  local deadline = now_ms() + lease
  local fields = {}
  for i = 1, n do
    fields[#fields + 1] = tokens[i]
    fields[#fields + 1] = (last - n + i) .. ':' .. deadline
    if #fields >= 1000 or i == n then  -- unpack() is bounded by Lua's stack
      redis.call('HSET', keys[2], unpack(fields))
      fields = {}
    end
  end
  return last - n + 1
end

local function order_take_many(keys, args)
  local lease = lease_ms(args[1])
  if not lease then return fail(LEASE_ERROR) end
  if #args < 2 then return fail('order_take_many takes at least one token') end
  local tokens = {}
  for i = 2, #args do tokens[#tokens + 1] = args[i] end
  return take_orders(keys, lease, tokens)
end

-- ARGV: pairs (token, order).  Ends decisions in flight; replies per pair 1, or 0 when it
-- had been reaped.
local function order_release_many(keys, args)
  local replies = {}
  for i = 1, #args, 2 do
    replies[#replies + 1] = order_end(keys, args[i], args[i + 1])
  end
  return replies
end

-- Fused near-duplicate steps, on a standalone server --------------------------------------
-- A server that is not a cluster has no slots, so one call may name keys of every group: each
-- step of a decision (enter and order and read, settle and end, index a representative) is
-- one call there instead of one per slot group, band group and counter.  Never sent to a
-- cluster, where they would be CROSSSLOT; there the per-group functions above run.  One call
-- being atomic makes the insert-then-order-then-check argument (redis_near.py) stronger:
-- nothing runs between a decision's inserts, its order numbers and its reads of the pending
-- entries.

-- The (settled, pending) working copies of `count` key pairs from keys[first], or nil and an error.
local function near_pairs(keys, first, count)
  local pairs_of = {}
  for g = 1, count do
    local settled, pending = near_pair({keys[first + 2 * g - 2], keys[first + 2 * g - 1]})
    if settled == nil then return nil, pending end
    pairs_of[g] = {settled, pending}
  end
  return pairs_of
end

-- The bucket fields of `records` in `table`, each once, in order of first appearance.
local function unique_fields(records, table)
  local fields, seen = {}, {}
  for _, record in ipairs(records) do
    local field = near_field(record, table)
    if not seen[field] then
      seen[field] = true
      fields[#fields + 1] = field
    end
  end
  return fields
end

-- The count of groups ARGV[at] names, checked against the keys from keys[first]; or nil.
local function group_count(keys, args, at, first)
  local count = tonumber(args[at])
  if count == nil or count < 0 or count % 1 ~= 0 or first - 1 + 2 * count > #keys then return nil end
  return count
end

-- KEYS: the order keys (counter, decisions in flight, their band records); G (settled,
-- pending) pairs of near-duplicate groups; the settled hash of each of B band groups.  ARGV:
-- lease ms; G; the decisions' 8-byte tokens, concatenated; the 8-byte scope digest ('' without
-- band groups); per group the 16-byte records of its entries, concatenated; per band group its
-- entries (a batch of one decision).
-- Enters the records as pending and the decision's band record (the scope, its 16-byte record,
-- then every band group's entries) in KEYS[3], takes consecutive order numbers for the tokens,
-- then reads.  With
-- no tokens nothing is entered and no number is taken: the records only name the buckets to
-- read (a decision's later scans).  Replies {first order number, or 0; per group the pending
-- records of the entries' buckets, concatenated; per band group the records of its settled
-- buckets under the entries' tags, as bands_find replies for a settled hash; the band records of
-- the decisions in flight in this scope, each its token then its band entries (this decision's
-- among them); the 16-byte records of the decisions in this scope reaped by this call}.  One band record per decision, not one per band bucket as on a cluster: a decision
-- in flight is found by comparing its entries with these, and entering and ending it are one
-- write each instead of one per band group (a cluster keeps the records in the buckets, so
-- that the work spreads over its masters).  As every decision of the scope reads all of them,
-- one whose lease ran out is reaped here (its order number and band record go), near this one
-- or not, so that a process that died leaves no record every later decision would read; the
-- caller takes its pending entries out, as a decision that reaps one does.  The settled near-duplicate buckets are read with a
-- plain HMGET right after, as near_pending's are.
local function near_open(keys, args)
  local usage = 'near_open takes a lease, a group count, tokens, a scope, records per group and entries per band group'
  local groups = group_count(keys, args, 2, 4)
  if groups == nil then return fail(usage) end
  local tokens = {}
  for pos = 1, #(args[3] or ''), 8 do tokens[#tokens + 1] = string.sub(args[3], pos, pos + 7) end
  local lease = lease_ms(args[1])
  if #tokens > 0 and not lease then return fail(LEASE_ERROR) end
  local scope = args[4] or ''
  local band_key, band_arg = 4 + 2 * groups, 5 + groups
  local band_groups = #args - band_arg + 1
  if #(args[3] or '') % 8 ~= 0 or band_groups < 0 or #keys - band_key + 1 ~= band_groups
      or (band_groups > 0 and (#scope ~= 8 or groups == 0)) then
    return fail(usage)
  end
  if band_groups > 0 and #tokens > 1 then return fail('band buckets go with a batch of one decision') end
  local pairs_of, err = near_pairs(keys, 4, groups)
  if pairs_of == nil then return fail(err) end
  local records = {}
  for g = 1, groups do
    records[g] = records_of(args[4 + g])
    if records[g] == nil then return fail('near_open takes 16-byte records') end
  end
  local band_of = {}
  for g = 1, band_groups do
    band_of[g] = band_fields(args[band_arg + g - 1])
    if band_of[g] == nil then return fail(BAND_USAGE) end
  end
  local fields = {}
  for g = 1, groups do
    local pending = pairs_of[g][2]
    fields[g] = unique_fields(records[g], pending.table)
    buckets_read(pending, fields[g])
    if #tokens > 0 then
      for _, record in ipairs(records[g]) do add_record(pending, record) end
      buckets_write(pending)
    end
  end
  if band_groups > 0 and #tokens > 0 then
    redis.call('HSET', keys[3], tokens[1], scope .. records[1][1] .. table.concat(args, '', band_arg, #args))
  end
  local first = 0
  if #tokens > 0 then first = take_orders(keys, lease, tokens) end
  local in_flight, reaped = {}, {}
  if band_groups > 0 then
    local all, now = redis.call('HGETALL', keys[3]), now_ms()
    for i = 1, #all, 2 do
      local record = all[i + 1]
      if string.sub(record, 1, 8) == scope then
        local held = redis.call('HGET', keys[2], all[i])
        if not held or tonumber(string.match(held, ':(%d+)$')) < now then
          order_drop(keys, all[i])  -- its lease ran out: its process died
          reaped[#reaped + 1] = string.sub(record, 9, 24)
        else
          in_flight[#in_flight + 1] = all[i] .. string.sub(record, 25)
        end
      end
    end
  end
  local found = {}
  for g = 1, band_groups do
    local out = {}
    band_matches(redis.call('HMGET', keys[band_key + g - 1], unpack(band_of[g])), args[band_arg + g - 1], '\0', out)
    found[g] = table.concat(out)
  end
  local pending_out = {}
  for g = 1, groups do
    local out = {}
    for i, field in ipairs(fields[g]) do out[i] = pairs_of[g][2].blobs[field] end
    pending_out[g] = table.concat(out)
  end
  return {first, pending_out, found, in_flight, reaped}
end

-- KEYS: the order keys (as near_open's); G (settled, pending) pairs.  ARGV: G; per group the
-- records of its entries, concatenated, and one keep flag ('1' or '0') per record; then pairs
-- (token, order) of the decisions to end.  near_settle_many for each group, then the order
-- numbers released with the decisions' band records (compare-and-delete: the number of a
-- decision reaped meanwhile is gone, and its release does nothing).  Replies {per group '1' or
-- '0' per record, as near_settle_many; per pair 1, or 0 when it had been reaped}.
local function near_close(keys, args)
  local usage = 'near_close takes a group count, records and keep flags per group and (token, order) pairs'
  local groups = group_count(keys, args, 1, 4)
  if groups == nil then return fail(usage) end
  local pairs_from = 2 + 2 * groups
  if #keys ~= 3 + 2 * groups or pairs_from - 1 > #args or (#args - pairs_from + 1) % 2 ~= 0 then return fail(usage) end
  for g = 1, groups do
    local records, keep = records_of(args[2 * g] or ''), args[2 * g + 1] or ''
    if records == nil or #keep ~= #records then return fail(usage) end
  end
  local settled = {}
  for g = 1, groups do
    settled[g] = near_settle_many({keys[2 + 2 * g], keys[3 + 2 * g]}, {args[2 * g], args[2 * g + 1]})
    if type(settled[g]) ~= 'string' then return settled[g] end  -- an error reply
  end
  local released = {}
  for i = pairs_from, #args, 2 do
    released[#released + 1] = order_end(keys, args[i], args[i + 1])
  end
  return {settled, released}
end

-- near_close with every keep flag '0', for a decision whose writes a full server refused: its
-- pending entries and band record come out, none is settled, and its order numbers end.  It
-- only frees memory, so a full server runs it (allow-oom): the decisions near this one need not
-- wait out its lease.
local function near_abandon(keys, args)
  local groups = group_count(keys, args, 1, 4)
  if groups == nil then return near_close(keys, args) end  -- near_close names the usage
  local kept = {}
  for i = 1, #args do kept[i] = args[i] end
  for g = 1, groups do kept[2 * g + 1] = string.rep('0', #(args[2 * g + 1] or '')) end
  return near_close(keys, kept)
end

-- KEYS: the (settled, pending) pairs of one SimHash's groups, one per table, then settled band
-- hashes.  ARGV: '1' to enter, '0' to take out; the 16-byte record (SimHash, token); per band
-- hash the entries of its group.  A representative entered in (near_put, bands_add) or taken
-- out of (near_remove, bands_remove) every table and band in one call.  Replies how many
-- records changed.
local function near_index(keys, args)
  local enter = args[1] == '1'
  local usage = 'near_index takes 1 or 0, a 16-byte record, and entries per band hash'
  if (args[1] ~= '1' and args[1] ~= '0') or #(args[2] or '') ~= NEAR_WIDTH or #keys < 2 * NEAR_TABLES
      or #args - 2 ~= #keys - 2 * NEAR_TABLES then
    return fail(usage)
  end
  local pairs_of, err = near_pairs(keys, 1, NEAR_TABLES)
  if pairs_of == nil then return fail(err) end
  local band_of = {}
  for i = 3, #args do
    band_of[i - 2] = band_fields(args[i])
    if band_of[i - 2] == nil then return fail(BAND_USAGE) end
  end
  local changed = 0
  for g = 1, NEAR_TABLES do
    local settled = pairs_of[g][1]
    if enter then changed = changed + add_record(settled, args[2]) else changed = changed + remove_record(settled, args[2]) end
    buckets_write(settled)
  end
  local token = string.sub(args[2], 9, 16)
  for i, band_fields_of in ipairs(band_of) do
    changed = changed + band_change(keys[2 * NEAR_TABLES + i], args[i + 2], band_fields_of, token, enter)
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
-- its leases, its decisions' locks and numbers), have the allow-oom flag: a process stopping on
-- a full server still leaves its run and hands its requests over at once.
local WRITERS = {
  {'near_open', near_open}, {'near_close', near_close}, {'near_index', near_index},
  {'near_add_many', near_add_many}, {'near_settle_many', near_settle_many},
  {'order_take_many', order_take_many},
  {'frontier_mark', frontier_mark}, {'frontier_mark_url', frontier_mark_url}, {'variant_count', variant_count},
  {'bands_add', bands_add}, {'bands_remove', bands_remove},
  {'exact_claim', exact_claim}, {'packed_put', packed_put}, {'packed_delete', packed_delete},
  {'near_add', near_add}, {'near_settle', near_settle}, {'near_remove', near_remove}, {'near_put', near_put},
  {'order_take', order_take},
  {'run_join', run_join},
  {'pending_take', pending_take}, {'pending_settle', pending_settle},
  {'pending_reclaim', pending_reclaim}, {'pending_hold', pending_hold}, {'pending_adopt', pending_adopt},
  {'frontier_mark_owe', frontier_mark_owe},
}
local RELEASERS = {
  {'run_renew', run_renew}, {'run_leave', run_leave},
  {'pending_renew', pending_renew}, {'pending_owner_renew', pending_owner_renew},
  {'lock_release', lock_release}, {'near_abandon', near_abandon},
  {'order_release', order_release}, {'order_renew', order_renew}, {'order_reap', order_reap},
  {'order_release_many', order_release_many},
}
local READERS = {
  {'near_pending', near_pending}, {'frontier_peek', frontier_peek},
  {'version', version}, {'bands_find', bands_find}, {'order_get', order_get}, {'packed_get', packed_get},
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
