#include "training/digits.hpp"

#include "ops/train/layers.hpp"
#include "pipeline/records.hpp"
#include "serialization/feature_spec.hpp"

namespace af::train {

data::dataset digits_dataset(const std::string& tfrecord_file, int64_t batch_size, bool shuffle) {
  feature_spec spec{{"image", fixed_len(dtype::f32, {8, 8, 1})}, {"label", fixed_len(dtype::i64, {})}};
  auto ds = data::dataset::from_tfrecord({tfrecord_file}).map(data::parse_example_fn(std::move(spec)), 1, true, "parse");
  // The whole set fits one shuffle buffer (1,797 images of 256 bytes).
  if (shuffle) ds = ds.shuffle(2048);
  return ds.batch(static_cast<std::size_t>(batch_size)).prefetch(2);
}

expected<nn::model> digits_mlp(uint64_t seed) {
  return nn::model::sequential(nn::input({8, 8, 1}, dtype::f32, "image"),
                               {nn::flatten(), nn::dense(128, {.activation = "relu"}), nn::dropout(0.1), nn::dense(10)},
                               {.name = "digits_mlp", .seed = seed});
}

expected<nn::model> digits_cnn(uint64_t seed) {
  const nn::conv_options same_relu{.padding = padding_mode::same, .activation = "relu"};
  return nn::model::sequential(nn::input({8, 8, 1}, dtype::f32, "image"),
                               {nn::conv2d(32, {3, 3}, same_relu), nn::max_pool2d(), nn::conv2d(64, {3, 3}, same_relu),
                                nn::max_pool2d(), nn::flatten(), nn::dense(128, {.activation = "relu"}), nn::dropout(0.25),
                                nn::dense(10)},
                               {.name = "digits_cnn", .seed = seed});
}

}  // namespace af::train
