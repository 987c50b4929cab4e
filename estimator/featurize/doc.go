// Package featurize turns a plan into the cost model's input tensors, the
// same code for training and serving (docs/design.md §2.2–2.5):
//
//	BuildOTP, Stats, RenderOTP    plan → Operator-Table-Predicate tree;    otp.go, vocab.go
//	OTPNode.Walk / WalkDepth      the one walker over it
//	ParsePredicate                Trino expression → AND/OR/NOT of clauses predicate*.go
//	                              (tokens: internal/sqllex's Expr dialect)
//	SampleSubTrees, FullTree      the sub-tree sampler (Algorithm 1)       subtree.go
//	Encoder, FromPlan, WriteNPZ   tensors (layout: ../TENSORS.md)          tensor.go, predvec.go
//	Vocab, BuildVocabs            operator and table vocabularies          vocab.go
//
// Errors wrap ErrPredicate, ErrSamplerConfig or ErrEncoder. It imports
// estimator/plan (and estimator/npy for the training batches), nothing above.
package featurize
