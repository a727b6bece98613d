// Running classify, regress and multi-inference tasks on the model server (kept apart from the
// example decoding in inference.cpp, which the fuzz targets link without the server).

#include <atomic>
#include <mutex>
#include <set>

#include "apps/serving/inference.hpp"
#include "serialization/saved_model.hpp"

namespace af::serving {

namespace {

error invalid(std::string what) { return make_error(errc::invalid_argument, std::move(what)); }

}  // namespace

void infer_async(model_server& models, const model_spec& spec, inference_method method, std::shared_ptr<const example_batch> batch,
                 std::optional<clock_type::time_point> deadline, std::function<void(expected<inference_answer>)> done) {
  auto signature = models.find_signature(spec);
  if (!signature) return done(signature.error_value());
  if (auto fits = check_method(**signature, method); !fits) return done(fits.error_value());
  auto inputs = inputs_from_examples(*batch, **signature);
  if (!inputs) return done(inputs.error_value());
  models.predict_async(spec, std::move(*inputs), deadline, [method, done = std::move(done)](expected<prediction> answer) {
    if (!answer) return done(answer.error_value());
    done(answer_of(*answer, method));
  });
}

void multi_infer_async(model_server& models, std::vector<inference_task> tasks, std::shared_ptr<const example_batch> batch,
                       std::optional<clock_type::time_point> deadline,
                       std::function<void(expected<std::vector<inference_answer>>)> done) {
  if (tasks.empty()) return done(invalid("MultiInference: Expected at least one task"));
  std::set<std::string> signatures;
  for (auto& task : tasks) {
    if (task.spec.name != tasks.front().spec.name)
      return done(invalid("MultiInference: All ModelSpecs in a MultiInferenceRequest must access the same model name"));
    // One version for every task, the first task's (TF Serving holds one servable for all).
    task.spec.version = tasks.front().spec.version;
    task.spec.version_label = tasks.front().spec.version_label;
    const std::string name = task.spec.signature_name.empty() ? std::string{saved_model::default_signature} : task.spec.signature_name;
    if (!signatures.insert(name).second) return done(invalid("MultiInference: Duplicate evaluation of signature: " + name));
  }
  // The tasks run concurrently; the last to finish answers, with the first error if any.
  struct gather {
    std::mutex mtx;
    std::vector<inference_answer> answers;
    std::optional<error> failed;
    std::atomic<std::size_t> left;
    std::function<void(expected<std::vector<inference_answer>>)> done;
  };
  auto state = std::make_shared<gather>();
  state->answers.resize(tasks.size());
  state->left = tasks.size();
  state->done = std::move(done);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    infer_async(models, tasks[i].spec, tasks[i].method, batch, deadline, [state, i](expected<inference_answer> answer) {
      {
        std::lock_guard lock{state->mtx};
        if (answer) state->answers[i] = std::move(*answer);
        else if (!state->failed) state->failed = answer.error_value();
      }
      if (state->left.fetch_sub(1) != 1) return;
      if (state->failed) return state->done(*state->failed);
      state->done(std::move(state->answers));
    });
  }
}

}  // namespace af::serving
