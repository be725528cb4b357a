package shared

import (
	"context"
	"encoding/hex"
	"errors"
	"net/url"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rotor-lb/rotor/balance"
)

// outcomeScript applies outcomes to an endpoint's shared state, in order
// and all in one atomic step: the EWMAs (as health.State learns), the
// counters, and the breaker's transitions. Closed: a failure counts, and
// the threshold-th in a row opens it until now + cooldown; a success
// resets the count. Open: only a probe's outcome (or a request let past
// because nothing was available) moves it: success closes, failure
// reopens once the cooldown is over. Each transition bumps gen, which is
// how the other instances know to adopt it. An endpoint not heard of for
// a day is forgotten.
//
// KEYS[1] the endpoint's hash. ARGV: eight values per outcome: ok (1/0),
// latency in seconds, now in Unix ms, success decay, latency decay,
// threshold, cooldown in ms, probe (1/0).
var outcomeScript = redis.NewScript(`
local k = KEYS[1]
local h = redis.call('HMGET', k, 'success', 'latency', 'timed', 'consecutive', 'breaker', 'open_until', 'gen')
local success = tonumber(h[1]) or 1
local latency = tonumber(h[2]) or 0
local timed = h[3] == '1'
local consecutive = tonumber(h[4]) or 0
local open = h[5] == '1'
local open_until = tonumber(h[6]) or 0
local gen = tonumber(h[7]) or 0
local succ, fail, opens = 0, 0, 0
for i = 1, #ARGV, 8 do
  local ok = ARGV[i] == '1'
  local lat, now = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local sd, ld = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local thr, cool = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local probe = ARGV[i + 7] == '1'
  local x = 0
  if ok then x = 1 end
  success = sd * x + (1 - sd) * success
  if ok then
    if timed then latency = ld * lat + (1 - ld) * latency else latency = lat; timed = true end
    succ = succ + 1
  else
    fail = fail + 1
  end
  if not open then
    if ok then
      consecutive = 0
    else
      consecutive = consecutive + 1
      if consecutive >= thr then
        open, open_until, gen, consecutive = true, now + cool, gen + 1, 0
        opens = opens + 1
      end
    end
  elseif probe then
    if ok then
      open, consecutive, gen = false, 0, gen + 1
    elseif now >= open_until then
      open_until, gen = now + cool, gen + 1
    end
  end
end
local b = '0'
if open then b = '1' end
local t = '0'
if timed then t = '1' end
redis.call('HSET', k, 'success', string.format('%.17g', success), 'latency', string.format('%.17g', latency),
  'timed', t, 'consecutive', consecutive, 'breaker', b, 'open_until', open_until, 'gen', gen)
redis.call('HINCRBY', k, 'samples', succ + fail)
if succ > 0 then redis.call('HINCRBY', k, 'successes', succ) end
if fail > 0 then redis.call('HINCRBY', k, 'failures', fail) end
if opens > 0 then redis.call('HINCRBY', k, 'opens', opens) end
redis.call('PEXPIRE', k, 86400000)
return gen
`)

// claimScript pins a sticky key to an endpoint, unless (replace 0) another
// instance pinned it first: either way it returns the pin in force and
// keeps it alive for ttl. The pins of a pool are bounded like the local
// table: an index of the pins by last use drops the expired and, past
// max, the least recently used. KEYS[1] the pin, KEYS[2] the pool's index
// (one hash slot, for Redis Cluster). ARGV: endpoint, ttl in ms, now in
// Unix ms, max, replace (1/0).
var claimScript = redis.NewScript(`
local ttl, now, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[5] ~= '1' then
  local cur = redis.call('GET', KEYS[1])
  if cur then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('ZADD', KEYS[2], now, KEYS[1])
    return cur
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
if not redis.call('ZSCORE', KEYS[2], KEYS[1]) then
  local n = redis.call('ZCARD', KEYS[2])
  if n >= max then
    local old = redis.call('ZPOPMIN', KEYS[2], n - max + 1)
    for i = 1, #old, 2 do redis.call('DEL', old[i]) end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
return ARGV[1]
`)

// ErrDegraded means Redis is out of reach: the caller decides alone.
var ErrDegraded = errors.New("state store out of reach")

// Sticky shares one pool's sticky table: balance.StickyShare.
type Sticky struct {
	c     *Client
	index string
	base  string
	max   int
}

var _ balance.StickyShare = (*Sticky)(nil)

// Sticky returns the shared sticky table of a pool, bounded to max pins.
func (c *Client) Sticky(pool string, max int) *Sticky {
	tag := "{" + url.PathEscape(pool) + "}" // a pool's pins share a hash slot with its index
	return &Sticky{c: c, index: c.o.Prefix + "sticky:" + tag + ":index", base: c.o.Prefix + "sticky:" + tag + ":k:", max: max}
}

// pin is a key's Redis key: its hash, so that no client-chosen text (a
// session id, say) is stored, and every key has the same short length.
func (s *Sticky) pin(key string) string {
	var b [8]byte
	h := xxhash.Sum64String(key)
	for i := range b {
		b[i] = byte(h >> (56 - 8*i))
	}
	return s.base + hex.EncodeToString(b[:])
}

// Claim pins key to name unless another instance pinned it first (or,
// with replace, in any case), and returns the pin in force. It waits on
// Redis at most Timeout; while Redis is out of reach it fails at once.
func (s *Sticky) Claim(key, name string, ttl time.Duration, replace bool) (string, error) {
	if s.c.degraded.Load() {
		return "", ErrDegraded
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.o.Timeout)
	defer cancel()
	r := 0
	if replace {
		r = 1
	}
	got, err := claimScript.Run(ctx, s.c.rdb, []string{s.pin(key), s.index}, name, ttl.Milliseconds(), nowMS(), s.max, r).Text()
	if err != nil {
		s.c.fail(err)
		return "", err
	}
	s.c.claims.Add(1)
	s.c.failing.Store(0)
	return got, nil
}

// Touch keeps key's pin alive for ttl, without waiting (a queued write).
func (s *Sticky) Touch(key, name string, ttl time.Duration) {
	s.c.enqueue(op{key: s.pin(key), touch: &touch{index: s.index, name: name, ttl: ttl, max: s.max}})
}

// Pins counts the pool's pins in Redis, expired ones not yet dropped
// included: for tests and tools.
func (s *Sticky) Pins(ctx context.Context) (int64, error) {
	return s.c.rdb.ZCard(ctx, s.index).Result()
}

// Owner returns the endpoint key is pinned to in Redis, "" if none.
func (s *Sticky) Owner(ctx context.Context, key string) (string, error) {
	v, err := s.c.rdb.Get(ctx, s.pin(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
