// A minimal ductile worker. Start a coordinator and a server (both use
// tcp://127.0.0.1:7000 by default), then this:
//
//   build/ductile coordinator --servers=1 --workers=1 &
//   build/ductile server &
//   build/examples/example_worker tcp://127.0.0.1:7000
#include <cstdio>
#include <vector>

#include "ductile/ductile.h"

int main(int argc, char** argv) {
  ductile::ClientOptions options;
  options.coordinator_address = argc > 1 ? argv[1] : "tcp://127.0.0.1:7000";
  auto client = ductile::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  ductile::TableOptions table;
  table.name = "weights";
  table.value_width = 4;  // floats per key
  table.rule = ductile::UpdateRule::kSgd;
  table.learning_rate = 0.1f;
  auto id = (*client)->CreateTable(table);
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    return 1;
  }
  const std::vector<ductile::Key> keys = {3, 17, 42};  // strictly increasing
  std::vector<float> gradient(keys.size() * 4, 1.0f);
  std::vector<float> weights(keys.size() * 4);
  for (int step = 0; step < 10; ++step) {
    // Asynchronous push and pull; the spans must outlive the handles.
    ductile::Handle push = (*client)->PushAsync(*id, keys, gradient);
    if (ductile::Status s = push.Wait(); !s.ok()) {
      std::fprintf(stderr, "push: %s\n", s.ToString().c_str());
      return 1;
    }
    if (ductile::Status s = (*client)->Pull(*id, keys, weights); !s.ok()) {
      std::fprintf(stderr, "pull: %s\n", s.ToString().c_str());
      return 1;
    }
    (*client)->Clock();
  }
  std::printf("weights[0] after 10 SGD steps: %.2f\n", weights[0]);  // -1.00
  return (*client)->Finish().ok() ? 0 : 1;
}
