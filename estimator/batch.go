package estimator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// batcher runs inference with micro-batching: concurrent requests queued
// while a worker is busy (or within MaxWait of the first) run as one batch.
type batcher struct {
	reqs     chan *inferReq
	maxBatch int
	maxWait  time.Duration
	stop     chan struct{}
	done     chan struct{} // closed once every worker has returned
	wg       sync.WaitGroup
}

type inferReq struct {
	m    *bundle.Model
	f    *featurize.Features
	p    bundle.Prediction // every target the model has
	err  error
	done chan struct{}
}

var reqPool = sync.Pool{New: func() any { return &inferReq{done: make(chan struct{}, 1)} }}

var errServiceClosed = errors.New("estimator: service closed")

func newBatcher(workers, maxBatch int, maxWait time.Duration) *batcher {
	b := &batcher{reqs: make(chan *inferReq, workers*maxBatch*2), maxBatch: maxBatch, maxWait: maxWait, stop: make(chan struct{}), done: make(chan struct{})}
	for i := 0; i < workers; i++ {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// infer queues f for m and waits for its normalized predictions (the CPU
// and whichever targets beyond CPU m has).
func (b *batcher) infer(ctx context.Context, m *bundle.Model, f *featurize.Features) (bundle.Prediction, error) {
	r := reqPool.Get().(*inferReq)
	r.m, r.f, r.err = m, f, nil
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		reqPool.Put(r)
		return bundle.Prediction{}, ctx.Err()
	case <-b.stop:
		reqPool.Put(r)
		return bundle.Prediction{}, errServiceClosed
	}
	// Once queued, the request is answered by a worker (workers drain the
	// queue before they stop), so waiting without ctx keeps r reusable;
	// inference of one batch takes milliseconds. A request queued after
	// the last worker left is never answered: give up on it (and on r).
	select {
	case <-r.done:
	case <-b.done:
		select {
		case <-r.done:
		default:
			return bundle.Prediction{}, errServiceClosed
		}
	}
	p, err := r.p, r.err
	r.m, r.f = nil, nil
	reqPool.Put(r)
	return p, err
}

func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	close(b.done)
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*inferReq, 0, b.maxBatch)
	var timer *time.Timer
	for {
		var first *inferReq
		select {
		case first = <-b.reqs:
		case <-b.stop:
			// Answer anything still queued.
			for {
				select {
				case r := <-b.reqs:
					r.err = errServiceClosed
					r.done <- struct{}{}
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
		if b.maxWait > 0 && b.maxBatch > 1 {
			if timer == nil {
				timer = time.NewTimer(b.maxWait)
			} else {
				timer.Reset(b.maxWait)
			}
		collect:
			for len(batch) < b.maxBatch {
				select {
				case r := <-b.reqs:
					batch = append(batch, r)
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		} else {
		drain:
			for len(batch) < b.maxBatch {
				select {
				case r := <-b.reqs:
					batch = append(batch, r)
				default:
					break drain
				}
			}
		}
		b.run(batch)
	}
}

// run predicts a batch, one model at a time (a reload may put requests
// for two models in one batch).
func (b *batcher) run(batch []*inferReq) {
	fs := make([]*featurize.Features, 0, len(batch))
	for start := 0; start < len(batch); {
		m := batch[start].m
		end := start
		fs = fs[:0]
		for end < len(batch) && batch[end].m == m {
			fs = append(fs, batch[end].f)
			end++
		}
		ps, err := m.PredictAll(fs)
		for i := start; i < end; i++ {
			r := batch[i]
			if err != nil {
				r.err = err
			} else {
				r.p = ps[i-start]
			}
			r.done <- struct{}{}
		}
		start = end
	}
}
