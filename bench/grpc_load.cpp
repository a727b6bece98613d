#include "bench/grpc_load.hpp"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "apps/serving/tensor_proto.hpp"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace af::bench {

namespace tfs = tensorflow::serving;
using clock_type = std::chrono::steady_clock;

namespace {

// One outstanding call: its context, answer and status live until the completion queue hands
// the slot back.
struct call_slot {
  std::size_t channel = 0;
  std::unique_ptr<grpc::ClientContext> context;
  tfs::PredictResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<tfs::PredictResponse>> reader;
};

}  // namespace

grpc_load_result run_grpc_closed_loop(const tensor& rows, const grpc_load_options& options) {
  // As the server does (grpc_server.cpp): Debian's Abseil leaves its Mutex deadlock detection on,
  // a cost per call that a release build of Abseil does not have.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc_load_result result;
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name(options.model);
  if (auto done = serving::to_tensor_proto(rows, (*request.mutable_inputs())[options.input]); !done) {
    result.first_error = done.error_value().message;
    return result;
  }
  // A channel of its own per connection: channels with equal arguments would share one.
  std::vector<std::unique_ptr<tfs::PredictionService::Stub>> stubs;
  for (std::size_t i = 0; i < std::max<std::size_t>(options.channels, 1); ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("af.bench.channel", static_cast<int>(i));
    args.SetMaxReceiveMessageSize(-1);
    stubs.push_back(tfs::PredictionService::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(options.port), grpc::InsecureChannelCredentials(), args)));
  }
  grpc::CompletionQueue queue;
  std::vector<call_slot> slots(std::max<std::size_t>(options.in_flight, 1));
  auto send = [&](call_slot& slot) {
    slot.context = std::make_unique<grpc::ClientContext>();
    slot.context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    slot.reader = stubs[slot.channel]->PrepareAsyncPredict(slot.context.get(), request, &queue);
    slot.reader->StartCall();
    slot.reader->Finish(&slot.response, &slot.status, &slot);
  };
  const auto started = clock_type::now();
  const auto counted_from = started + options.warmup;
  const auto until = counted_from + options.duration;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    slots[i].channel = i % stubs.size();
    send(slots[i]);
  }
  std::size_t outstanding = slots.size();
  void* tag = nullptr;
  bool ok = false;
  clock_type::time_point last_answer = counted_from;
  while (outstanding > 0 && queue.Next(&tag, &ok)) {
    auto& slot = *static_cast<call_slot*>(tag);
    const auto now = clock_type::now();
    if (now >= counted_from && now < until) {
      last_answer = now;
      if (ok && slot.status.ok()) {
        ++result.ok;
      } else {
        ++result.failed;
        if (result.first_error.empty()) result.first_error = slot.status.error_message();
      }
    }
    if (now < until) send(slot);
    else --outstanding;
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  result.seconds = std::chrono::duration<double>(last_answer - counted_from).count();
  result.ok_per_second = result.seconds > 0 ? static_cast<double>(result.ok) / result.seconds : 0;
  return result;
}

}  // namespace af::bench
