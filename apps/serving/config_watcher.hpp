#pragma once

// TF Serving's --model_config_file_poll_wait_seconds: the model config file is read again every
// interval, and a list that changed is handed to the model server (model_server::reconfigure),
// which loads what was added and unloads what was left out. A file that does not read, parse or
// fit is reported once per change of its content and the served list is kept.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/serving/model_server.hpp"

namespace af::serving {

class model_config_watcher {
 public:
  /// `served` is the list the server was started with; `report` gets one line per reload or
  /// refusal. The first check is one interval from now.
  model_config_watcher(model_server& models, std::string path, std::vector<model_config> served, std::chrono::milliseconds interval,
                       std::function<void(const std::string&)> report);
  ~model_config_watcher();
  model_config_watcher(const model_config_watcher&) = delete;
  model_config_watcher& operator=(const model_config_watcher&) = delete;

  /// One check now, as the thread makes every interval: true when a changed list was applied.
  bool check_now();

 private:
  model_server& models_;
  const std::string path_;
  std::mutex check_mtx_;
  std::vector<model_config> served_;
  std::string last_refusal_;  // reported once until the file changes

  std::mutex stop_mtx_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::function<void(const std::string&)> report_;
  std::thread thread_;
};

}  // namespace af::serving
