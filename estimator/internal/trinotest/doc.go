// Package trinotest holds the test helpers that the estimator's stage
// packages (plan, featurize, bundle, tablestats) share: the live Trino to EXPLAIN
// against, the workload queries and the captured plans under
// estimator/testdata. Paths are relative to a package directory one level
// below estimator/ (estimator/plan, estimator/featurize...), where tests run.
package trinotest
