// The CPU backend: kernels from the op definitions (or a given table), fused programs through the
// CPU code generator, tensors in host memory, every call run to completion on the calling thread
// (kernels split their work over the kernel pool themselves). Also the table of device kinds.

#include <map>
#include <mutex>
#include <thread>

#include "ops/codegen/cpu_fused.hpp"
#include "ops/runtime/backend.hpp"

namespace af {

expected<tensor> backend::run_node(const graph::node& n, const graph::fused_program* program,
                                   const std::vector<tensor>& inputs, const tensor* reuse) {
  if (program) return run_fused(*program, inputs, reuse);
  AF_TRY_ASSIGN(auto outputs, run(n.op, inputs, n.attrs));
  if (outputs.size() != 1)
    return make_error(errc::invalid_argument, n.op + " on " + properties().name + ": " + std::to_string(outputs.size()) +
                                                  " outputs where a graph node has one");
  return std::move(outputs.front());
}

namespace {

class cpu_backend final : public backend {
 public:
  explicit cpu_backend(cpu_backend_options o)
      : memory_(std::move(o.memory)),
        kernels_(o.kernels ? std::move(o.kernels) : default_op_registry()) {
    props_.name = std::move(o.name);
    props_.where = device::cpu();
    props_.description = "CPU, " + std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
    props_.host_memory = true;
  }

  const backend_properties& properties() const noexcept override { return props_; }
  const std::shared_ptr<allocator>& memory() const noexcept override { return memory_ ? memory_ : cpu_allocator(); }

  bool supports(const graph::op_def& op) const override {
    return op.category == graph::op_category::source || op.category == graph::op_category::fused ||
           kernels_->contains(op.name);
  }

  expected<std::vector<tensor>> run(const std::string& op, const std::vector<tensor>& inputs,
                                    const op_attrs& attrs) override {
    allocator_scope here{memory()};  // outputs and temporaries in this device's memory
    return kernels_->run(op, inputs, attrs);
  }

  expected<tensor> run_fused(const graph::fused_program& program, const std::vector<tensor>& inputs,
                             const tensor* reuse) override {
    allocator_scope here{memory()};
    return codegen::run_fused_cpu(program, inputs, reuse);
  }

  expected<tensor> from_host(const tensor& t) override { return t; }
  expected<tensor> to_host(const tensor& t) override { return t; }
  expected<void> synchronize() override { return {}; }

 private:
  backend_properties props_;
  std::shared_ptr<allocator> memory_;  // null: the allocator current at each call
  std::shared_ptr<const op_registry> kernels_;
};

struct device_kinds {
  std::mutex mtx;
  std::map<std::string, op_support, std::less<>> kinds;
  device_kinds() {
    kinds["cpu"] = [](const graph::op_def& op) {
      return op.category == graph::op_category::source || op.category == graph::op_category::fused ||
             static_cast<bool>(op.cpu_kernel);
    };
  }
};

device_kinds& kinds() {
  static device_kinds table;
  return table;
}

}  // namespace

std::shared_ptr<backend> make_cpu_backend(cpu_backend_options options) {
  return std::make_shared<cpu_backend>(std::move(options));
}

backend& default_cpu_backend() {
  static const std::shared_ptr<backend> cpu = make_cpu_backend();
  return *cpu;
}

void register_device_kind(std::string kind, op_support supports) {
  auto& table = kinds();
  std::lock_guard<std::mutex> guard{table.mtx};
  table.kinds[std::move(kind)] = std::move(supports);
}

namespace {

std::string_view kind_of(std::string_view device) { return device.substr(0, device.find(':')); }

expected<void> known_kind(const device_kinds& table, std::string_view device) {
  if (table.kinds.count(kind_of(device))) return {};
  std::string known;
  for (const auto& [name, fn] : table.kinds) known += (known.empty() ? "" : ", ") + name;
  return make_error(errc::unsupported, "device '" + std::string{device} + "': no backend for devices of kind '" +
                                           std::string{kind_of(device)} + "' (there are: " + known + ")");
}

}  // namespace

expected<void> check_device_kind(std::string_view device) {
  if (device.empty()) return {};
  auto& table = kinds();
  std::lock_guard<std::mutex> guard{table.mtx};
  return known_kind(table, device);
}

expected<void> check_placement(std::string_view device, const graph::op_def& op) {
  if (device.empty()) return {};
  auto& table = kinds();
  std::lock_guard<std::mutex> guard{table.mtx};
  auto known = known_kind(table, device);
  if (!known) return make_error(errc::unsupported, "op '" + op.name + "' placed on " + known.error_value().message);
  if (!table.kinds.find(kind_of(device))->second(op))
    return make_error(errc::unsupported, "op '" + op.name + "' placed on '" + std::string{device} + "': " +
                                             std::string{kind_of(device)} + " devices have no kernel for it");
  return {};
}

}  // namespace af
