// Package models embeds the default model bundle, models/default
// (estimator/BUNDLE.md), written by the trainer (`prestroid train`, see
// trainer/). `prestroid serve` and `prestroid estimate` use it when no
// model is configured. It imports no project package.
package models

import (
	"embed"
	"io/fs"
)

//go:embed default
var files embed.FS

// Default returns the embedded default bundle: manifest.json, model.onnx
// ... at the root of the FS.
func Default() fs.FS {
	sub, err := fs.Sub(files, "default")
	if err != nil {
		panic(err) // "default" is a valid path: cannot happen
	}
	return sub
}
