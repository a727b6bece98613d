@0xb3c1d0a5e7f24a61;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("af::schema");

# The description of a tensor that travels ahead of its raw bytes. The payload itself is never a
# Cap'n Proto field: it follows the header in one contiguous write.
struct TensorHeader {
  dtype @0 :UInt8;           # af::dtype numeric code
  shape @1 :List(Int64);     # dimensions, outermost first
  payloadBytes @2 :UInt64;   # bytes that follow: numel * size_of(dtype), row-major, little-endian
  deviceType @3 :UInt8;      # where it lived on the sender (informational; receivers place it themselves)
  deviceIndex @4 :Int32;
}
