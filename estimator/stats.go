package estimator

// QueueDepth is the number of inferences queued for a batch right now (the
// batcher's backlog): a gauge for /metrics. Caches report their own
// counters (cache.Stats); the caller that built them exports those.
func (s *Service) QueueDepth() int { return len(s.b.reqs) }
