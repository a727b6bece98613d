#include "ops/element.hpp"

#include <mutex>
#include <set>

namespace af {

const std::string* intern_origin_file(std::string_view name) {
  static std::mutex mtx;
  static std::set<std::string, std::less<>>* names = new std::set<std::string, std::less<>>;  // never freed: origins may be read at exit
  std::lock_guard<std::mutex> guard{mtx};
  auto it = names->find(name);
  if (it == names->end()) it = names->emplace(name).first;
  return &*it;
}

}  // namespace af
