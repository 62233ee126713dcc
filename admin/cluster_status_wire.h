// The cluster's state as the coordinator sends it (wire::ClusterState),
// read into the public ClusterStatus: what `ductile status`, the
// coordinator's /metrics and Coordinator::QueryStatus() show.
#ifndef DUCTILE_ADMIN_CLUSTER_STATUS_WIRE_H_
#define DUCTILE_ADMIN_CLUSTER_STATUS_WIRE_H_

#include "ductile/admin.h"
#include "proto/ductile.pb.h"

namespace ductile {

// Sums the servers' shares of the gradient noise scale (those alive and
// holding keys) and the workers' staleness histograms.
ClusterStatus ClusterStatusFromWire(const wire::ClusterState& state);

}  // namespace ductile

#endif  // DUCTILE_ADMIN_CLUSTER_STATUS_WIRE_H_
