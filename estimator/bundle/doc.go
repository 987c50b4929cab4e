// Package bundle loads a model bundle (../BUNDLE.md) and runs it: the
// manifest, vocabularies and token vectors, the golden cases checked at
// load, and the Model that featurizes and predicts through a Runtime.
//
//	Read, ReadFS, Bundle, Manifest   a bundle directory or fs.FS     bundle.go
//	LoadModel, Model                 golden-checked model; Predict   model.go
//	Stamp, LoadDir                   hot-reload helpers              reload.go
//	Runtime, Session                 the inference seam; estimator/  runtime.go
//	                                 onnx implements it (the only cgo)
//
// Errors wrap ErrBundle (*BundleError, *GoldenError). It imports
// estimator/plan, estimator/featurize and estimator/npy.
package bundle
