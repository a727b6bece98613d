#pragma once

// CAF inspection of the values that travel in actorflow messages. Include only from actor
// translation units (pulls in CAF).

#include <string>

#include "actors/tensor_inspect.hpp"
#include "ops/element.hpp"

namespace af {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, named_tensor& x) {
  return f(x.name, x.value);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, element& x) {
  return f(x.fields);
}

}  // namespace af
