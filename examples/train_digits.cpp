// Trains a small CNN (functional API) on the 8x8 digits through the TFRecord pipeline with Adam and
// a cosine schedule, with a backup to resume from after a crash, early stopping, a CSV log and a
// TensorBoard log, and reports test accuracy.
//
//   build/apps/actorflow digits --out data/digits      # once: TFRecords from python3-sklearn's copy
//   build/examples/train_digits data/digits

#include <cstdio>

#include "actors/runtime.hpp"
#include "training/callbacks.hpp"
#include "ops/train/layers.hpp"
#include "training/digits.hpp"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "data/digits";
  af::runtime rt{{.idle_polls = 50}};  // training on few cores: idle workers nap soon
  auto train = af::train::digits_dataset(dir + "/train.tfrecord", 32, /*shuffle=*/true);
  auto test = af::train::digits_dataset(dir + "/test.tfrecord", 128, /*shuffle=*/false);

  auto x = af::nn::input({8, 8, 1}, af::dtype::f32, "image");  // fed by the element field "image"
  auto h = af::nn::conv2d(32, {3, 3}, {.padding = af::padding_mode::same, .activation = "relu"})(x);
  h = af::nn::max_pool2d()(h);
  h = af::nn::dropout(0.25)(af::nn::dense(128, {.activation = "relu"})(af::nn::flatten()(h)));
  auto model = af::nn::model::functional({x}, {af::nn::dense(10)(h)}, {.name = "digits", .seed = 1});
  if (!model) return std::fprintf(stderr, "%s\n", model.error_value().to_string().c_str()), 1;
  std::printf("%s", model->summary().c_str());
  const int epochs = 12;
  auto compiled = model->compile({.optimizer = af::optimizers::optimizer::adam({.learning_rate = 3e-3}),
                                  .learning_rate = af::schedules::cosine_decay(3e-3, epochs * 45),
                                  .loss = {af::nn::sparse_categorical_crossentropy()},
                                  .metrics = {"accuracy"}});
  if (!compiled) return std::fprintf(stderr, "%s\n", compiled.error_value().to_string().c_str()), 1;

  // Kill it mid-run and start it again: it continues from the last backup, exactly.
  auto history = af::train::fit(rt, *model, train,
                                {.epochs = epochs,
                                 .validation_data = test,
                                 .callbacks = {af::train::backup_and_restore("train_digits_backup", 20),
                                               af::train::early_stopping({.monitor = "val_loss", .patience = 3}),
                                               af::train::csv_logger("train_digits.csv"),
                                               af::train::tensorboard("train_digits_logs")},
                                 .seed = 7});
  if (!history) return std::fprintf(stderr, "%s\n", history.error_value().to_string().c_str()), 1;
  auto result = af::train::evaluate(rt, *model, test);
  if (!result) return std::fprintf(stderr, "%s\n", result.error_value().to_string().c_str()), 1;
  std::printf("test loss %.4f, test accuracy %.4f (%lld traces of the training step)\n",
              *af::train::find_log(*result, "loss"), *af::train::find_log(*result, "accuracy"),
              static_cast<long long>(model->train_traces()));
  return 0;
}
