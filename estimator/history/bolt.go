package history

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bolt is a Store in one go.etcd.io/bbolt file: it survives restarts. It
// holds at most MaxEntries keys; past that, the least recently updated
// are deleted in the same transaction. Reads are lock-free (a read
// transaction over the memory-mapped file); every Update is one fsynced
// write transaction, so callers batch (the cascade writes each completed
// query's updates in one call, from one goroutine).
type Bolt struct {
	db  *bolt.DB
	max int
	n   atomic.Int64 // keys in bucketStats
}

var (
	// bucketStats maps key → Stats.MarshalBinary.
	bucketStats = []byte("stats")
	// bucketOrder maps Last (8 bytes, big-endian Unix nanoseconds) + key →
	// nothing: the eviction order, oldest first.
	bucketOrder = []byte("order")
)

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating if needed) the store at path, bounded to
// maxEntries keys (≤ 0 means unbounded). A file another process holds
// open fails within a second rather than waiting.
func OpenBolt(path string, maxEntries int) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	b := &Bolt{db: db, max: maxEntries}
	err = db.Update(func(tx *bolt.Tx) error {
		st, err := tx.CreateBucketIfNotExists(bucketStats)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketOrder); err != nil {
			return err
		}
		b.n.Store(int64(st.Stats().KeyN))
		return b.evict(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	return b, nil
}

// Get implements Store.
func (b *Bolt) Get(key string) (s Stats, ok bool) {
	_ = b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStats).Get([]byte(key))
		ok = v != nil && s.UnmarshalBinary(v) == nil
		return nil
	})
	return s, ok
}

var _ Multi = (*Bolt)(nil)

// GetMany implements Multi: one read transaction.
func (b *Bolt) GetMany(keys ...string) ([]Stats, []bool) {
	stats, found := make([]Stats, len(keys)), make([]bool, len(keys))
	_ = b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketStats)
		for i, k := range keys {
			v := bk.Get([]byte(k))
			found[i] = v != nil && stats[i].UnmarshalBinary(v) == nil
			if !found[i] {
				stats[i] = Stats{}
			}
		}
		return nil
	})
	return stats, found
}

func orderKey(last time.Time, key string) []byte {
	k := make([]byte, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(last.UnixNano()))
	copy(k[8:], key)
	return k
}

// Update implements Store.
func (b *Bolt) Update(ups ...Update) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		st, ord := tx.Bucket(bucketStats), tx.Bucket(bucketOrder)
		for _, u := range ups {
			k := []byte(u.Key)
			var cur Stats
			v := st.Get(k)
			ok := v != nil && cur.UnmarshalBinary(v) == nil
			if ok {
				if err := ord.Delete(orderKey(cur.Last, u.Key)); err != nil {
					return err
				}
			} else {
				cur = Stats{}
			}
			next := u.Apply(cur, ok)
			enc, _ := next.MarshalBinary()
			if err := st.Put(k, enc); err != nil {
				return err
			}
			if err := ord.Put(orderKey(next.Last, u.Key), nil); err != nil {
				return err
			}
			if v == nil {
				b.n.Add(1)
			}
		}
		return b.evict(tx)
	})
}

// evict deletes the least recently updated keys past the bound.
func (b *Bolt) evict(tx *bolt.Tx) error {
	if b.max <= 0 {
		return nil
	}
	st, ord := tx.Bucket(bucketStats), tx.Bucket(bucketOrder)
	c := ord.Cursor()
	for k, _ := c.First(); k != nil && b.n.Load() > int64(b.max); k, _ = c.First() {
		key := append([]byte(nil), k...) // k is invalid after Delete
		if err := c.Delete(); err != nil {
			return err
		}
		if len(key) >= 8 {
			if st.Get(key[8:]) != nil {
				if err := st.Delete(key[8:]); err != nil {
					return err
				}
				b.n.Add(-1)
			}
		}
	}
	return nil
}

// Len implements Store.
func (b *Bolt) Len() int { return int(b.n.Load()) }

// Close implements Store.
func (b *Bolt) Close() error { return b.db.Close() }
