// Uses an installed ductile through its umbrella header alone: the public
// headers must compile without any of ductile's private dependencies, and
// libductile.so must link and load. Exits 0 only if every check holds.
#include <ductile/ductile.h>

#include <iostream>
#include <string>

int main() {
  ductile::TableOptions table;
  table.name = "embed";
  table.value_width = 4;
  table.rule = ductile::UpdateRule::kSgd;
  table.init.kind = ductile::InitKind::kUniform;

  const ductile::Status invalid =
      ductile::InvalidArgumentError("table " + table.name + " is wrong");
  const std::string name(ductile::StatusCodeName(invalid.code()));
  const std::string text = invalid.ToString();
  std::cout << "StatusCodeName: " << name << "\n"
            << "Status::ToString: " << text << "\n";
  if (name.empty() || text.find(name) == std::string::npos ||
      text.find(invalid.message()) == std::string::npos) {
    std::cerr << "ToString() should name the code and carry the message\n";
    return 1;
  }

  // Nothing listens on port 1: the query must fail, not hang or crash.
  const ductile::Result<ductile::ClusterStatus> cluster =
      ductile::QueryClusterStatus("tcp://127.0.0.1:1", 200);
  if (cluster.ok()) {
    std::cerr << "QueryClusterStatus succeeded with no coordinator\n";
    return 1;
  }
  std::cout << "QueryClusterStatus with no coordinator: " << cluster.status()
            << "\n";
  return 0;
}
