package tablestats

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/callerhdr"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Options configure a Cache. Zero values are documented per field.
type Options struct {
	// Refresh is the age after which an entry is fetched again (it is
	// served meanwhile). Zero means 1 hour.
	Refresh time.Duration
	// Expire is the age after which an entry is no longer served. Zero
	// means 24 hours.
	Expire time.Duration
	// Retry is how long a failed fetch (no such table, access denied, a
	// dead coordinator) is remembered before the table is asked again.
	// Zero means 5 minutes.
	Retry time.Duration
	// MaxEntries bounds the cache (tables × callers); past it the oldest
	// entries are dropped. Zero means 100,000.
	MaxEntries int
	// Queue bounds the fetches waiting for the worker; beyond it a lookup
	// queues nothing (it is asked again at the next lookup). Zero means 256.
	Queue int
	// Timeout bounds one fetch. Zero means 10 seconds.
	Timeout time.Duration
	// Fetch asks for one table's statistics. Nil means (&Client{}).Fetch.
	Fetch func(ctx context.Context, server string, t plan.TableName, h http.Header) (featurize.TableStats, error)
	// Logger gets one line per failed fetch at debug level. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Cache holds table statistics per table and caller; see the package
// documentation. It is safe for concurrent use.
type Cache struct {
	o       Options
	mu      sync.RWMutex
	entries map[key]*entry
	queue   chan job
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	bytes   int64 // entrySize summed over entries; under mu

	hits, misses, fetched, failed, dropped atomic.Uint64
}

// entrySize is about what one entry takes: its key's strings, the key and
// value pointer in the map, and the entry. The queued fetch's headers
// (short-lived) are not counted.
func entrySize(k key) int64 {
	return int64(len(k.reader)+len(k.table.Catalog)+len(k.table.Schema)+len(k.table.Table)) +
		int64(unsafe.Sizeof(k)) + 8 + int64(unsafe.Sizeof(entry{}))
}

// putLocked stores a new entry under k.
func (c *Cache) putLocked(k key, e *entry) {
	if _, ok := c.entries[k]; !ok {
		c.bytes += entrySize(k)
	}
	c.entries[k] = e
}

// deleteLocked drops k's entry.
func (c *Cache) deleteLocked(k key) {
	if _, ok := c.entries[k]; ok {
		c.bytes -= entrySize(k)
		delete(c.entries, k)
	}
}

type key struct {
	reader string
	engine dialect.Engine // Trino's (and Unknown's) entries are "": a table of a PrestoDB cluster is another
	table  plan.TableName
}

type entry struct {
	stats    featurize.TableStats
	ok       bool      // fetched without error
	at       time.Time // when fetched (or failed)
	inFlight bool      // a fetch is queued or running
}

type job struct {
	k      key
	server string
	h      http.Header
}

// New starts a cache and its worker; Close stops it.
func New(o Options) *Cache {
	if o.Refresh <= 0 {
		o.Refresh = time.Hour
	}
	if o.Expire <= 0 {
		o.Expire = 24 * time.Hour
	}
	if o.Retry <= 0 {
		o.Retry = 5 * time.Minute
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Fetch == nil {
		o.Fetch = (&Client{}).Fetch
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Cache{o: o, entries: map[key]*entry{}, queue: make(chan job, o.Queue), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.work()
	return c
}

// Lookup returns the statistics of each table (in order) as the caller h
// may see them, without waiting: Known is false for a table not fetched
// yet for this caller, or whose fetch failed. A missing or stale entry is
// queued for a fetch on server (the coordinator that plans the caller's
// statements) with the caller's headers (only those callerhdr.Forward
// keeps are held). A nil Cache knows nothing.
func (c *Cache) Lookup(server string, tables []plan.TableName, h http.Header) []featurize.TableStats {
	return c.LookupOn(server, dialect.Trino, tables, h)
}

// LookupOn is Lookup on a coordinator of the given engine: h is the
// caller's canonical session (X-Trino-* names), renamed for the engine
// when the fetch is sent, and the entries of each engine are apart.
func (c *Cache) LookupOn(server string, engine dialect.Engine, tables []plan.TableName, h http.Header) []featurize.TableStats {
	if engine == dialect.Trino {
		engine = dialect.Unknown
	}
	if len(tables) == 0 {
		return nil
	}
	out := make([]featurize.TableStats, len(tables))
	if c == nil {
		return out
	}
	reader := ReaderKey(h)
	t := now()
	var want []key
	c.mu.RLock()
	for i, tb := range tables {
		k := key{reader, engine, tb}
		e := c.entries[k]
		switch {
		case e == nil:
			want = append(want, k)
			c.misses.Add(1)
			continue
		case e.ok && t.Sub(e.at) < c.o.Expire:
			out[i] = e.stats
			c.hits.Add(1)
		default:
			c.misses.Add(1)
		}
		if !e.inFlight && (e.ok && t.Sub(e.at) >= c.o.Refresh || !e.ok && t.Sub(e.at) >= c.o.Retry) {
			want = append(want, k)
		}
	}
	c.mu.RUnlock()
	if len(want) > 0 && server != "" {
		c.request(server, want, h, t)
	}
	return out
}

// request queues fetches of keys not already in flight.
func (c *Cache) request(server string, keys []key, h http.Header, t time.Time) {
	var hdr http.Header
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		e := c.entries[k]
		if e != nil && e.inFlight {
			continue
		}
		if hdr == nil {
			hdr = dialect.For(callerhdr.Copy(h, 0), k.engine)
		}
		select {
		case c.queue <- job{k: k, server: server, h: hdr}:
		default:
			c.dropped.Add(1)
			continue
		}
		if e == nil {
			c.evictLocked()
			e = &entry{at: t}
			c.putLocked(k, e)
		}
		e.inFlight = true
	}
}

// evictLocked drops the oldest tenth of the entries once the cache is full.
func (c *Cache) evictLocked() {
	if len(c.entries) < c.o.MaxEntries {
		return
	}
	oldest := now()
	for _, e := range c.entries {
		if e.at.Before(oldest) {
			oldest = e.at
		}
	}
	// The cut that drops about a tenth: between the oldest and now.
	cut := oldest.Add(now().Sub(oldest) / 10)
	for k, e := range c.entries {
		if !e.inFlight && !e.at.After(cut) {
			c.deleteLocked(k)
		}
	}
	for k, e := range c.entries { // still full (all recent): drop any
		if len(c.entries) < c.o.MaxEntries {
			break
		}
		if !e.inFlight {
			c.deleteLocked(k)
		}
	}
}

func (c *Cache) work() {
	defer close(c.done)
	for {
		select {
		case <-c.ctx.Done():
			return
		case j := <-c.queue:
			ctx, cancel := context.WithTimeout(c.ctx, c.o.Timeout)
			st, err := c.o.Fetch(ctx, j.server, j.k.table, j.h)
			cancel()
			if c.ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			e := c.entries[j.k]
			if e == nil {
				e = &entry{}
				c.putLocked(j.k, e)
			}
			e.inFlight, e.at = false, now()
			if err != nil {
				c.failed.Add(1)
				// A refresh that fails keeps serving what it had until
				// Expire; a first fetch that fails is retried after Retry.
				if !e.ok {
					e.stats = featurize.TableStats{}
				}
				c.o.Logger.Debug("table statistics not read", "table", j.k.table.String(), "err", err)
			} else {
				c.fetched.Add(1)
				e.stats, e.ok = st, true
			}
			c.mu.Unlock()
		}
	}
}

// Stats are the cache's counters.
type Stats struct {
	Entries int
	// Bytes is about what the entries take (keys' strings, map slots,
	// entries).
	Bytes                                  int64
	Hits, Misses, Fetched, Failed, Dropped uint64
}

// Stats reports the cache's size and counters.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.RLock()
	n, b := len(c.entries), c.bytes
	c.mu.RUnlock()
	return Stats{Entries: n, Bytes: b, Hits: c.hits.Load(), Misses: c.misses.Load(), Fetched: c.fetched.Load(),
		Failed: c.failed.Load(), Dropped: c.dropped.Load()}
}

// Close stops the worker (a fetch in flight is cancelled).
func (c *Cache) Close() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
}

// Seed stores st as the statistics of t for the caller h, fetched now, as
// a fetch would (benchmarks and tests that have no coordinator).
func (c *Cache) Seed(t plan.TableName, h http.Header, st featurize.TableStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictLocked()
	c.putLocked(key{reader: ReaderKey(h), table: t}, &entry{stats: st, ok: true, at: now()})
}
