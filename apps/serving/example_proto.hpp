#pragma once

// TF Serving's Input (tf.Examples) and results as protobuf messages, for the gRPC front end and
// its fuzz target. Only apps/serving .cpp files include this: the messages are declared, not
// defined, so that protobuf's headers stay in the files that fill them.

#include "apps/serving/inference.hpp"

namespace tensorflow::serving {
class Input;
class ClassificationResult;
class RegressionResult;
class ModelSpec;
}  // namespace tensorflow::serving

namespace af::serving {

/// The examples an Input holds (an ExampleList, or an ExampleListWithContext with its context).
/// invalid_argument when it holds none ("Input is empty").
expected<example_batch> examples_from_input(const tensorflow::serving::Input& input);

void to_proto(const inference_answer& answer, tensorflow::serving::ClassificationResult& out);
void to_proto(const inference_answer& answer, tensorflow::serving::RegressionResult& out);
/// The model, version and signature that answered.
void to_proto(const inference_answer& answer, tensorflow::serving::ModelSpec& out);

}  // namespace af::serving
