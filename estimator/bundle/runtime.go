package bundle

// The model runtime seam. The estimator package has no cgo: ONNX Runtime is
// reached through these interfaces, implemented by estimator/onnx (the one
// cgo package) and wired by cmd.

// Runtime opens model sessions. Implementations must be safe for concurrent
// use.
type Runtime interface {
	// NewSession opens the ONNX model (its bytes; not kept after return)
	// with the named inputs, fed in that order, and the named outputs
	// (at least one), fetched in that order by every Run.
	NewSession(model []byte, inputs []string, outputs []string) (Session, error)
}

// Session runs one model. Run must be safe for concurrent use (ONNX
// Runtime's Run is); Close is called once, after every Run has returned.
type Session interface {
	// Inputs and Outputs describe the model's declared inputs and outputs
	// (all of them, in model order).
	Inputs() []TensorInfo
	Outputs() []TensorInfo
	// Run feeds one tensor per input (in NewSession order) and returns
	// the outputs, one per NewSession output in that order. Run only reads
	// the inputs and keeps none of them; the returned slices belong to the
	// caller.
	Run(inputs []Tensor) ([]Output, error)
	Close() error
}

// TensorInfo is a model input or output as the model declares it.
type TensorInfo struct {
	Name  string
	DType string  // "int32", "int64", "float32", ... ("" for non-tensors)
	Shape []int64 // -1 for a dynamic (symbolic) dimension
}

// Tensor is a model input: exactly one of Int32 and Float32 is set, with
// product(Shape) elements, row-major.
type Tensor struct {
	Shape   []int64
	Int32   []int32
	Float32 []float32
}

// Output is one model output of a Run: float32 data, row-major, and its
// shape.
type Output struct {
	Data  []float32
	Shape []int64
}
