@0x9fc8509ae5c6296c;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("af::schema");

# The `saved_model.afm` file of a SavedModel directory (serialization/saved_model.hpp): what the
# directory is and the graphs it serves. The variables live in `variables/` (a checkpoint, mapped at
# load), the assets in `assets/`, and MANIFEST lists the SHA-256 of every file. Field numbers are the
# format: new fields go at the end.

struct SavedModel {
  formatVersion @0 :UInt32;     # af::saved_model::format_version of the writer
  producer @1 :Text;            # "actorflow <version>"
  createdUnixSeconds @2 :Int64;
  opSetVersion @3 :UInt32;      # the op set of the graphs (also inside `module`)
  tags @4 :List(Text);          # "serve", "train"
  module @5 :Data;              # the functions and signatures, as serialization/graph_codec encodes them
  assets @6 :List(Text);        # file names under assets/
}
