// Package estimator turns Trino queries into the cost model's inputs, the
// same code for training and serving (DESIGN §2):
//
//	Classify / Explainable      which statements get an EXPLAIN          classify.go
//	ExplainClient.Explain       EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)  explain.go
//	                            as the caller, over the Trino protocol
//	ParsePlan                   plan JSON → stitched plan tree           plan.go
//	BuildOTP, Stats, RenderOTP  plan → Operator-Table-Predicate tree     otp.go
//	ParsePredicate              Trino expression → AND/OR/NOT of clauses predicate.go, predicate_lex.go
//	SampleSubTrees, FullTree    the sub-tree sampler (Algorithm 1)       subtree.go
//	Encoder, WriteNPZ           tensors (layout: TENSORS.md)             tensor.go, vocab.go, predvec.go, npy.go
//	ReadBundle, LoadModel       model bundles (BUNDLE.md), golden checks bundle.go, model.go
//	Runtime, Session            the ONNX seam (cgo lives in estimator/onnx) runtime.go
//	Service                     classify → EXPLAIN → featurize → micro-  service.go, batch.go,
//	                            batched inference; estimate cache keys;  fingerprint.go, reload.go
//	                            bundle hot reload (SIGHUP, file changes)
//
// Errors carry the "estimator:" prefix and wrap sentinel errors
// (ErrBadPlan, ErrPlanTooLarge, ErrPlanCycle, ErrUnknownFragment,
// ErrPredicate, ErrSamplerConfig, ErrEncoder) or are typed (*TrinoError,
// *HTTPError): branch with errors.Is / errors.As. The package uses no cgo and
// never imports proxy.
package estimator
