// Package estimator is the estimate service (docs/design.md §2, §5.1): classify →
// EXPLAIN as the caller → featurize → micro-batched inference, with the
// estimate cache key and bundle hot reload. The pipeline's stages live in
// sub-packages, each importing only those before it:
//
//	estimator/plan       which statements get an EXPLAIN; the EXPLAIN client;
//	                     plan JSON → plan tree
//	estimator/featurize  plan → O-T-P tree → predicates → sub-trees → tensors
//	estimator/npy        .npy/.npz files (training batches, golden cases)
//	estimator/bundle     model bundles, golden checks, the Model; the
//	                     Runtime/Session seam
//	estimator/onnx       ONNX Runtime behind bundle.Runtime (the only cgo)
//
// In this package:
//
//	Service                     Estimate / EstimatePlan / Reload           service.go, batch.go
//	Fingerprint, EstimateKey    literal-insensitive text; cache keys       fingerprint.go
//	Service.WatchBundle         reload on SIGHUP and file changes          watch.go
//
// Errors carry the "estimator:" prefix and wrap the stages' sentinel errors:
// branch with errors.Is / errors.As. The package uses no cgo and never
// imports proxy.
package estimator
