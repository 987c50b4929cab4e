// Package npy reads and writes NumPy's .npy arrays and .npz archives, the
// format the Go featurizer and the Python trainer exchange (training batches
// from featurize.WriteNPZ, golden cases in a bundle). It imports no project
// package.
package npy
