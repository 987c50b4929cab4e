// Package onnx runs models with ONNX Runtime through
// github.com/yalue/onnxruntime_go. It is the only package of the project that
// uses cgo; it implements estimator.Runtime.
//
// The ONNX Runtime shared library is not part of the Go module: install it
// with `make ort` (scripts/install-ort.sh: libonnxruntime.so.1 1.30.0 from the
// npm package onnxruntime-node@1.30.0, the CPU build) and point
// PRESTROID_ORT_LIB, the config key estimator.ort_lib or --ort-lib at it.
//
// GPU: a CUDA build of the library ships inside the Maven artifact
// com.microsoft.onnxruntime:onnxruntime_gpu (version 1.30.0). Unzip the jar;
// ai/onnxruntime/native/linux-x64/ holds libonnxruntime.so with
// libonnxruntime_providers_shared.so and libonnxruntime_providers_cuda.so,
// which must stay in the same directory. Point the library path at that
// libonnxruntime.so and set Options.CUDA (config estimator.cuda: true). The
// machine needs the CUDA and cuDNN versions that release was built for.
package onnx

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/prestroid/prestroid/estimator/bundle"
	ort "github.com/yalue/onnxruntime_go"
)

// ErrLibrary is wrapped by failures to find or load the shared library.
var ErrLibrary = errors.New("onnx: ONNX Runtime library")

// Options configure a Runtime.
type Options struct {
	// LibraryPath is the ONNX Runtime shared library (libonnxruntime.so.1).
	// Required. One process loads one library: every Runtime of a process
	// must name the same path.
	LibraryPath string
	// IntraOpThreads is the size of each session's intra-op thread pool.
	// Zero means 1: serving runs many small batches concurrently, and one
	// thread per Run scales better than a shared pool fighting for cores.
	// Negative means ONNX Runtime's default (one per core).
	IntraOpThreads int
	// CUDA appends the CUDA execution provider (device CUDADevice) before
	// the CPU one. It needs a GPU build of the library (see the package
	// doc); with the CPU build, opening a session fails with an error
	// naming the provider.
	CUDA       bool
	CUDADevice int
}

var (
	envMu   sync.Mutex
	envPath string // library the process environment was initialized with
)

// initEnv loads the library and creates the ONNX Runtime environment once
// per process.
func initEnv(path string) error {
	envMu.Lock()
	defer envMu.Unlock()
	if envPath != "" {
		if path != envPath {
			return fmt.Errorf("%w: already initialized with %s, cannot switch to %s", ErrLibrary, envPath, path)
		}
		return nil
	}
	if err := checkLibrary(path); err != nil {
		return err
	}
	ort.SetSharedLibraryPath(path)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("%w: loading %s: %v", ErrLibrary, path, err)
	}
	envPath = path
	return nil
}

// checkLibrary explains a missing or misconfigured library path before
// dlopen gets a chance to give a vaguer message.
func checkLibrary(path string) error {
	if path == "" {
		return fmt.Errorf("%w: no library path configured (set PRESTROID_ORT_LIB, estimator.ort_lib or --ort-lib; `make ort` installs it)", ErrLibrary)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v (install it with `make ort` or scripts/install-ort.sh)", ErrLibrary, path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%w: %s is a directory, want the libonnxruntime.so file", ErrLibrary, path)
	}
	return nil
}

// Version returns the loaded ONNX Runtime's version ("" before a Runtime
// was created).
func Version() string {
	envMu.Lock()
	defer envMu.Unlock()
	if envPath == "" {
		return ""
	}
	return ort.GetVersion()
}

// Runtime opens ONNX Runtime sessions. It implements estimator.Runtime.
type Runtime struct {
	opts Options
}

var _ bundle.Runtime = (*Runtime)(nil)

// New loads the library (once per process) and returns a Runtime.
func New(o Options) (*Runtime, error) {
	if err := initEnv(o.LibraryPath); err != nil {
		return nil, err
	}
	return &Runtime{opts: o}, nil
}

// NewSession implements estimator.Runtime.
func (r *Runtime) NewSession(model []byte, inputs []string, outputs []string) (bundle.Session, error) {
	if len(outputs) == 0 {
		return nil, errors.New("onnx: a session needs at least one output")
	}
	ins, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("onnx: reading the model's inputs: %w", err)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer so.Destroy()
	threads := r.opts.IntraOpThreads
	if threads == 0 {
		threads = 1
	}
	if threads > 0 {
		if err := so.SetIntraOpNumThreads(threads); err != nil {
			return nil, fmt.Errorf("onnx: intra-op threads: %w", err)
		}
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: inter-op threads: %w", err)
	}
	if r.opts.CUDA {
		co, err := ort.NewCUDAProviderOptions()
		if err != nil {
			return nil, fmt.Errorf("onnx: CUDA execution provider: %w", err)
		}
		err = co.Update(map[string]string{"device_id": fmt.Sprint(r.opts.CUDADevice)})
		if err == nil {
			err = so.AppendExecutionProviderCUDA(co)
		}
		co.Destroy()
		if err != nil {
			return nil, fmt.Errorf("onnx: CUDA execution provider (needs the GPU build of ONNX Runtime, see estimator/onnx docs): %w", err)
		}
	}
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(model, inputs, outputs, so)
	if err != nil {
		return nil, fmt.Errorf("onnx: opening the session: %w", err)
	}
	return &session{s: s, inputs: infos(ins), outputs: infos(outs), nout: len(outputs)}, nil
}

func infos(in []ort.InputOutputInfo) []bundle.TensorInfo {
	out := make([]bundle.TensorInfo, len(in))
	for i, x := range in {
		ti := bundle.TensorInfo{Name: x.Name, Shape: append([]int64(nil), x.Dimensions...)}
		if x.OrtValueType == ort.ONNXTypeTensor {
			ti.DType = dtype(x.DataType)
		}
		out[i] = ti
	}
	return out
}

func dtype(t ort.TensorElementDataType) string {
	switch t {
	case ort.TensorElementDataTypeFloat:
		return "float32"
	case ort.TensorElementDataTypeDouble:
		return "float64"
	case ort.TensorElementDataTypeInt32:
		return "int32"
	case ort.TensorElementDataTypeInt64:
		return "int64"
	case ort.TensorElementDataTypeInt8:
		return "int8"
	case ort.TensorElementDataTypeUint8:
		return "uint8"
	case ort.TensorElementDataTypeBool:
		return "bool"
	case ort.TensorElementDataTypeFloat16:
		return "float16"
	}
	return fmt.Sprintf("onnx-type-%d", int(t))
}

type session struct {
	s               *ort.DynamicAdvancedSession
	inputs, outputs []bundle.TensorInfo
	nout            int // outputs fetched by Run
}

func (s *session) Inputs() []bundle.TensorInfo  { return s.inputs }
func (s *session) Outputs() []bundle.TensorInfo { return s.outputs }

// Run implements estimator.Session. The input tensors wrap the callers'
// slices without copying (ONNX Runtime only reads them during Run); the
// outputs are copied out of ONNX Runtime's tensors.
func (s *session) Run(inputs []bundle.Tensor) ([]bundle.Output, error) {
	vals := make([]ort.Value, len(inputs))
	defer func() {
		for _, v := range vals {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for i, in := range inputs {
		var err error
		switch {
		case in.Int32 != nil:
			vals[i], err = ort.NewTensor(ort.Shape(in.Shape), in.Int32)
		case in.Float32 != nil:
			vals[i], err = ort.NewTensor(ort.Shape(in.Shape), in.Float32)
		default:
			err = errors.New("no data")
		}
		if err != nil {
			return nil, fmt.Errorf("onnx: input %d: %w", i, err)
		}
	}
	outs := make([]ort.Value, s.nout)
	if err := s.s.Run(vals, outs); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer func() {
		for _, v := range outs {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	res := make([]bundle.Output, len(outs))
	for i, o := range outs {
		t, ok := o.(*ort.Tensor[float32])
		if !ok {
			return nil, fmt.Errorf("onnx: output %d is %T, want a float32 tensor", i, o)
		}
		res[i] = bundle.Output{Data: append([]float32(nil), t.GetData()...), Shape: append([]int64(nil), t.GetShape()...)}
	}
	return res, nil
}

func (s *session) Close() error { return s.s.Destroy() }
