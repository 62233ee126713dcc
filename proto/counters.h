// A server's counters: the one list of their fields, and their wire form.
//
// ServerCounters (include/ductile/server.h) is the only struct of them.
// ForEachCounter names every field once; the wire message wire::Counters has
// a field of the same name and signedness for each (codec_test checks both
// ways), so the conversions below are written once, by name.
#ifndef DUCTILE_PROTO_COUNTERS_H_
#define DUCTILE_PROTO_COUNTERS_H_

#include "ductile/server.h"
#include "proto/ductile.pb.h"

namespace ductile {

// Calls f(name, c.field...) for every field of ServerCounters, in
// declaration order, with that field of each of the structs `c` (const or
// not).
template <typename F, typename... Counters>
void ForEachCounter(F&& f, Counters&... c) {
  f("requests", c.requests...);
  f("pushes", c.pushes...);
  f("pulls", c.pulls...);
  f("duplicates", c.duplicates...);
  f("redirects", c.redirects...);
  f("errors", c.errors...);
  f("refused_limits", c.refused_limits...);
  f("refused_permission", c.refused_permission...);
  f("bytes_in", c.bytes_in...);
  f("bytes_out", c.bytes_out...);
  f("keys_stored", c.keys_stored...);
  f("parked_pulls", c.parked_pulls...);
  f("min_clock", c.min_clock...);
  f("checkpoint_clock", c.checkpoint_clock...);
  f("checkpoints_written", c.checkpoints_written...);
  f("held_pushes", c.held_pushes...);
  f("slots_moving", c.slots_moving...);
  f("move_bytes_left", c.move_bytes_left...);
  f("gns_gradient_sq", c.gns_gradient_sq...);
  f("gns_noise_trace", c.gns_noise_trace...);
  f("gns_clocks", c.gns_clocks...);
  f("window_clients", c.window_clients...);
  f("window_expired", c.window_expired...);
  f("busy_us", c.busy_us...);
  f("apply_us", c.apply_us...);
  f("gns_us", c.gns_us...);
  f("queued_requests", c.queued_requests...);
  f("busy_run_peak", c.busy_run_peak...);
  f("gns_batch_gradient_sq", c.gns_batch_gradient_sq...);
  f("gns_batch_noise_trace", c.gns_batch_noise_trace...);
  f("gns_batch_clocks", c.gns_batch_clocks...);
  f("adascale_noise_scale", c.adascale_noise_scale...);
  f("shm_replies", c.shm_replies...);
  f("shm_pushes", c.shm_pushes...);
  f("shm_records", c.shm_records...);
  f("rows_admitted", c.rows_admitted...);
  f("row_pushes_dropped", c.row_pushes_dropped...);
  f("rows_evicted_idle", c.rows_evicted_idle...);
  f("rows_evicted_budget", c.rows_evicted_budget...);
  f("refused_connections", c.refused_connections...);
  f("failed_accepts", c.failed_accepts...);
  f("failed_handshakes", c.failed_handshakes...);
  f("refused_replies", c.refused_replies...);
  f("dropped_replies", c.dropped_replies...);
  f("refused_parked_pulls", c.refused_parked_pulls...);
}

void CountersToWire(const ServerCounters& counters, wire::Counters* out);
ServerCounters CountersFromWire(const wire::Counters& counters);

}  // namespace ductile

#endif  // DUCTILE_PROTO_COUNTERS_H_
