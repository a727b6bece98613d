// A deliberate data race inside an actor's message handler: the TSan suite must report it.
// Debian's CAF is not instrumented, and the suppression that its reports once needed
// (race:libcaf_core.so) matched every handler's stack, so a race like this one went unseen.
// tests/CMakeLists.txt runs this program under TSan with tests/tsan.supp and passes only when
// TSan reports the race: a suppression broad enough to hide it fails the suite.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

namespace {

int unsynchronised_total = 0;  // written by the handler and by main, with no ordering between them

caf::behavior accumulate(caf::event_based_actor*) {
  return {[](int amount) { unsynchronised_total += amount; }};
}

}  // namespace

int main() {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto accumulator = sys.spawn(accumulate);
  for (int i = 0; i < 100; ++i) {
    caf::anon_send(accumulator, 1);
    unsynchronised_total += 1;
  }
  return 0;  // the system's destructor waits for the actor to finish its mailbox
}
