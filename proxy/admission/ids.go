package admission

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewID is a new admission id: shaped like a Trino query id (it starts
// with the time it was made), unique, never one Trino issues.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102_150405") + "_prestroid_" + hex.EncodeToString(b[:])
}

// IDTime is when an admission id (NewID) was made (its prefix), zero when unreadable.
func IDTime(id string) time.Time {
	if len(id) < 15 {
		return time.Time{}
	}
	t, _ := time.Parse("20060102_150405", id[:15])
	return t
}

// Header is a request's headers as GroupOf reads them
// (*fasthttp.RequestHeader is one).
type Header interface {
	Peek(name string) []byte
}

// GroupOf is user's group: the request's GroupHeader when that is set and
// present, else UserGroups' entry, else the user. o may be nil.
func (o *Options) GroupOf(user string, h Header) string {
	if o == nil {
		return user
	}
	if o.GroupHeader != "" {
		if g := h.Peek(o.GroupHeader); len(g) > 0 {
			return string(g)
		}
	}
	if g, ok := o.UserGroups[user]; ok {
		return g
	}
	return user
}
