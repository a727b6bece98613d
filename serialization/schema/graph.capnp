@0x97a0b81e103b80b4;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("af::schema");

# Graphs as files and messages: a module of named functions (graphs of op nodes) and the signatures
# that call them. Ops are named, not numbered: a reader looks each name up in its own op
# definitions (ops/graph/op_def.hpp) and refuses names it does not know, and a module written for a
# newer op set than the reader's. Field numbers are the format: new fields go at the end.

struct Module {
  opSetVersion @0 :UInt32;   # the op set the writer knew (af::graph::op_set_version)
  producer @1 :Text;         # "actorflow <version>"
  functions @2 :List(Function);
  signatures @3 :List(Signature);
}

struct Function {
  name @0 :Text;
  graph @1 :Graph;
}

# Nodes in execution order: every input's index is below its user's.
struct Graph {
  nodes @0 :List(Node);
  inputs @1 :List(Binding);    # the parameter nodes in call order, by name
  outputs @2 :List(Binding);   # what the function returns, in order, by name
}

struct Binding {
  name @0 :Text;
  node @1 :Int32;
}

struct ValueType {
  dtype @0 :UInt8;           # af::dtype numeric code
  dims @1 :List(Int64);      # outermost first; -1: known only at run time
}

struct Node {
  op @0 :Text;
  out @1 :ValueType;
  inputs @2 :List(Int32);
  attrs @3 :List(Attr);
  device @4 :Text;           # placement: "" = wherever the executor runs the graph
  label @5 :Text;            # the user's name for it, or the call site that made it
  constant @6 :Data;         # "constant" nodes: the value's bytes, row-major, little-endian
  program @7 :FusedProgram;  # "fused" nodes
}

struct Attr {
  name @0 :Text;
  value :union {
    integer @1 :Int64;
    number @2 :Float64;
    integers @3 :List(Int64);
    numbers @4 :List(Float64);
    text @5 :Text;
  }
}

# A fused group: values 0..inputs-1 are its inputs, step k makes value inputs + k.
struct FusedProgram {
  inputs @0 :List(ValueType);
  steps @1 :List(FusedStep);
}

struct FusedStep {
  op @0 :Text;
  args @1 :List(Int32);
  attrs @2 :List(Attr);
  out @3 :ValueType;
}

# A callable entry point ("serving_default"): which function it runs and the names, dtypes and
# shapes of what it takes and returns (-1 for a dimension any size fits, such as the batch).
struct Signature {
  name @0 :Text;
  function @1 :Text;
  inputs @2 :List(TensorSpec);
  outputs @3 :List(TensorSpec);
  captures @4 :List(Text);   # the function's parameters after the inputs: saved variables by name
  methodName @5 :Text;       # TF's SignatureDef method_name; empty: predict
}

struct TensorSpec {
  name @0 :Text;
  type @1 :ValueType;
}
